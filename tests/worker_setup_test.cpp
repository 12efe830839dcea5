// worker_setup_test: options.worker_setup runs once in every worker and actor
// host before its first task (a replaced worker runs it again); one that throws
// fails each task sent there with a task_error saying so, and nothing loops;
// an unregistered one is refused at init.
#include <unistd.h>

#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "support.hpp"

namespace {
using namespace std::chrono_literals;

int setups_here = 0;  // per process: set by the setup, read by tasks
void count_setup() { ++setups_here; }
void failing_setup() { throw std::runtime_error("no licence server"); }
void unregistered_setup() {}
int plus_one(int x) { return x + 1; }
/// A setup that waits on a task of its own (which may be sent to run nested here).
void setup_waiting_on_a_task() {
  if (manta::get(manta::task(plus_one).remote(1), 20s) == 2) ++setups_here;
}
/// This process's pid and how many times setup ran in it.
std::pair<int, int> probe(int) { return {static_cast<int>(::getpid()), setups_here}; }
int crash(int) {
  ::_exit(9);
  return 0;
}
MANTA_REMOTE(count_setup, failing_setup, probe, crash, plus_one, setup_waiting_on_a_task);

struct Host {
  int setups() const { return setups_here; }
};
MANTA_ACTOR(Host, &Host::setups);

class worker_setup : public manta::testing::runtime_fixture {};

TEST_F(worker_setup, runs_once_in_every_worker_and_actor_host) {
  start(2, {.worker_setup = count_setup});
  EXPECT_EQ(setups_here, 0) << "the driver does not run it";
  std::vector<manta::object_ref<std::pair<int, int>>> refs;
  for (int i = 0; i < 200; ++i) refs.push_back(manta::task(probe).remote(i));
  std::set<int> pids;
  for (auto [pid, n] : manta::get(refs, 20s)) {
    EXPECT_EQ(n, 1) << "pid " << pid;
    pids.insert(pid);
  }
  auto host = manta::actor<Host>().remote();
  EXPECT_EQ(manta::get(host.task(&Host::setups).remote(), 10s), 1);
  // A replaced worker sets up again.
  EXPECT_THROW(manta::get(manta::task(crash).max_retries(0).remote(0), 10s), manta::worker_crashed_error);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(manta::get(manta::task(probe).remote(i), 10s).second, 1);
}

TEST_F(worker_setup, a_failing_setup_fails_each_task_clearly_and_nothing_loops) {
  start(2, {.worker_setup = failing_setup});
  for (int i = 0; i < 5; ++i) {
    try {
      manta::get(manta::task(probe).remote(i), 10s);
      FAIL() << "a task ran without its setup";
    } catch (const manta::task_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("worker_setup 'failing_setup' failed"), std::string::npos) << what;
      EXPECT_NE(what.find("no licence server"), std::string::npos) << what;
    }
  }
  // The pool's workers stay (an actor host whose constructor failed ends, as any does).
  const auto c = manta::detail::counters();
  EXPECT_EQ(c.processes_lost, 0u) << "a failed setup must not kill (and restart) processes";
  EXPECT_EQ(c.task_retries, 0u);
  try {
    auto host = manta::actor<Host>().remote();
    manta::get(host.task(&Host::setups).remote(), 10s);
    FAIL() << "an actor started without its setup";
  } catch (const manta::actor_died_error& e) {
    EXPECT_NE(std::string(e.what()).find("no licence server"), std::string::npos) << e.what();
  }
}

TEST_F(worker_setup, a_setup_may_wait_on_tasks) {
  start(1, {.worker_setup = setup_waiting_on_a_task});  // one worker: the task can only nest there
  EXPECT_EQ(manta::get(manta::task(probe).remote(0), 20s).second, 1);
}

TEST(worker_setup_init, an_unregistered_setup_is_refused_at_init) {
  EXPECT_THROW(manta::init({.num_workers = 1, .worker_setup = unregistered_setup}), manta::usage_error);
  EXPECT_FALSE(manta::is_initialized());
  manta::init({.num_workers = 1});  // and the next init works
  EXPECT_EQ(manta::get(manta::task(probe).remote(0), 10s).second, 0);
  manta::shutdown();
}

}  // namespace

// timeout_test: task(f).timeout(d): a run past d has its process killed and
// replaced, its result fails with timeout_error naming the function and the
// limit, it is not retried, and the pool goes on; what shared the process is
// retried uncharged; runs within the limit are untouched.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "support.hpp"

namespace {
using namespace std::chrono_literals;
using manta::testing::runtime_fixture;
using manta::testing::temp_path;

/// Appends a line to `log`, then sleeps `ms`; returns ms.
int logged_sleep(std::string log, int ms) {
  { std::ofstream(log, std::ios::app) << "run\n"; }
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
int twice(int x) { return 2 * x; }
int pid_of_worker() { return static_cast<int>(::getpid()); }
/// Waits for a child that outlives its timeout; says what happened to it.
std::string parent_of_a_slow_child(std::string log) {
  try {
    manta::get(manta::task(logged_sleep).timeout(200ms).remote(log, 30000));
    return "returned";
  } catch (const manta::timeout_error&) {
    return "timed out";
  }
}
MANTA_REMOTE(logged_sleep, twice, pid_of_worker, parent_of_a_slow_child);

/// Counts its calls; `hold` blocks at a gate the test may never open.
struct Counter {
  int n = 0;
  int add() { return ++n; }
  int hold(std::string gate) {
    manta::testing::wait_at_gate(gate);
    return ++n;
  }
  int nap(int ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return ++n;
  }
  int pid() const { return static_cast<int>(::getpid()); }
};
MANTA_ACTOR(Counter, &Counter::add, &Counter::hold, &Counter::nap, &Counter::pid);

int lines(const std::string& path) {
  std::ifstream in(path);
  return static_cast<int>(std::count(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), '\n'));
}

class timeouts : public runtime_fixture {
 protected:
  std::string log = temp_path("timeout-log");
  void SetUp() override { ::unlink(log.c_str()); }
  void TearDown() override {
    ::unlink(log.c_str());
    runtime_fixture::TearDown();
  }
};

TEST_F(timeouts, a_run_past_its_limit_fails_and_the_pool_goes_on) {
  start(2);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = manta::task(logged_sleep).timeout(300ms).remote(log, 30000);
  try {
    manta::get(r, 20s);
    FAIL() << "the task returned";
  } catch (const manta::timeout_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("logged_sleep"), std::string::npos) << what;
    EXPECT_NE(what.find("0.3 s"), std::string::npos) << what;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);  // bounded: the task alone runs 30 s
  EXPECT_EQ(lines(log), 1) << "a timed-out task must not be retried";
  EXPECT_EQ(manta::detail::counters().task_retries, 0u);
  // The pool is whole again: both workers answer.
  std::vector<manta::object_ref<int>> refs;
  for (int i = 0; i < 200; ++i) refs.push_back(manta::task(twice).remote(i));
  auto v = manta::get(refs, 20s);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(v[static_cast<std::size_t>(i)], 2 * i);
  EXPECT_TRUE(manta::testing::eventually([] { return manta::detail::runtime_process_ids().size() == 3; }));
}

TEST_F(timeouts, runs_within_their_limit_are_untouched) {
  start(2);
  std::vector<manta::object_ref<int>> refs;
  for (int i = 0; i < 500; ++i) refs.push_back(manta::task(twice).timeout(20s).remote(i));
  auto v = manta::get(refs, 30s);
  for (int i = 0; i < 500; ++i) EXPECT_EQ(v[static_cast<std::size_t>(i)], 2 * i);
  EXPECT_EQ(manta::detail::counters().processes_lost, 0u);
}

TEST_F(timeouts, tasks_sharing_the_killed_process_are_not_charged) {
  start(1);  // one worker: whatever is sent meanwhile shares the doomed process
  auto slow = manta::task(logged_sleep).timeout(300ms).remote(log, 30000);
  std::vector<manta::object_ref<int>> quick;
  for (int i = 0; i < 20; ++i) quick.push_back(manta::task(twice).max_retries(0).remote(i));
  EXPECT_THROW(manta::get(slow, 20s), manta::timeout_error);
  auto v = manta::get(quick, 20s);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(v[static_cast<std::size_t>(i)], 2 * i);
}

TEST_F(timeouts, a_child_with_a_timeout_never_takes_its_waiting_parent_with_it) {
  start(2);
  // The parent waits for the child: were the child run nested on the parent's
  // worker, its kill would kill the parent too (and the retried parent would
  // start the child again, forever).
  EXPECT_EQ(manta::get(manta::task(parent_of_a_slow_child).max_retries(0).remote(log), 20s), "timed out");
  EXPECT_EQ(lines(log), 1);
}

TEST_F(timeouts, an_actor_call_past_its_limit_fails_and_its_actor_restarts) {
  start(2);
  auto c = manta::actor<Counter>().max_restarts(1).remote();
  EXPECT_EQ(manta::get(c.task(&Counter::add).remote(), 30s), 1);
  const int first_pid = manta::get(c.task(&Counter::pid).remote(), 30s);
  manta::testing::fifo_gate never;
  auto held = c.task(&Counter::hold).timeout(200ms).remote(never.path());
  auto behind = c.task(&Counter::add).remote();  // sent with it: retried, uncharged
  try {
    manta::get(held, 30s);
    FAIL() << "no timeout";
  } catch (const manta::timeout_error& e) {
    EXPECT_NE(std::string(e.what()).find("Counter::hold"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("0.2 s"), std::string::npos) << e.what();
  }
  EXPECT_EQ(manta::get(behind, 30s), 1) << "ran once, on the restarted actor (its state is new)";
  EXPECT_NE(manta::get(c.task(&Counter::pid).remote(), 30s), first_pid);
  EXPECT_TRUE(manta::testing::eventually([&] { return manta::testing::gone(first_pid); }, 10s));
}

TEST_F(timeouts, an_actor_out_of_restarts_dies_saying_why) {
  start(2);
  auto c = manta::actor<Counter>().remote();  // max_restarts 0
  manta::testing::fifo_gate never;
  EXPECT_THROW(manta::get(c.task(&Counter::hold).timeout(100ms).remote(never.path()), 30s), manta::timeout_error);
  try {
    manta::get(c.task(&Counter::add).remote(), 30s);
    FAIL() << "the actor lives";
  } catch (const manta::actor_died_error& e) {
    EXPECT_NE(std::string(e.what()).find("timeout"), std::string::npos) << e.what();
  }
}

TEST_F(timeouts, an_actor_call_is_timed_from_its_start_not_from_its_submission) {
  start(2);
  auto c = manta::actor<Counter>().remote();
  auto slow = c.task(&Counter::nap).remote(600);
  auto quick = c.task(&Counter::add).timeout(400ms).remote();  // waits 600 ms behind `slow`, runs in no time
  EXPECT_EQ(manta::get(slow, 30s), 1);
  EXPECT_EQ(manta::get(quick, 30s), 2);
  EXPECT_THROW(c.task(&Counter::add).timeout(0ms), manta::usage_error);
}

TEST_F(timeouts, a_limit_must_be_positive) {
  start(1);
  EXPECT_THROW(manta::task(twice).timeout(0ms), manta::usage_error);
  EXPECT_THROW(manta::task(twice).timeout(-1s), manta::usage_error);
  EXPECT_EQ(manta::get(manta::task(twice).remote(1), 10s), 2);
  // duration::max() means no limit (it overflows nanoseconds).
  EXPECT_EQ(manta::get(manta::task(twice).timeout(std::chrono::hours::max()).remote(2), 10s), 4);
  auto c = manta::actor<Counter>().remote();
  EXPECT_THROW(c.task(&Counter::pid).timeout(0s), manta::usage_error);
  EXPECT_GT(manta::get(c.task(&Counter::pid).timeout(std::chrono::seconds::max()).remote(), 10s), 0);
}

}  // namespace

// actor_test: actors keep state in a process of their own, run calls in order,
// travel as handles through tasks, restart after real kills, and end when their
// last handle goes; and resources are held and waited for.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support.hpp"

namespace {
using namespace std::chrono_literals;
using manta::testing::gone;

int report_pipe[2] = {-1, -1};  // created before init: every process can report through it

class Counter {
 public:
  explicit Counter(int start = 0) : value_(start) {}
  int increment() { return ++value_; }
  int add(int n, const std::string&) { return value_ += n; }
  int read() const { return value_; }
  void reset() { value_ = 0; }
  int pid() const { return static_cast<int>(::getpid()); }
  int fail(int) { throw std::logic_error("counter refused"); }
  /// Reports its pid, then waits to be killed.
  int block_until_killed() {
    int p = ::getpid();
    [[maybe_unused]] auto n = ::write(report_pipe[1], &p, sizeof p);
    for (;;) ::pause();
  }
  double sum(std::span<const double> xs) const {
    double s = 0;
    for (double x : xs) s += x;
    return s;
  }
  std::tuple<int, std::string> both() const { return {value_, std::to_string(value_)}; }
  std::pair<long long, long long> busy(int ms) {
    auto t0 = std::chrono::steady_clock::now().time_since_epoch().count();
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return {t0, std::chrono::steady_clock::now().time_since_epoch().count()};
  }

 private:
  int value_;
};
MANTA_ACTOR(Counter, &Counter::increment, &Counter::add, &Counter::read, &Counter::reset,
            &Counter::pid, &Counter::fail, &Counter::block_until_killed, &Counter::sum, &Counter::both,
            &Counter::busy);

struct Broken {
  Broken() { throw std::runtime_error("no constructor for you"); }
  int read() const { return 0; }
};
MANTA_ACTOR(Broken, &Broken::read);

/// Two calls meet: the first waits for the second (needs max_concurrency >= 2).
class Rendezvous {
 public:
  bool wait_for_partner() {
    std::unique_lock lock(mu_);
    arrived_ = true;
    cv_.notify_all();
    return cv_.wait_for(lock, 10s, [&] { return partner_; });
  }
  bool partner() {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, 10s, [&] { return arrived_; });
    partner_ = true;
    cv_.notify_all();
    return arrived_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool arrived_ = false, partner_ = false;
};
MANTA_ACTOR(Rendezvous, &Rendezvous::wait_for_partner, &Rendezvous::partner);

/// Calls that return once `n` of them are running at once.
class Gathering {
 public:
  bool arrive(int n) {
    std::unique_lock lock(mu_);
    ++arrived_;
    cv_.notify_all();
    return cv_.wait_for(lock, 20s, [&] { return arrived_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
};
MANTA_ACTOR(Gathering, &Gathering::arrive);

int call_through(manta::actor_handle<Counter> c) { return manta::get(c.task(&Counter::increment).remote()); }
int pass_on(manta::actor_handle<Counter> c) { return manta::get(manta::task(call_through).remote(c)); }
manta::actor_handle<Counter> make_counter(int start) { return manta::actor<Counter>().remote(start); }
int read_named(std::string name) {
  return manta::get(manta::get_actor<Counter>(name).task(&Counter::read).remote());
}
/// Starts a named actor from a task, and calls it.
int start_named(std::string name) {
  return manta::get(manta::actor<Counter>().name(name).remote(100).task(&Counter::increment).remote());
}
int use_sensor(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
std::string gpus_seen(int) {
  std::string ids;
  for (int g : manta::gpu_ids()) ids += std::to_string(g) + ";";
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  return ids + "|" + (env ? env : "");
}
MANTA_REMOTE(call_through, pass_on, make_counter, read_named, start_named, use_sensor, gpus_seen);

int read_pid() {
  pollfd p{report_pipe[0], POLLIN, 0};
  if (::poll(&p, 1, 10000) != 1) return -1;
  int pid = -1;
  return ::read(report_pipe[0], &pid, sizeof pid) == sizeof pid ? pid : -1;
}

class actors : public manta::testing::runtime_fixture, public ::testing::WithParamInterface<int> {
 protected:
  void SetUp() override {
    ASSERT_EQ(::pipe(report_pipe), 0);
    start(GetParam());
  }
  void TearDown() override {
    runtime_fixture::TearDown();
    ::close(report_pipe[0]);
    ::close(report_pipe[1]);
  }
};
INSTANTIATE_TEST_SUITE_P(workers, actors, ::testing::Values(1, 2));

TEST(actor_misuse, an_actor_before_init_names_the_call) {
  try {
    manta::actor<Counter>().remote(1);
    FAIL() << "no exception";
  } catch (const manta::usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("actor<T>().remote needs a running runtime"), std::string::npos)
        << e.what();
  }
}

TEST_P(actors, keep_state_and_run_calls_in_submission_order) {
  auto c = manta::actor<Counter>().remote(10);
  std::vector<manta::object_ref<int>> refs;
  for (int i = 0; i < 1000; ++i) refs.push_back(c.task(&Counter::increment).remote());
  auto values = manta::get(refs, 30s);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(values[i], 11 + i);
  EXPECT_EQ(manta::get(c.task(&Counter::add).remote(5, "five")), 1015);
  manta::get(c.task(&Counter::reset).remote());  // void
  EXPECT_EQ(manta::get(c.task(&Counter::read).remote()), 0);
  auto [v, s] = c.task(&Counter::both).num_returns<2>().remote();
  EXPECT_EQ(manta::get(v), 0);
  EXPECT_EQ(manta::get(s), "0");
  // The actor lives in a process of its own.
  EXPECT_NE(manta::get(c.task(&Counter::pid).remote()), ::getpid());
}

TEST_P(actors, method_arguments_may_be_refs_read_in_place) {
  auto c = manta::actor<Counter>().remote();
  auto big = manta::put(std::vector<double>(1 << 18, 0.5));
  EXPECT_EQ(manta::get(c.task(&Counter::sum).remote(big)), 0.5 * (1 << 18));
  // A call waiting for an argument holds back the calls behind it.
  auto slow = manta::task(use_sensor).remote(200);
  auto first = c.task(&Counter::add).remote(slow, std::string("x"));
  auto second = c.task(&Counter::increment).remote();
  EXPECT_EQ(manta::get(first), 200);
  EXPECT_EQ(manta::get(second), 201);
}

TEST_P(actors, different_actors_run_in_parallel) {
  auto a = manta::actor<Counter>().remote();
  auto b = manta::actor<Counter>().remote();
  auto ra = a.task(&Counter::busy).remote(300);
  auto rb = b.task(&Counter::busy).remote(300);
  auto [sa, ea] = manta::get(ra, 10s);
  auto [sb, eb] = manta::get(rb, 10s);
  EXPECT_LT(std::max(sa, sb), std::min(ea, eb)) << "the two calls did not overlap";
}

TEST_P(actors, handles_travel_through_tasks_and_keep_the_actor_alive) {
  auto c = manta::actor<Counter>().remote();
  auto through_two = manta::task(pass_on).remote(c);  // driver -> task -> task -> actor
  c = {};                                             // the creator lets go of its handle
  EXPECT_EQ(manta::get(through_two, 20s), 1);
  auto made = manta::get(manta::task(make_counter).remote(40));  // created in a task, returned
  EXPECT_EQ(manta::get(made.task(&Counter::increment).remote()), 41);
  auto stored = manta::put(std::vector<manta::actor_handle<Counter>>{made, made});
  auto back = manta::get(stored);
  EXPECT_EQ(manta::get(back[1].task(&Counter::increment).remote()), 42);
}

TEST_P(actors, an_actor_ends_when_its_last_handle_goes) {
  int pid;
  {
    auto c = manta::actor<Counter>().remote();
    pid = manta::get(c.task(&Counter::pid).remote());
    auto copy = c;
  }
  EXPECT_TRUE(manta::testing::eventually([&] { return gone(pid); })) << pid;
}

TEST_P(actors, named_actors_are_found_from_any_process) {
  auto c = manta::actor<Counter>().name("tally").remote(7);
  auto found = manta::get_actor<Counter>("tally");
  EXPECT_EQ(found, c);
  EXPECT_EQ(manta::get(found.task(&Counter::increment).remote()), 8);
  EXPECT_EQ(manta::get(manta::task(read_named).remote(std::string("tally"))), 8);
  EXPECT_THROW(manta::actor<Counter>().name("tally").remote(), manta::usage_error);
  EXPECT_THROW(manta::get_actor<Counter>("nobody"), manta::usage_error);
  EXPECT_THROW(manta::get_actor<Rendezvous>("tally"), manta::usage_error);
  // A named actor outlives its handles, until kill.
  int pid = manta::get(c.task(&Counter::pid).remote());
  c = {};
  found = {};
  EXPECT_EQ(manta::get(manta::get_actor<Counter>("tally").task(&Counter::read).remote()), 8);
  EXPECT_TRUE(manta::testing::alive(pid));
  manta::kill(manta::get_actor<Counter>("tally"));
  EXPECT_TRUE(manta::testing::eventually([&] { return gone(pid); }));
  EXPECT_THROW(manta::get_actor<Counter>("tally"), manta::usage_error);
}

TEST_P(actors, a_task_starting_an_actor_under_a_taken_name_fails_and_nothing_else_does) {
  // Found by a user: the second start freed its constructor, then used it (the driver crashed).
  EXPECT_EQ(manta::get(manta::task(start_named).remote(std::string("twice")), std::chrono::seconds(30)), 101);
  for (int i = 0; i < 2; ++i) {
    try {
      manta::get(manta::task(start_named).remote(std::string("twice")), std::chrono::seconds(30));
      ADD_FAILURE() << "a second actor named 'twice' started";
    } catch (const manta::error& e) {
      EXPECT_NE(std::string(e.what()).find("the name is taken"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(manta::get(manta::get_actor<Counter>("twice").task(&Counter::read).remote()), 101);
  manta::kill(manta::get_actor<Counter>("twice"));
}

TEST_P(actors, killed_actors_fail_their_calls) {
  auto c = manta::actor<Counter>().max_restarts(3).remote();
  EXPECT_EQ(manta::get(c.task(&Counter::increment).remote()), 1);
  auto stuck = c.task(&Counter::block_until_killed).remote();
  ASSERT_GT(read_pid(), 0);
  auto queued = c.task(&Counter::increment).remote();
  manta::kill(c);
  EXPECT_THROW(manta::get(stuck, 10s), manta::actor_died_error);
  EXPECT_THROW(manta::get(queued, 10s), manta::actor_died_error);
  try {
    manta::get(c.task(&Counter::read).remote(), 10s);
    FAIL() << "no exception";
  } catch (const manta::actor_died_error& e) {
    EXPECT_NE(std::string(e.what()).find("killed"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Counter"), std::string::npos) << e.what();
  }
}

TEST_P(actors, a_killed_host_restarts_with_the_constructor_rerun) {
  // A call sent before the death is noticed is in flight: one retry covers it.
  auto c = manta::actor<Counter>().max_restarts(1).max_task_retries(1).remote(100);
  EXPECT_EQ(manta::get(c.task(&Counter::increment).remote()), 101);
  int first = manta::get(c.task(&Counter::pid).remote());
  ASSERT_EQ(::kill(first, SIGKILL), 0);
  // The restarted actor starts over from its constructor's arguments.
  EXPECT_EQ(manta::get(c.task(&Counter::increment).remote(), 20s), 101);
  int second = manta::get(c.task(&Counter::pid).remote());
  EXPECT_NE(second, first);
  ASSERT_EQ(::kill(second, SIGKILL), 0);
  // No restart left: every call fails, naming the actor and the signal.
  try {
    manta::get(c.task(&Counter::increment).remote(), 20s);
    FAIL() << "no exception";
  } catch (const manta::actor_died_error& e) {
    EXPECT_NE(std::string(e.what()).find("SIGKILL"), std::string::npos) << e.what();
  }
  EXPECT_THROW(manta::get(c.task(&Counter::read).remote(), 20s), manta::actor_died_error);
}

TEST_P(actors, calls_in_flight_are_retried_only_when_allowed) {
  auto retried = manta::actor<Counter>().max_restarts(1).max_task_retries(1).remote();
  auto call = retried.task(&Counter::block_until_killed).remote();
  int first = read_pid();
  ASSERT_GT(first, 0);
  ASSERT_EQ(::kill(first, SIGKILL), 0);
  int second = read_pid();  // the same call, running again on the restarted actor
  ASSERT_GT(second, 0);
  EXPECT_NE(second, first);
  ASSERT_EQ(::kill(second, SIGKILL), 0);  // no restart left now
  EXPECT_THROW(manta::get(call, 20s), manta::actor_died_error);

  auto not_retried = manta::actor<Counter>().max_restarts(1).remote();
  auto lost = not_retried.task(&Counter::block_until_killed).remote();
  int pid = read_pid();
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  EXPECT_THROW(manta::get(lost, 20s), manta::actor_died_error);
  EXPECT_EQ(manta::get(not_retried.task(&Counter::increment).remote(), 20s), 1);  // restarted
}

TEST_P(actors, calls_queued_behind_a_crashing_call_run_after_the_restart) {
  // They never ran: they are not the crash's, and run on the restarted actor
  // (they failed saying the actor "died while running this call").
  auto c = manta::actor<Counter>().max_restarts(1).remote();
  EXPECT_EQ(manta::get(c.task(&Counter::read).remote(), 20s), 0);
  auto crashing = c.task(&Counter::block_until_killed).remote();
  int pid = read_pid();
  ASSERT_GT(pid, 0);
  auto first = c.task(&Counter::increment).remote();
  auto second = c.task(&Counter::increment).remote();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  EXPECT_THROW(manta::get(crashing, 20s), manta::actor_died_error);
  EXPECT_EQ(manta::get(first, 20s), 1);
  EXPECT_EQ(manta::get(second, 20s), 2);
}

TEST_P(actors, exceptions_in_methods_and_constructors) {
  auto c = manta::actor<Counter>().remote(3);
  EXPECT_THROW(manta::get(c.task(&Counter::fail).remote(1)), manta::task_error);
  EXPECT_EQ(manta::get(c.task(&Counter::increment).remote()), 4);  // state kept, still serving
  auto broken = manta::actor<Broken>().max_restarts(2).remote();
  try {
    manta::get(broken.task(&Broken::read).remote(), 20s);
    FAIL() << "no exception";
  } catch (const manta::actor_died_error& e) {
    EXPECT_NE(std::string(e.what()).find("no constructor for you"), std::string::npos) << e.what();
  }
}

TEST_P(actors, max_concurrency_runs_methods_at_once) {
  auto r = manta::actor<Rendezvous>().max_concurrency(2).remote();
  auto waiter = r.task(&Rendezvous::wait_for_partner).remote();
  auto partner = r.task(&Rendezvous::partner).remote();
  EXPECT_TRUE(manta::get(waiter, 20s));
  EXPECT_TRUE(manta::get(partner, 20s));
}

// The host starts 16 executor threads and adds more only while all are busy:
// 40 calls that wait for each other need all 40 at once.
TEST_P(actors, max_concurrency_beyond_the_threads_started_at_once) {
  auto g = manta::actor<Gathering>().max_concurrency(40).remote();
  std::vector<manta::object_ref<bool>> calls;
  for (int i = 0; i < 40; ++i) calls.push_back(g.task(&Gathering::arrive).remote(40));
  for (auto& c : calls) EXPECT_TRUE(manta::get(c, 30s));
}

TEST(resources, custom_resources_are_held_and_waited_for) {
  manta::init({.num_workers = 2, .resources = {{"sensor", 1}}});
  EXPECT_EQ(manta::cluster_resources()["sensor"], 1);
  // Timed from before the submissions: the first task may start before the second is sent.
  auto t0 = std::chrono::steady_clock::now();
  auto a = manta::task(use_sensor).resources({{"sensor", 1}}).remote(200);
  auto b = manta::task(use_sensor).resources({{"sensor", 1}}).remote(200);
  EXPECT_EQ(manta::get(a, 10s) + manta::get(b, 10s), 400);
  // One sensor: the second waited for the first (a bound of what the wait means, not a speed).
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 400ms);
  try {
    manta::task(use_sensor).resources({{"sensor", 2}}).remote(1);
    FAIL() << "no exception";
  } catch (const manta::usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("sensor"), std::string::npos) << e.what();
  }
  try {
    manta::task(use_sensor).resources({{"laser", 1}}).remote(1);
    FAIL() << "no exception";
  } catch (const manta::usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("laser"), std::string::npos) << e.what();
  }
  EXPECT_THROW(manta::actor<Counter>().num_gpus(1).remote(), manta::usage_error);
  EXPECT_EQ(manta::get(manta::task(use_sensor).remote(1)), 1);  // the runtime carries on
  manta::shutdown();
}

TEST(resources, gpu_ids_are_handed_out_exclusively) {
  manta::init({.num_workers = 2, .num_gpus = 2});
  EXPECT_EQ(manta::cluster_resources()["GPU"], 2);
  std::string one = manta::get(manta::task(gpus_seen).num_gpus(1).remote(0));
  EXPECT_TRUE(one == "0;|0" || one == "1;|1") << one;
  std::string both = manta::get(manta::task(gpus_seen).num_gpus(2).remote(0));
  EXPECT_EQ(both, "0;1;|0,1");
  EXPECT_THROW(manta::task(gpus_seen).num_gpus(3).remote(0), manta::usage_error);
  auto holder = manta::actor<Counter>().num_gpus(1).remote();
  manta::get(holder.task(&Counter::read).remote());
  EXPECT_EQ(manta::available_resources()["GPU"], 1);
  manta::kill(holder);
  EXPECT_TRUE(manta::testing::eventually([] { return manta::available_resources()["GPU"] == 2; }));
  manta::shutdown();
}

TEST(resources, an_actor_holds_its_cpus_for_its_life) {
  manta::init({.num_workers = 2});
  auto greedy = manta::actor<Counter>().num_cpus(2).remote();
  manta::get(greedy.task(&Counter::read).remote());
  EXPECT_EQ(manta::available_resources()["CPU"], 0);
  auto waits = manta::task(use_sensor).remote(1);
  EXPECT_THROW(manta::get(waits, 300ms), manta::timeout_error);  // no CPU to run on
  manta::kill(greedy);
  EXPECT_EQ(manta::get(waits, 10s), 1);
  manta::shutdown();
}

TEST(resources, an_actor_asking_a_negative_or_endless_amount_is_refused) {
  for (double amount : {-1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()})
    EXPECT_THROW(manta::actor<Counter>().resources({{"sensor", amount}}), manta::usage_error) << amount;
}

}  // namespace

// local_mode_test: options.local_mode runs every task and method in the driver,
// on the submitting thread, one at a time, with the API and errors of the
// process runtime: refs, nested tasks, failures and their chains, retries,
// timeouts, resources, actors (named, killed, failing constructors), the pool,
// queues, streams, and several threads submitting at once.
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "support.hpp"

namespace {
using namespace std::chrono_literals;

long thread_id() { return static_cast<long>(::syscall(SYS_gettid)); }

std::pair<int, long> where(int) { return {static_cast<int>(::getpid()), thread_id()}; }
int square(int x) { return x * x; }
int add(int a, int b) { return a + b; }
int fail(int x) { throw std::invalid_argument("bad input " + std::to_string(x)); }
long sum_span(std::span<const long> xs) {
  long s = 0;
  for (long x : xs) s += x;
  return s;
}
int nested_sum(int n) {
  std::vector<manta::object_ref<int>> refs;
  for (int i = 0; i < n; ++i) refs.push_back(manta::task(square).remote(i));
  int s = 0;
  for (int v : manta::get(refs)) s += v;
  return s;
}
std::tuple<int, std::string> two(int x) { return {x, std::to_string(x)}; }
manta::buffer<double> filled(int n) {
  auto b = manta::make_buffer<double>(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) b[static_cast<std::size_t>(i)] = i;
  return b;
}
int attempts = 0;  // the driver's own: tasks run here
int flaky(int x) {
  if (++attempts < 3) throw std::runtime_error("not yet");
  return x;
}
int slow(int x) {
  std::this_thread::sleep_for(50ms);
  return x;
}
std::atomic<int> running{0}, most_at_once{0};
int exclusive(int x) {
  int now = ++running;
  int seen = most_at_once.load();
  while (now > seen && !most_at_once.compare_exchange_weak(seen, now)) {
  }
  std::this_thread::sleep_for(1ms);
  --running;
  return x;
}
int setups = 0;
void count_setup() { ++setups; }
void count_to(manta::emitter<int>& out, int n) {
  for (int i = 0; i < n; ++i) out.emit(i);
}
void fill_queue(manta::queue<int> q, int n) {
  for (int i = 0; i < n; ++i) q.put(i);
}
int shutdown_inside(int x);
MANTA_REMOTE(shutdown_inside, where, square, add, fail, sum_span, nested_sum, two, filled, flaky, slow, exclusive, count_setup,
             count_to, fill_queue);

struct Counter {
  int n = 0;
  /// Kills itself (by name) and goes on using its own state: the instance must
  /// outlive the call.
  int kill_self() {
    manta::kill(manta::get_actor<Counter>("self"));
    return ++n;
  }
  explicit Counter(int start) : n(start) {
    if (start < 0) throw std::domain_error("negative start");
  }
  int inc() { return ++n; }
  int pid() const { return static_cast<int>(::getpid()); }
};
MANTA_ACTOR(Counter, &Counter::inc, &Counter::pid, &Counter::kill_self);
int shutdown_inside(int x) {
  manta::shutdown();  // in a task: stops nothing, as in a worker
  return x;
}

class local_mode : public ::testing::Test {
 protected:
  void start(manta::options o = {}) {
    o.local_mode = true;
    manta::init(o);
  }
  void TearDown() override { manta::shutdown(); }
};

TEST_F(local_mode, tasks_run_in_the_driver_on_the_calling_thread) {
  start();
  EXPECT_TRUE(manta::detail::runtime_process_ids().empty()) << "no zygote, no worker";
  auto [pid, tid] = manta::get(manta::task(where).remote(0));
  EXPECT_EQ(pid, ::getpid());
  EXPECT_EQ(tid, thread_id());
  std::thread other([&] {
    auto [p2, t2] = manta::get(manta::task(where).remote(1));
    EXPECT_EQ(p2, ::getpid());
    EXPECT_EQ(t2, thread_id());
  });
  other.join();
}

TEST_F(local_mode, refs_values_and_nested_tasks_work_as_in_processes) {
  start();
  auto a = manta::task(square).remote(7);
  EXPECT_EQ(manta::get(manta::task(add).remote(a, 1)), 50);
  std::vector<long> big(1 << 20);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<long>(i);
  auto stored = manta::put(big);
  EXPECT_EQ(manta::get(manta::task(sum_span).remote(stored)), (long(1 << 20) - 1) * (1 << 20) / 2);
  EXPECT_EQ(manta::get(manta::task(nested_sum).remote(10)), 285);
  auto [x, s] = manta::task(two).num_returns<2>().remote(5);
  EXPECT_EQ(manta::get(x), 5);
  EXPECT_EQ(manta::get(s), "5");
  auto v = manta::get(manta::task(filled).remote(1000));
  ASSERT_EQ(v.size(), 1000u);
  EXPECT_EQ(v[999], 999.0);
  auto view = manta::get_view(stored);
  EXPECT_EQ(view.size(), big.size());
  EXPECT_EQ(view[12345], 12345);
  auto [ready, pending] = manta::wait(std::vector{a}, 1, 0s);
  EXPECT_EQ(ready.size(), 1u);
  manta::cancel(a);  // done already: left alone
  EXPECT_EQ(manta::get(a), 49);
  int i = 0;
  std::vector<manta::object_ref<int>> refs{manta::task(square).remote(1), manta::task(square).remote(2)};
  for (auto& r : manta::as_completed(refs)) i += manta::get(r);
  EXPECT_EQ(i, 5);
}

TEST_F(local_mode, failures_retries_and_timeouts_are_the_same_errors) {
  start();
  auto bad = manta::task(fail).remote(3);
  try {
    manta::get(bad);
    FAIL() << "no error";
  } catch (const manta::task_error& e) {
    EXPECT_NE(std::string(e.what()).find("bad input 3"), std::string::npos) << e.what();
    EXPECT_EQ(e.function_name(), "fail");
    EXPECT_EQ(e.pid(), ::getpid());
  }
  EXPECT_THROW(manta::get(manta::task(add).remote(bad, 1)), manta::task_error);  // a dependent fails too
  attempts = 0;
  EXPECT_EQ(manta::get(manta::task(flaky).retry_exceptions(true).max_retries(3).remote(9)), 9);
  EXPECT_EQ(attempts, 3);
  attempts = 0;
  EXPECT_THROW(manta::get(manta::task(flaky).remote(9)), manta::task_error);  // not retried by default
  try {
    manta::get(manta::task(slow).timeout(1ms).remote(1));
    FAIL() << "no timeout";
  } catch (const manta::timeout_error& e) {
    EXPECT_NE(std::string(e.what()).find("slow"), std::string::npos) << e.what();
  }
  EXPECT_EQ(manta::get(manta::task(slow).timeout(10s).remote(2)), 2);
}

TEST_F(local_mode, resources_are_checked_as_in_processes) {
  start({.resources = {{"sensor", 1}}});
  EXPECT_EQ(manta::available_resources().at("sensor"), 1);
  EXPECT_EQ(manta::get(manta::task(square).resources({{"sensor", 1}}).remote(3)), 9);
  try {
    manta::task(square).resources({{"laser", 1}}).remote(3);
    FAIL() << "a resource the node lacks was accepted";
  } catch (const manta::usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("laser"), std::string::npos) << e.what();
  }
}

TEST_F(local_mode, actors_live_in_the_driver) {
  start();
  auto c = manta::actor<Counter>().name("counter").remote(10);
  EXPECT_EQ(manta::get(c.task(&Counter::pid).remote()), ::getpid());
  for (int i = 11; i <= 15; ++i) EXPECT_EQ(manta::get(c.task(&Counter::inc).remote()), i);
  auto same = manta::get_actor<Counter>("counter");
  EXPECT_EQ(manta::get(same.task(&Counter::inc).remote()), 16);
  EXPECT_THROW(manta::actor<Counter>().name("counter").remote(0), manta::usage_error);
  manta::kill(c);
  EXPECT_THROW(manta::get(same.task(&Counter::inc).remote()), manta::actor_died_error);
  EXPECT_THROW(manta::get_actor<Counter>("counter"), manta::usage_error);

  auto broken = manta::actor<Counter>().remote(-1);
  try {
    manta::get(broken.task(&Counter::inc).remote());
    FAIL() << "a call on an actor whose constructor threw succeeded";
  } catch (const manta::actor_died_error& e) {
    EXPECT_NE(std::string(e.what()).find("negative start"), std::string::npos) << e.what();
  }
}

TEST_F(local_mode, the_pool_queues_and_streams_work) {
  start();
  manta::pool p;
  std::vector<int> xs{1, 2, 3, 4};
  EXPECT_EQ(p.map(square, xs), (std::vector<int>{1, 4, 9, 16}));
  int total = 0;
  for (int v : p.imap_unordered(square, xs)) total += v;
  EXPECT_EQ(total, 30);
  manta::queue<int> q;
  manta::get(manta::task(fill_queue).remote(q, 5));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(q.get(1s), i);
  std::vector<int> seen;
  for (auto& r : manta::task(count_to).remote(4)) seen.push_back(manta::get(r));
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3}));
}

TEST_F(local_mode, threads_submitting_at_once_run_one_task_at_a_time) {
  start();
  std::vector<std::thread> threads;
  std::atomic<int> sum{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) sum += manta::get(manta::task(exclusive).remote(1));
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(sum.load(), 200);
  EXPECT_EQ(most_at_once.load(), 1);
}

TEST_F(local_mode, worker_setup_runs_once_in_the_driver) {
  setups = 0;
  start({.worker_setup = count_setup});
  EXPECT_EQ(setups, 1);
  manta::get(manta::task(square).remote(1));
  EXPECT_EQ(setups, 1);
}

TEST_F(local_mode, objects_are_freed_with_their_last_ref) {
  start();
  const std::size_t before = manta::detail::object_count();
  {
    auto r = manta::put(std::vector<int>(1000, 1));
    auto s = manta::task(square).remote(2);
    EXPECT_EQ(manta::detail::object_count(), before + 2);
  }
  EXPECT_EQ(manta::detail::object_count(), before);
}

TEST_F(local_mode, awkward_calls_behave_as_in_processes) {
  start();
  // An actor killing itself from its own method: the call finishes, later ones fail.
  auto self = manta::actor<Counter>().name("self").remote(1);
  EXPECT_EQ(manta::get(self.task(&Counter::kill_self).remote()), 2);
  EXPECT_THROW(manta::get(self.task(&Counter::inc).remote()), manta::actor_died_error);
  // A named actor whose constructor threw gives its name back.
  auto broken = manta::actor<Counter>().name("reused").remote(-1);
  EXPECT_THROW(manta::get(broken.task(&Counter::inc).remote()), manta::actor_died_error);
  EXPECT_THROW(manta::get_actor<Counter>("reused"), manta::usage_error);
  auto fresh = manta::actor<Counter>().name("reused").remote(5);
  EXPECT_EQ(manta::get(fresh.task(&Counter::inc).remote()), 6);
  // shutdown inside a task stops nothing; the machine's CPUs are on offer.
  EXPECT_EQ(manta::get(manta::task(shutdown_inside).remote(3)), 3);
  EXPECT_TRUE(manta::is_initialized());
  const double cpus = std::max(1u, std::thread::hardware_concurrency());
  EXPECT_EQ(manta::cluster_resources().at("CPU"), cpus);
  EXPECT_EQ(manta::get(manta::task(square).num_cpus(cpus).remote(4)), 16);
}

}  // namespace

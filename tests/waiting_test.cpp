// waiting_test: tasks that wait on tasks never deadlock a fixed pool, in the
// shapes a Ray user writes every day: threads inside a task that wait, a
// threaded actor whose methods wait, producers and consumers around a bounded
// queue, children with a timeout under waiting parents. And a crash deep in a
// nested chain ends its attempt's children instead of retrying them for ever.
// Every wait is bounded: a deadlock fails the test.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "support.hpp"

namespace {
using namespace std::chrono_literals;

int twice(int x) { return 2 * x; }
int slow_twice(int x) {
  std::this_thread::sleep_for(20ms);
  return 2 * x;
}

/// Two threads, each submitting `n` children and getting them.
int threads_that_wait(int n) {
  std::atomic<int> total{0};
  auto body = [&](int base) {
    std::vector<manta::object_ref<int>> refs;
    for (int i = 0; i < n; ++i) refs.push_back(manta::task(slow_twice).remote(base + i));
    for (int v : manta::get(refs, 30s)) total += v;
  };
  std::thread a(body, 0), b(body, 100);
  a.join();
  b.join();
  return total;
}

int produce(manta::queue<int> q, int first, int n) {
  for (int i = first; i < first + n; ++i) q.put(i, 30s);
  return n;
}
int consume(manta::queue<int> q, int n) {
  int sum = 0;
  for (int i = 0; i < n; ++i) sum += q.get(30s);
  return sum;
}

int parent_of_timed_child(int x) {
  return manta::get(manta::task(slow_twice).timeout(5s).remote(x), 30s) + 1;
}

/// Each level takes 256 KiB of stack: a worker's 8 MiB overflows within a few
/// dozen levels nested on it (fast under the sanitizers too).
int chain(int n) {
  if (n == 0) return 0;
  volatile char pad[256 << 10];
  pad[0] = static_cast<char>(n);
  pad[sizeof pad - 1] = pad[0];
  return manta::get(manta::task(chain).remote(n - 1)) + 1 + (pad[sizeof pad - 1] - pad[0]);
}

int sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
/// Submits ten children that sleep, then dies: nobody can read their results.
int parent_that_crashes() {
  std::vector<manta::object_ref<int>> refs;
  for (int i = 0; i < 10; ++i) refs.push_back(manta::task(sleep_ms).remote(60'000));
  ::raise(SIGKILL);
  return 0;
}
MANTA_REMOTE(twice, slow_twice, threads_that_wait, produce, consume, parent_of_timed_child, chain, sleep_ms,
             parent_that_crashes);

struct Fanout {
  int run(int n) {
    std::vector<manta::object_ref<int>> refs;
    for (int i = 0; i < n; ++i) refs.push_back(manta::task(twice).remote(i));
    int s = 0;
    for (int v : manta::get(refs, 30s)) s += v;
    return s;
  }
  int take(manta::queue<int> q) { return q.get(30s); }
};
MANTA_ACTOR(Fanout, &Fanout::run, &Fanout::take);

class waiting : public manta::testing::runtime_fixture {};

int expected_threads_total(int n) {
  int s = 0;
  for (int i = 0; i < n; ++i) s += 2 * i + 2 * (100 + i);
  return s;
}

TEST_F(waiting, threads_inside_a_task_that_wait_on_one_worker) {
  start(1);
  EXPECT_EQ(manta::get(manta::task(threads_that_wait).remote(5), 30s), expected_threads_total(5));
}

TEST_F(waiting, threads_inside_tasks_that_wait_on_every_worker) {
  start(2);
  std::vector<manta::object_ref<int>> refs;
  for (int n : {2, 10}) refs.push_back(manta::task(threads_that_wait).remote(n));
  EXPECT_EQ(manta::get(refs[0], 30s), expected_threads_total(2));
  EXPECT_EQ(manta::get(refs[1], 30s), expected_threads_total(10));
}

TEST_F(waiting, methods_of_a_threaded_actor_that_wait_on_tasks) {
  start(2);
  auto a = manta::actor<Fanout>().max_concurrency(4).remote();
  std::vector<manta::object_ref<int>> refs;
  for (int i = 0; i < 4; ++i) refs.push_back(a.task(&Fanout::run).remote(10));
  for (auto& r : refs) EXPECT_EQ(manta::get(r, 30s), 90);
}

TEST_F(waiting, a_threaded_actor_waits_on_a_queue) {
  start(2);
  manta::queue<int> q;
  auto a = manta::actor<Fanout>().max_concurrency(2).remote();
  auto r1 = a.task(&Fanout::take).remote(q);
  auto r2 = a.task(&Fanout::take).remote(q);
  q.put(3);
  q.put(4);
  EXPECT_EQ(manta::get(r1, 30s) + manta::get(r2, 30s), 7);
}

class bounded_queue : public manta::testing::runtime_fixture, public ::testing::WithParamInterface<std::tuple<int, bool>> {};

TEST_P(bounded_queue, producers_and_consumer_tasks_finish) {
  auto [workers, consumers_first] = GetParam();
  start(workers);
  manta::queue<int> q(2);
  std::vector<manta::object_ref<int>> produced, consumed;
  auto producers = [&] {
    for (int p = 0; p < 2; ++p) produced.push_back(manta::task(produce).remote(q, p * 20, 20));
  };
  auto consumers = [&] {
    for (int c = 0; c < 2; ++c) consumed.push_back(manta::task(consume).remote(q, 20));
  };
  if (consumers_first) {
    consumers();
    producers();
  } else {
    producers();
    consumers();
  }
  int total = 0;
  for (auto& r : consumed) total += manta::get(r, 60s);
  for (auto& r : produced) EXPECT_EQ(manta::get(r, 60s), 20);
  EXPECT_EQ(total, 39 * 40 / 2);
}
INSTANTIATE_TEST_SUITE_P(orders, bounded_queue,
                         ::testing::Combine(::testing::Values(1, 2), ::testing::Bool()));

TEST_F(waiting, parents_on_every_worker_wait_for_children_with_a_timeout) {
  start(2);
  std::vector<manta::object_ref<int>> refs;
  for (int i = 0; i < 4; ++i) refs.push_back(manta::task(parent_of_timed_child).remote(i));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(manta::get(refs[static_cast<std::size_t>(i)], 30s), 2 * i + 1);
}

TEST_F(waiting, extra_workers_end_once_the_waits_end) {
  start(2);
  manta::queue<int> q(2);
  std::vector<manta::object_ref<int>> refs;
  for (int p = 0; p < 2; ++p) refs.push_back(manta::task(produce).remote(q, 0, 10));
  for (int c = 0; c < 2; ++c) refs.push_back(manta::task(consume).remote(q, 10));
  for (auto& r : refs) manta::get(r, 60s);
  EXPECT_GT(manta::detail::counters().extra_workers_started, 0u);
  // The pool goes back to its size: the extra workers end once idle.
  const auto pool_and_helpers = [] {
    auto pids = manta::detail::runtime_process_ids();
    return pids.size();
  };
  // zygote + 2 workers + the queue's actor host
  EXPECT_TRUE(manta::testing::eventually([&] { return pool_and_helpers() <= 4; }, 20s))
      << pool_and_helpers() << " processes";
  EXPECT_EQ(manta::get(manta::task(twice).remote(21), 30s), 42);
}

TEST_F(waiting, a_loop_whose_rounds_wait_reuses_its_extra_worker) {
  // Each round's parent waits for a child that may not nest (its timeout): an
  // idle extra worker stays a while for the next round instead of ending at once.
  start(1);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(manta::get(manta::task(parent_of_timed_child).remote(i), 30s), 2 * i + 1);
  EXPECT_LE(manta::detail::counters().extra_workers_started, 10u);
  EXPECT_GE(manta::detail::counters().extra_workers_started, 1u);
}

TEST_F(waiting, a_crash_deep_in_a_nested_chain_does_not_run_away) {
  start(2);
  // Deep enough to overflow a worker's stack, nested on one worker.
  auto r = manta::task(chain).max_retries(1).remote(1'000'000);
  // The crash: in the outer task's own worker, or (the chain split over both
  // workers) in a child's, whose failure the outer task's get raised.
  try {
    manta::get(r, 60s);
    FAIL() << "no exception";
  } catch (const manta::error& e) {
    EXPECT_NE(std::string(e.what()).find("SIGSEGV"), std::string::npos) << e.what();
  }
  // The attempts' children were cancelled, not retried: nothing is left, and
  // other work runs.
  EXPECT_TRUE(manta::testing::eventually([] { return manta::detail::task_count() == 0; }, 20s))
      << manta::detail::task_count() << " tasks left";
  EXPECT_EQ(manta::get(manta::task(twice).remote(4), 10s), 8);
}

TEST_F(waiting, children_of_a_crashed_parent_nobody_holds_are_cancelled) {
  start(2);
  auto r = manta::task(parent_that_crashes).max_retries(0).remote();
  EXPECT_THROW(manta::get(r, 30s), manta::worker_crashed_error);
  // Its ten 60 s children are gone (run, they would hold the pool for 5 minutes).
  EXPECT_TRUE(manta::testing::eventually([] { return manta::detail::task_count() == 0; }, 20s))
      << manta::detail::task_count() << " tasks left";
  EXPECT_EQ(manta::get(manta::task(twice).remote(1), 10s), 2);
}

}  // namespace

// cancel_test: manta::cancel on tasks queued, waiting on arguments, running in a
// worker (whose process is killed and replaced), nested, inside actors' queues and
// from inside a task. Tasks report that they started on a pipe and wait on another
// one (a gate), so the test knows where each task is without sleeping.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <thread>
#include <string>
#include <vector>

#include "support.hpp"

namespace {
using namespace std::chrono_literals;

// Created before init so every worker and actor host inherits them.
int report_pipe[2] = {-1, -1};
int gate_pipe[2] = {-1, -1};

void report_pid() {
  int pid = ::getpid();
  [[maybe_unused]] auto n = ::write(report_pipe[1], &pid, sizeof pid);
}
int read_pid(int timeout_ms = 20000) {
  pollfd p{report_pipe[0], POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) != 1) return -1;
  int pid = -1;
  return ::read(report_pipe[0], &pid, sizeof pid) == sizeof pid ? pid : -1;
}
void open_gate(int times = 1) {
  for (int i = 0; i < times; ++i) {
    char c = 'g';
    [[maybe_unused]] auto n = ::write(gate_pipe[1], &c, 1);
  }
}

/// Reports its pid, then waits for the test to open the gate once.
int gated(int x) {
  report_pid();
  char c;
  [[maybe_unused]] auto n = ::read(gate_pipe[0], &c, 1);
  return x;
}
/// Reports its pid, then blocks until killed.
int report_and_block(int) {
  report_pid();
  for (;;) ::pause();
}
int plus(int a, int b) { return a + b; }
/// Waits on a gated child that may not be retried: it runs nested, on this worker.
int parent_of_gated(int x) {
  report_pid();
  return manta::get(manta::task(gated).max_retries(0).remote(x), std::chrono::seconds(30));
}
/// Starts a blocking child on another worker, cancels it: 1 if the child's result
/// then fails with task_cancelled_error.
int cancels_its_child(int) {
  auto child = manta::task(report_and_block).remote(0);
  if (read_pid() < 0) return -1;
  manta::cancel(child);
  try {
    manta::get(child, std::chrono::seconds(30));
  } catch (const manta::task_cancelled_error&) {
    return 1;
  }
  return 0;
}
/// Returns x after spinning for `us` microseconds (work, not a wait).
int spin_value(int x, int us) {
  auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (std::chrono::steady_clock::now() < until) {
  }
  return x;
}
/// Reports its pid, starts a blocking child (sent at once, so it goes to an idle
/// worker before this one blocks) and waits for it.
int parent_of_blocked(int) {
  report_pid();
  return manta::get(manta::task(report_and_block).remote(0));
}
/// Reports its pid, then waits for `r` (passed unresolved).
int waits_for(manta::object_ref<int> r) {
  report_pid();
  return manta::get(r);
}
/// Sleeps 1.5 s after marking that it started (a file at `marker`).
int marks_then_sleeps(std::string marker) {
  { std::FILE* f = std::fopen(marker.c_str(), "w"); if (f) std::fclose(f); }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  return 1;
}
/// Waits for a child while a thread of its own cancels that child once it runs
/// (nested on this very worker, with one worker): -1 if get reports the cancel.
int watchdog_cancels_its_child(std::string marker) {
  auto child = manta::task(marks_then_sleeps).remote(marker);
  std::thread watchdog([&] {
    for (int i = 0; i < 20000 && ::access(marker.c_str(), F_OK) != 0; ++i)  // bounded: ~10 s
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    manta::cancel(child);
  });
  int r;
  try {
    r = manta::get(child);
  } catch (const manta::task_cancelled_error&) {
    r = -1;
  }
  watchdog.join();
  return r;
}
MANTA_REMOTE(marks_then_sleeps, watchdog_cancels_its_child);
MANTA_REMOTE(gated, report_and_block, plus, parent_of_gated, cancels_its_child, spin_value,
             parent_of_blocked, waits_for);

struct Tally {
  int total = 0;
  int add(int x) { return total += x; }
  int wait_for_gate() {
    report_pid();
    char c;
    [[maybe_unused]] auto n = ::read(gate_pipe[0], &c, 1);
    return total;
  }
};
MANTA_ACTOR(Tally, &Tally::add, &Tally::wait_for_gate);

class cancelling : public manta::testing::runtime_fixture {
 protected:
  void SetUp() override {
    ASSERT_EQ(::pipe(report_pipe), 0);
    ASSERT_EQ(::pipe(gate_pipe), 0);
  }
  void TearDown() override {
    runtime_fixture::TearDown();
    for (int fd : {report_pipe[0], report_pipe[1], gate_pipe[0], gate_pipe[1]}) ::close(fd);
  }
  /// get(ref) must throw task_cancelled_error; returns its message.
  template <class T>
  std::string cancelled_message(const manta::object_ref<T>& ref) {
    try {
      manta::get(ref, 30s);
    } catch (const manta::task_cancelled_error& e) {
      return e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "expected task_cancelled_error, got: " << e.what();
      return {};
    }
    ADD_FAILURE() << "get of a cancelled task did not throw";
    return {};
  }
};

// Found by review of the restructuring: cancelling a child that runs nested on
// the canceller's own worker killed that worker, so the canceller was re-run
// (uncharged), cancelled its new child, and so on forever. The child is not
// interrupted then: its result fails at once, and it finishes first.
TEST(cancelling_nested, a_child_cancelled_from_its_own_worker_does_not_kill_it) {
  manta::init({.num_workers = 1});
  const std::string marker = manta::testing::temp_path("started");
  std::remove(marker.c_str());
  EXPECT_EQ(manta::get(manta::task(watchdog_cancels_its_child).remote(marker), std::chrono::seconds(30)), -1);
  EXPECT_EQ(manta::detail::counters().processes_lost, 0u);
  EXPECT_EQ(manta::detail::counters().task_retries, 0u);
  std::remove(marker.c_str());
  manta::shutdown();
}

TEST_F(cancelling, a_queued_task_never_runs_and_the_worker_stays) {
  start(1);
  auto pids = manta::detail::runtime_process_ids();
  auto busy = manta::task(gated).remote(1);
  ASSERT_GT(read_pid(), 0);
  auto queued = manta::task(report_and_block).remote(0);  // would block the only worker
  manta::cancel(queued);
  EXPECT_NE(cancelled_message(queued).find("'report_and_block' was cancelled"), std::string::npos);
  open_gate();
  EXPECT_EQ(manta::get(busy, 30s), 1);
  EXPECT_EQ(manta::get(manta::task(plus).remote(2, 3), 30s), 5);  // it would run after the queued one
  EXPECT_EQ(manta::detail::runtime_process_ids(), pids);  // nothing was killed
}

TEST_F(cancelling, a_running_task_is_stopped_and_its_worker_replaced) {
  start(2);
  auto retries = manta::detail::counters().task_retries;
  auto running = manta::task(report_and_block).remote(0);
  int pid = read_pid();
  ASSERT_GT(pid, 0);
  manta::cancel(running);
  cancelled_message(running);
  EXPECT_TRUE(manta::testing::eventually([&] { return !manta::testing::alive(pid); }));
  EXPECT_TRUE(manta::testing::eventually(
      [&] { return manta::detail::runtime_process_ids().size() == 3; }));
  EXPECT_EQ(manta::detail::counters().task_retries, retries);  // not run again
  std::vector<manta::object_ref<int>> refs;
  for (int i = 0; i < 100; ++i) refs.push_back(manta::task(plus).remote(i, 1));
  auto values = manta::get(refs, 30s);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(values[i], i + 1);
  // Cancelling again, or after the fact, changes nothing.
  manta::cancel(running);
  cancelled_message(running);
}

TEST_F(cancelling, tasks_depending_on_a_cancelled_one_fail_with_it) {
  start(2);
  auto running = manta::task(report_and_block).remote(0);
  ASSERT_GT(read_pid(), 0);
  auto dependent = manta::task(plus).remote(running, 1);
  auto second = manta::task(plus).remote(dependent, 1);
  manta::cancel(running);
  EXPECT_NE(cancelled_message(second).find("via plus <- plus"), std::string::npos);
  // A task waiting on its arguments can be cancelled itself; its argument runs on.
  auto slow = manta::task(gated).remote(4);
  ASSERT_GT(read_pid(), 0);
  auto waiting = manta::task(plus).remote(slow, 1);
  manta::cancel(waiting);
  cancelled_message(waiting);
  open_gate();
  EXPECT_EQ(manta::get(slow, 30s), 4);
  EXPECT_EQ(manta::get(manta::task(plus).remote(slow, 2), 30s), 6);
}

TEST_F(cancelling, a_task_with_one_argument_cancelled_and_one_pending_fails_once) {
  start(2);
  auto gone = manta::task(report_and_block).remote(0);
  ASSERT_GT(read_pid(), 0);
  manta::cancel(gone);
  cancelled_message(gone);
  auto pending = manta::task(gated).remote(3);
  ASSERT_GT(read_pid(), 0);
  // It fails at once; the pending argument, sealed later, must not find it waiting.
  auto both = manta::task(plus).remote(gone, pending);
  cancelled_message(both);
  open_gate();
  EXPECT_EQ(manta::get(pending, 30s), 3);
  EXPECT_EQ(manta::get(manta::task(plus).remote(pending, 1), 30s), 4);
}

TEST_F(cancelling, a_cancelled_tasks_nested_child_on_its_worker_goes_with_it) {
  start(1);
  auto retries = manta::detail::counters().task_retries;
  auto parent = manta::task(parent_of_gated).remote(9);
  int parent_pid = read_pid();
  int child_pid = read_pid();  // nested on the same (only) worker while the parent waits
  ASSERT_GT(parent_pid, 0);
  ASSERT_EQ(child_pid, parent_pid);
  manta::cancel(parent);
  cancelled_message(parent);
  EXPECT_TRUE(manta::testing::eventually([&] { return !manta::testing::alive(parent_pid); }));
  EXPECT_TRUE(manta::testing::eventually([] { return manta::detail::object_count() == 1u; }))
      << manta::detail::object_count() << " objects";  // the child is gone, not run again
  EXPECT_EQ(manta::detail::counters().task_retries, retries);
  EXPECT_EQ(manta::get(manta::task(plus).remote(1, 1), 30s), 2);
}

TEST_F(cancelling, an_unrelated_task_sharing_the_killed_worker_runs_again_uncharged) {
  start(1);
  auto tally = manta::actor<Tally>().remote();
  auto held = tally.task(&Tally::wait_for_gate).remote();  // in the actor's process
  ASSERT_GT(read_pid(), 0);
  // It waits in get, lending its CPU: the next task runs nested on the same worker.
  auto waiting = manta::task(waits_for).max_retries(0).remote(held);
  int waiting_pid = read_pid();
  auto blocker = manta::task(report_and_block).remote(0);
  ASSERT_EQ(read_pid(), waiting_pid);
  manta::cancel(blocker);
  cancelled_message(blocker);
  // `waiting` lost its process to the cancellation, not to a fault: with
  // max_retries(0) it still runs again, on the replacement worker.
  int again = read_pid();
  EXPECT_GT(again, 0);
  EXPECT_NE(again, waiting_pid);
  open_gate();
  EXPECT_EQ(manta::get(waiting, 30s), 0);
}

TEST_F(cancelling, a_cancelled_task_takes_the_tasks_it_started_with_it) {
  start(2);
  auto retries = manta::detail::counters().task_retries;
  auto parent = manta::task(parent_of_blocked).remote(0);
  int parent_pid = read_pid();
  int child_pid = read_pid();
  ASSERT_GT(child_pid, 0);
  ASSERT_GT(parent_pid, 0);
  ASSERT_NE(child_pid, parent_pid);  // the child runs on the other worker
  manta::cancel(parent);
  cancelled_message(parent);
  // Both workers are killed and replaced; neither task runs again.
  EXPECT_TRUE(manta::testing::eventually(
      [&] { return !manta::testing::alive(parent_pid) && !manta::testing::alive(child_pid); }));
  EXPECT_TRUE(manta::testing::eventually(
      [&] { return manta::detail::runtime_process_ids().size() == 3; }));
  EXPECT_EQ(manta::detail::counters().task_retries, retries);
  EXPECT_TRUE(manta::testing::eventually([] { return manta::detail::object_count() == 1u; }))
      << manta::detail::object_count() << " objects";
  EXPECT_EQ(manta::get(manta::task(plus).remote(1, 2), 30s), 3);
}

TEST_F(cancelling, finished_tasks_and_put_values_are_left_alone) {
  start(1);
  auto done = manta::task(plus).remote(1, 2);
  ASSERT_EQ(manta::get(done, 30s), 3);
  manta::cancel(done);
  EXPECT_EQ(manta::get(done), 3);
  auto stored = manta::put(std::string("kept"));
  manta::cancel(stored);
  EXPECT_EQ(manta::get(stored), "kept");
  EXPECT_THROW(manta::cancel(manta::object_ref<int>{}), manta::usage_error);
}

TEST_F(cancelling, an_actor_call_waiting_in_line_is_dropped_and_the_next_goes) {
  start(2);
  auto tally = manta::actor<Tally>().remote();
  auto slow = manta::task(gated).remote(100);
  ASSERT_GT(read_pid(), 0);
  auto held = tally.task(&Tally::add).remote(slow);  // waits for its argument, in line
  auto behind = tally.task(&Tally::add).remote(5);   // in line behind it
  manta::cancel(held);
  cancelled_message(held);
  EXPECT_EQ(manta::get(behind, 30s), 5);
  open_gate();
  EXPECT_EQ(manta::get(slow, 30s), 100);
  // The same when the call fails because its argument was cancelled.
  auto doomed = manta::task(report_and_block).remote(0);
  ASSERT_GT(read_pid(), 0);
  auto failing = tally.task(&Tally::add).remote(doomed);
  auto next = tally.task(&Tally::add).remote(1);
  manta::cancel(doomed);
  cancelled_message(failing);
  EXPECT_EQ(manta::get(next, 30s), 6);
  // A call the actor already runs is not interrupted: the actor keeps its state.
  auto running = tally.task(&Tally::wait_for_gate).remote();
  ASSERT_GT(read_pid(), 0);
  manta::cancel(running);
  open_gate();
  EXPECT_EQ(manta::get(running, 30s), 6);
  EXPECT_EQ(manta::get(tally.task(&Tally::add).remote(1), 30s), 7);
}

TEST_F(cancelling, a_call_waiting_on_an_argument_fails_cleanly_when_its_actor_is_killed) {
  start(2);
  auto tally = manta::actor<Tally>().remote();
  auto slow = manta::task(gated).remote(8);
  ASSERT_GT(read_pid(), 0);
  auto held = tally.task(&Tally::add).remote(slow);
  manta::kill(tally);
  EXPECT_THROW(manta::get(held, 30s), manta::actor_died_error);
  open_gate();  // the argument is sealed after the call that waited on it is gone
  EXPECT_EQ(manta::get(slow, 30s), 8);
  EXPECT_EQ(manta::get(manta::task(plus).remote(slow, 1), 30s), 9);
}

TEST_F(cancelling, a_task_can_cancel_the_tasks_it_started) {
  start(2);
  EXPECT_EQ(manta::get(manta::task(cancels_its_child).remote(0), 30s), 1);
  EXPECT_TRUE(manta::testing::eventually(
      [&] { return manta::detail::runtime_process_ids().size() == 3; }));
  EXPECT_EQ(manta::get(manta::task(plus).remote(2, 2), 30s), 4);
}

TEST_F(cancelling, random_cancels_in_a_task_graph_leave_every_result_consistent) {
  start(3);
  const std::size_t objects = manta::detail::object_count();
  const std::size_t arena = manta::detail::arena_used_bytes();
  const auto lost = manta::detail::counters().processes_lost;
  const int n = 600;
  std::mt19937 rng(7);
  std::vector<manta::object_ref<int>> leaves, sums, calls;
  std::vector<bool> sum_cancelled(n, false);
  // Each leaf also goes to one of three actors, in order; the first is killed halfway.
  std::vector<manta::actor_handle<Tally>> tallies;
  for (int k = 0; k < 3; ++k) tallies.push_back(manta::actor<Tally>().remote());
  for (int i = 0; i < n; ++i) leaves.push_back(manta::task(spin_value).remote(i, 50 + int(rng() % 400)));
  for (int i = 0; i < n; ++i) {
    sums.push_back(manta::task(plus).remote(leaves[i], leaves[(i + 1) % n]));
    calls.push_back(tallies[i % 3].task(&Tally::add).remote(leaves[i]));
    if (i == n / 2) manta::kill(tallies[0]);
    // Cancel a leaf (queued, running or done by now) or a sum (waiting or done).
    if (rng() % 10 == 0) manta::cancel(leaves[rng() % (i + 1)]);
    if (rng() % 20 == 0) {
      manta::cancel(sums[i]);
      sum_cancelled[i] = true;
    }
  }
  int values = 0, cancelled = 0;
  std::vector<bool> leaf_ok(n);
  for (int i = 0; i < n; ++i) {
    try {
      EXPECT_EQ(manta::get(leaves[i], 30s), i);
      leaf_ok[i] = true;
    } catch (const manta::task_cancelled_error&) {
    }
  }
  for (int i = 0; i < n; ++i) {
    bool inputs_ok = leaf_ok[i] && leaf_ok[(i + 1) % n];
    try {
      EXPECT_EQ(manta::get(sums[i], 30s), i + (i + 1) % n);
      EXPECT_TRUE(inputs_ok) << i;  // a sum of a cancelled leaf cannot have a value
      ++values;
    } catch (const manta::task_cancelled_error&) {
      EXPECT_TRUE(sum_cancelled[i] || !inputs_ok) << i;  // cancelled for a reason
      ++cancelled;
    }
  }
  // Calls on the live actors ran in order, exactly those whose leaf was not cancelled.
  int totals[3] = {0, 0, 0}, died = 0;
  for (int i = 0; i < n; ++i) {
    try {
      int total = manta::get(calls[i], 30s);
      EXPECT_TRUE(leaf_ok[i]) << i;
      if (i % 3 != 0) {
        EXPECT_EQ(total, totals[i % 3] += i) << i;
      }
    } catch (const manta::task_cancelled_error&) {
      EXPECT_FALSE(leaf_ok[i]) << i;
    } catch (const manta::actor_died_error&) {
      EXPECT_EQ(i % 3, 0) << i;
      ++died;
    }
  }
  EXPECT_GT(died, 0);
  std::printf("random cancels: %d sums computed, %d cancelled, %d processes killed, %d calls to "
              "the killed actor failed\n",
              values, cancelled, int(manta::detail::counters().processes_lost - lost), died);
  EXPECT_GT(values, 0);
  EXPECT_GT(cancelled, 0);
  // The pool is whole, and every object and extent is back once the refs go.
  leaves.clear();
  sums.clear();
  calls.clear();
  tallies.clear();
  EXPECT_TRUE(manta::testing::eventually([&] {
    return manta::detail::runtime_process_ids().size() == 4 &&
           manta::detail::object_count() == objects && manta::detail::arena_used_bytes() == arena;
  })) << manta::detail::object_count() << " objects";
  EXPECT_EQ(manta::get(manta::task(plus).remote(20, 22), 30s), 42);
}

}  // namespace

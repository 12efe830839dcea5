// look_ahead_test: a task sent ahead to a busy worker (so that it starts the
// moment the worker's task ends, with no round trip to the driver between
// them) is taken back, before it starts, for a worker that falls idle, when its
// worker's task waits in get, and when it is cancelled; lost with its worker
// before it started, it is not charged a retry. Two workers; tasks held by
// fifo gates, so every placement below is decided, not timed.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "support.hpp"

namespace {
using namespace std::chrono_literals;
using manta::testing::fifo_gate;

int pid_of() { return ::getpid(); }
int gated_pid(std::string gate) {
  manta::testing::wait_at_gate(gate);
  return ::getpid();
}
/// CLOCK_MONOTONIC, which every process of the machine shares.
std::int64_t now_ns() { return std::chrono::steady_clock::now().time_since_epoch().count(); }
/// Waits at the gate, then for a child (its task blocks in get); returns when it ends.
std::int64_t gated_parent(std::string gate) {
  manta::testing::wait_at_gate(gate);
  return manta::get(manta::task(pid_of).remote(), 30s) > 0 ? now_ns() : -1;
}
int gated_crash(std::string gate) {
  manta::testing::wait_at_gate(gate);
  ::raise(SIGKILL);
  return 0;
}
int plus_one(int v) { return v + 1; }
/// Known to run far longer than the pipelining window (tasks queue behind a
/// busy worker without look-ahead only within a millisecond of expected work).
int gated_nap(std::string gate) {
  manta::testing::wait_at_gate(gate);
  std::this_thread::sleep_for(20ms);
  return ::getpid();
}
/// Waits at the gate, then for a task whose argument is another task's result.
int gated_chain(std::string gate) {
  manta::testing::wait_at_gate(gate);
  auto first = manta::task(pid_of).remote();
  return manta::get(manta::task(plus_one).remote(first), 30s);
}
MANTA_REMOTE(pid_of, now_ns, gated_pid, gated_parent, gated_crash, plus_one, gated_nap, gated_chain);

class look_ahead : public manta::testing::runtime_fixture {
 protected:
  void SetUp() override { start(2); }
};

// The first worker holds a task until the end; a task sent ahead to it (both
// workers are busy when it is submitted) runs on the second once that one is
// free, instead of waiting behind the first's.
TEST_F(look_ahead, a_task_behind_a_long_one_goes_to_the_worker_that_frees) {
  fifo_gate long_gate, short_gate;
  auto held = manta::task(gated_pid).remote(long_gate.path());    // the first worker
  auto brief = manta::task(gated_pid).remote(short_gate.path());  // the second
  auto next = manta::task(pid_of).remote();                       // ahead, behind `held`
  ASSERT_TRUE(manta::testing::eventually([] { return manta::detail::counters().tasks_sent_ahead >= 1; }, 30s));
  ASSERT_TRUE(short_gate.open());
  const int brief_pid = manta::get(brief, 30s);
  EXPECT_EQ(manta::get(next, 30s), brief_pid);  // (the long gate is still closed)
  EXPECT_GE(manta::detail::counters().tasks_taken_back, 1u);
  ASSERT_TRUE(long_gate.open());
  EXPECT_NE(manta::get(held, 30s), brief_pid);
}

// A worker whose task waits in get never runs a task sent ahead to it nested
// above the waiting one (it would hold up its parent's return): the driver
// takes it back; here it runs once the parent ended, on the parent's worker
// (free first: the other one is held). The parent's child, sent ahead to the
// held worker before the parent waited, is taken back to run nested on the
// parent's lent CPU (else the parent would wait for the held task's end).
TEST_F(look_ahead, a_task_behind_one_that_waits_in_get_is_taken_back) {
  fifo_gate parent_gate, other_gate;
  auto parent = manta::task(gated_parent).remote(parent_gate.path());
  auto other = manta::task(gated_pid).remote(other_gate.path());
  auto next = manta::task(now_ns).remote();  // ahead, behind `parent`
  ASSERT_TRUE(manta::testing::eventually([] { return manta::detail::counters().tasks_sent_ahead >= 1; }, 30s));
  ASSERT_TRUE(parent_gate.open());
  const std::int64_t parent_end = manta::get(parent, 30s);
  EXPECT_GE(manta::get(next, 30s), parent_end);  // (the other gate is still closed)
  EXPECT_GE(manta::detail::counters().tasks_taken_back, 1u);
  ASSERT_TRUE(other_gate.open());
  EXPECT_GT(manta::get(other, 30s), 0);
}

// Cancelled before it started, a task sent ahead is taken back and fails: the
// worker running the task before it is not killed (which would retry that one).
TEST_F(look_ahead, cancelling_a_task_sent_ahead_kills_nothing) {
  fifo_gate first_gate, second_gate;
  auto first = manta::task(gated_pid).remote(first_gate.path());
  auto second = manta::task(gated_pid).remote(second_gate.path());
  auto next = manta::task(pid_of).remote();
  ASSERT_TRUE(manta::testing::eventually([] { return manta::detail::counters().tasks_sent_ahead >= 1; }, 30s));
  manta::cancel(next);
  EXPECT_THROW(manta::get(next, 30s), manta::task_cancelled_error);
  ASSERT_TRUE(first_gate.open());
  ASSERT_TRUE(second_gate.open());
  EXPECT_GT(manta::get(first, 30s), 0);
  EXPECT_GT(manta::get(second, 30s), 0);
  EXPECT_EQ(manta::detail::counters().processes_lost, 0u);
  EXPECT_EQ(manta::detail::counters().task_retries, 0u);
}

// A task sent ahead to a worker that dies before it started never ran: it is
// queued again without being charged, so even max_retries(0) lets it run.
TEST_F(look_ahead, a_task_lost_with_its_worker_before_it_started_runs_elsewhere) {
  fifo_gate crash_gate, other_gate;
  auto crashing = manta::task(gated_crash).max_retries(0).remote(crash_gate.path());
  auto other = manta::task(gated_pid).remote(other_gate.path());
  auto next = manta::task(pid_of).max_retries(0).remote();  // ahead, behind `crashing`
  ASSERT_TRUE(manta::testing::eventually([] { return manta::detail::counters().tasks_sent_ahead >= 1; }, 30s));
  ASSERT_TRUE(crash_gate.open());
  EXPECT_THROW(manta::get(crashing, 30s), manta::worker_crashed_error);
  EXPECT_GT(manta::get(next, 30s), 0);
  ASSERT_TRUE(other_gate.open());
  EXPECT_GT(manta::get(other, 30s), 0);
}

// A task waits for one whose argument is a task sent ahead behind a held one:
// that producer comes back to run on the waiting task's lent CPU, instead of
// waiting for the held task's end (found by review: only direct producers
// were taken back).
TEST_F(look_ahead, a_waiting_tasks_indirect_producer_is_not_left_behind_a_held_one) {
  fifo_gate held_gate, chain_gate;
  auto held = manta::task(gated_pid).remote(held_gate.path());
  auto chain = manta::task(gated_chain).remote(chain_gate.path());
  ASSERT_TRUE(chain_gate.open());
  EXPECT_GT(manta::get(chain, 30s), 0);  // (the held gate is still closed)
  ASSERT_TRUE(held_gate.open());
  EXPECT_GT(manta::get(held, 30s), 0);
}

class look_ahead_one_worker : public manta::testing::runtime_fixture {
 protected:
  void SetUp() override { start(1); }
};

// A task too short to flush its result at once (under 50 µs) leaves it in its
// worker's outbox for the next read; with the next task sent ahead there is
// no read before that one ends, so the result waited for the whole next task
// (found by review). Five rounds: the two are submitted back to back. (A
// task queued behind a short one because it was expected short too, and ran
// long, still holds such a result up: bounded by the prediction, as before.)
TEST_F(look_ahead_one_worker, a_short_tasks_result_does_not_wait_for_the_task_sent_ahead_behind_it) {
  for (int round = 0; round < 5; ++round) {
    fifo_gate gate;
    auto quick = manta::task(plus_one).remote(round);
    auto held = manta::task(gated_nap).remote(gate.path());
    EXPECT_EQ(manta::get(quick, 30s), round + 1);  // (the gate is still closed)
    ASSERT_TRUE(gate.open());
    EXPECT_GT(manta::get(held, 30s), 0);
  }
}

class look_ahead_one_cpu : public manta::testing::runtime_fixture {
 protected:
  void SetUp() override { start(2, {.resources = {{"CPU", 1}}}); }
};

// One CPU for two workers: the second worker stays idle while the first runs
// a task, and a task sent ahead to the first is not stolen for it (which took
// a CPU the ledger did not have: found by review).
TEST_F(look_ahead_one_cpu, an_idle_worker_takes_no_task_without_a_cpu) {
  fifo_gate gate;
  auto held = manta::task(now_ns).remote();
  ASSERT_GT(manta::get(held, 30s), 0);  // now_ns is known short: the next goes ahead
  auto first = manta::task(gated_pid).remote(gate.path());
  auto next = manta::task(now_ns).remote();
  ASSERT_TRUE(manta::testing::eventually([] { return manta::detail::counters().tasks_sent_ahead >= 1; }, 30s));
  EXPECT_GE(manta::available_resources().at("CPU"), 0.0);
  EXPECT_EQ(manta::detail::counters().tasks_taken_back, 0u);
  ASSERT_TRUE(gate.open());
  EXPECT_GT(manta::get(first, 30s), 0);
  EXPECT_GT(manta::get(next, 30s), 0);
  EXPECT_EQ(manta::available_resources().at("CPU"), 1.0);
}

}  // namespace

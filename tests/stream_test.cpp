// stream_test: streaming tasks (a first parameter `emitter<T>&`). Values reach
// the caller while the task still runs; the stream ends when the task returns;
// a failure comes after the values emitted before it; a retry after SIGKILL
// repeats no value; large values, a stream read inside a task, a stream dropped
// unread, and bounded waits on next.
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "support.hpp"

namespace {
using namespace std::chrono_literals;

void count_to(manta::emitter<int>& out, int n) {
  for (int i = 0; i < n; ++i) out.emit(i);
}
void three_then_gate_then_two(manta::emitter<int>& out, std::string gate) {
  for (int i = 0; i < 3; ++i) out.emit(i);
  manta::testing::wait_at_gate(gate);
  for (int i = 3; i < 5; ++i) out.emit(i);
}
void two_then_throw(manta::emitter<std::string>& out) {
  out.emit("a");
  out.emit("b");
  throw std::runtime_error("broken after two");
}
// Emits 0..9; the first run (no marker file yet) is SIGKILLed after 0..5.
void dies_once_midway(manta::emitter<int>& out, std::string marker) {
  for (int i = 0; i < 10; ++i) {
    out.emit(i);
    if (i == 5 && ::access(marker.c_str(), F_OK) != 0) {
      std::ofstream(marker) << "ran";
      ::raise(SIGKILL);
    }
  }
}
void big_blocks(manta::emitter<std::vector<double>>& out, int n) {
  for (int i = 0; i < n; ++i) out.emit(std::vector<double>(1 << 20, i));  // 8 MB each
}
long sum_of_stream(int n) {
  long s = 0;
  for (auto& r : manta::task(count_to).remote(n)) s += manta::get(r);
  return s;
}
void from_threads(manta::emitter<int>& out, int threads, int each) {
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      for (int i = 0; i < each; ++i) out.emit(t * 1000 + i);
    });
  for (auto& w : workers) w.join();
}
MANTA_REMOTE(from_threads, count_to, three_then_gate_then_two, two_then_throw, dies_once_midway, big_blocks, sum_of_stream);

class stream_test : public manta::testing::runtime_fixture {};

TEST_F(stream_test, values_come_in_order_and_the_stream_ends) {
  start(2);
  std::vector<int> seen;
  for (auto& r : manta::task(count_to).remote(100)) seen.push_back(manta::get(r, 30s));
  ASSERT_EQ(seen.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(seen[i], i);

  auto empty = manta::task(count_to).remote(0);
  EXPECT_EQ(empty.next(30s), std::nullopt);
  EXPECT_EQ(empty.next(30s), std::nullopt);  // stays ended
  EXPECT_EQ(manta::wait(std::vector{empty.task_result()}, 1, 0s).first.size(), 1u);
}

TEST_F(stream_test, values_reach_the_caller_while_the_task_runs) {
  start(2);
  manta::testing::fifo_gate gate;
  auto stream = manta::task(three_then_gate_then_two).remote(gate.path());
  for (int i = 0; i < 3; ++i) {
    auto r = stream.next(30s);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(manta::get(*r, 30s), i);
  }
  // The task is held at the gate: nothing more comes, and next says so in time.
  EXPECT_THROW(stream.next(50ms), manta::timeout_error);
  ASSERT_TRUE(gate.open());
  for (int i = 3; i < 5; ++i) {
    auto r = stream.next(30s);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(manta::get(*r, 30s), i);
  }
  EXPECT_EQ(stream.next(30s), std::nullopt);
}

TEST_F(stream_test, a_failure_comes_after_the_values_emitted_before_it) {
  start(2);
  auto stream = manta::task(two_then_throw).remote();
  EXPECT_EQ(manta::get(*stream.next(30s), 30s), "a");
  EXPECT_EQ(manta::get(*stream.next(30s), 30s), "b");
  try {
    stream.next(30s);
    FAIL() << "the task's error was not rethrown";
  } catch (const manta::task_error& e) {
    EXPECT_NE(std::string(e.what()).find("broken after two"), std::string::npos) << e.what();
  }
  EXPECT_EQ(stream.next(30s), std::nullopt);  // then ended
  EXPECT_THROW(manta::get(stream.task_result(), 30s), manta::task_error);
  EXPECT_EQ(manta::get(manta::task(sum_of_stream).remote(4), 30s), 6);  // the runtime carries on
}

// The same through the iterator, in a loop that catches: the values, the
// failure once, then the end (the last value came twice, and the loop went on).
TEST_F(stream_test, an_iterating_loop_that_catches_the_failure_reaches_the_end) {
  start(2);
  auto stream = manta::task(two_then_throw).remote();
  std::vector<std::string> got;
  int failures = 0;
  for (auto it = stream.begin(); it != stream.end();) {
    try {
      got.push_back(manta::get(*it, 30s));
      ++it;
    } catch (const manta::task_error&) {
      ++failures;
    }
  }
  EXPECT_EQ(got, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(failures, 1);
}

TEST_F(stream_test, a_retry_after_sigkill_repeats_no_value) {
  start(2);
  const std::string marker = manta::testing::temp_path("stream-marker");
  ::unlink(marker.c_str());
  auto stream = manta::task(dies_once_midway).max_retries(1).remote(marker);
  std::vector<int> seen;
  while (auto r = stream.next(30s)) seen.push_back(manta::get(*r, 30s));
  EXPECT_EQ(::access(marker.c_str(), F_OK), 0) << "the first run did not die";
  ASSERT_EQ(seen.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(seen[i], i);
  ::unlink(marker.c_str());
}

TEST_F(stream_test, a_task_killed_without_retries_ends_its_stream_with_the_crash) {
  start(2);
  const std::string marker = manta::testing::temp_path("stream-marker-noretry");
  ::unlink(marker.c_str());
  auto stream = manta::task(dies_once_midway).max_retries(0).remote(marker);
  std::vector<int> seen;
  EXPECT_THROW(
      {
        while (auto r = stream.next(30s)) seen.push_back(manta::get(*r, 30s));
      },
      manta::worker_crashed_error);
  ASSERT_EQ(seen.size(), 6u);  // every value emitted before the kill
  for (int i = 0; i < 6; ++i) EXPECT_EQ(seen[i], i);
  ::unlink(marker.c_str());
}

TEST_F(stream_test, large_values_and_streams_read_inside_tasks) {
  start(2);
  int i = 0;
  for (auto& r : manta::task(big_blocks).remote(4)) {
    auto v = manta::get(r, 30s);
    ASSERT_EQ(v.size(), 1u << 20);
    EXPECT_EQ(v.front(), i);
    EXPECT_EQ(v.back(), i);
    ++i;
  }
  EXPECT_EQ(i, 4);
  std::vector<manta::object_ref<long>> sums;
  for (int n : {10, 20, 30}) sums.push_back(manta::task(sum_of_stream).remote(n));
  EXPECT_EQ(manta::get(sums[0], 30s), 45);
  EXPECT_EQ(manta::get(sums[1], 30s), 190);
  EXPECT_EQ(manta::get(sums[2], 30s), 435);
}

TEST_F(stream_test, a_stream_dropped_unread_lets_its_task_finish) {
  start(2);
  manta::object_ref<void> done;
  {
    auto stream = manta::task(count_to).remote(50);
    done = stream.task_result();
    auto first = stream.next(30s);
    ASSERT_TRUE(first.has_value());
  }  // dropped with 49 values unread
  manta::get(done, 30s);
  EXPECT_EQ(manta::get(manta::task(sum_of_stream).remote(3), 30s), 3);
}

TEST_F(stream_test, threads_of_the_task_may_emit_at_once) {
  start(2);
  std::map<int, std::vector<int>> by_thread;
  for (auto& r : manta::task(from_threads).max_retries(0).remote(4, 50)) {
    int v = manta::get(r, 30s);
    by_thread[v / 1000].push_back(v % 1000);
  }
  ASSERT_EQ(by_thread.size(), 4u);
  for (auto& [t, values] : by_thread) {
    ASSERT_EQ(values.size(), 50u) << "thread " << t;
    for (int i = 0; i < 50; ++i) EXPECT_EQ(values[i], i) << "thread " << t;  // each thread's order kept
  }
}

TEST(stream_usage, an_emitter_outside_a_stream_is_a_usage_error) {
  manta::emitter<int> loose;
  EXPECT_THROW(loose.emit(1), manta::usage_error);
}

}  // namespace

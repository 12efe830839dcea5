// as_completed_test: refs yielded in the order their tasks finish, failures
// included, each exactly once; bounded waits; the pool's imap_unordered on top.
// The finishing order is set by the test: each task waits for a gate file that
// the test creates, one at a time.
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support.hpp"

namespace {
using namespace std::chrono_literals;
using manta::testing::runtime_fixture;
using manta::testing::temp_path;

/// Returns `v` once `gate` exists (-1 after 30 s without it); throws for v < 0.
int after_gate(std::string gate, int v) {
  for (auto until = std::chrono::steady_clock::now() + 30s; std::chrono::steady_clock::now() < until;
       std::this_thread::sleep_for(1ms))
    if (::access(gate.c_str(), F_OK) == 0) {
      if (v < 0) throw std::runtime_error("negative " + std::to_string(v));
      return v;
    }
  return -1;
}
int square(int x) { return x * x; }
int checked_square(int x) {
  if (x < 0) throw std::invalid_argument("negative " + std::to_string(x));
  return x * x;
}
MANTA_REMOTE(after_gate, square, checked_square);

class as_completed : public runtime_fixture {
 protected:
  std::string gate(int i) { return temp_path("gate-" + std::to_string(i)); }
  void open_gate(int i) { std::ofstream(gate(i)) << "open"; }
  void TearDown() override {
    for (int i = 0; i < 8; ++i) ::unlink(gate(i).c_str());
    runtime_fixture::TearDown();
  }
};

TEST_F(as_completed, yields_refs_in_the_order_they_finish_failures_included) {
  start(5);
  const std::vector<int> values{10, 11, -12, 13, 14};
  std::vector<manta::object_ref<int>> refs;
  for (int i = 0; i < 5; ++i) refs.push_back(manta::task(after_gate).max_retries(0).remote(gate(i), values[i]));
  auto stream = manta::as_completed(refs);
  EXPECT_EQ(stream.remaining(), 5u);
  EXPECT_THROW(stream.next(50ms), manta::timeout_error);  // no gate open: nothing is done
  for (int i : {3, 0, 2, 4, 1}) {
    open_gate(i);
    auto r = stream.next(30s);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(*r, refs[i]) << "gate " << i << " was opened";
    if (values[i] < 0) {
      EXPECT_THROW(manta::get(*r, 10s), manta::task_error);
    } else {
      EXPECT_EQ(manta::get(*r, 10s), values[i]);
    }
  }
  EXPECT_EQ(stream.remaining(), 0u);
  EXPECT_FALSE(stream.next().has_value());
  EXPECT_FALSE(stream.next(0ms).has_value());  // the end is no timeout
}

TEST_F(as_completed, every_ref_comes_once_in_a_range_for) {
  start(2);
  std::vector<manta::object_ref<int>> refs;
  for (int i = 0; i < 2000; ++i) refs.push_back(manta::task(square).remote(i));
  refs.push_back(refs.front());  // the same ref twice is yielded twice
  std::multiset<int> seen;
  std::size_t n = 0;
  for (const auto& r : manta::as_completed(refs)) {
    seen.insert(manta::get(r, 10s));
    ++n;
  }
  EXPECT_EQ(n, refs.size());
  for (int i = 1; i < 2000; ++i) EXPECT_EQ(seen.count(i * i), 1u) << i;
  EXPECT_EQ(seen.count(0), 2u);
}

TEST_F(as_completed, empty_input_and_empty_refs) {
  start(1);
  auto none = manta::as_completed(std::vector<manta::object_ref<int>>{});
  EXPECT_EQ(none.begin(), none.end());
  EXPECT_THROW(manta::as_completed(std::vector<manta::object_ref<int>>(3)), manta::usage_error);
}

TEST_F(as_completed, refs_ready_before_the_call_come_in_the_order_given) {
  start(2);
  std::vector<manta::object_ref<int>> refs{manta::put(3), manta::put(1), manta::put(2)};
  std::vector<int> order;
  for (const auto& r : manta::as_completed(refs)) order.push_back(manta::get(r));
  EXPECT_EQ(order, (std::vector<int>{3, 1, 2}));
}

// imap_unordered is built on as_completed: a failed chunk throws once, then the
// stream goes on with the others (as multiprocessing's imap iterators do).
TEST_F(as_completed, imap_unordered_goes_on_after_a_failed_chunk) {
  start(2);
  auto stream = manta::pool{}.imap_unordered(checked_square, std::vector<int>{1, 2, -3, 4, 5, 6}, 1);
  int failures = 0, sum = 0, results = 0;
  for (int k = 0; k < 7; ++k) {
    try {
      auto v = stream.next();
      if (!v) break;
      sum += *v;
      ++results;
    } catch (const manta::task_error&) {
      ++failures;
    }
  }
  EXPECT_EQ(failures, 1);
  EXPECT_EQ(results, 5);
  EXPECT_EQ(sum, 1 + 4 + 16 + 25 + 36);
}

}  // namespace

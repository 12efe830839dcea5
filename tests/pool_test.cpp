// pool_test: manta::pool behaves like multiprocessing.Pool.
#include <algorithm>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "support.hpp"

namespace {
using manta::testing::runtime_per_workers;

long twice(int x) { return 2L * x; }
std::string label(const std::string& s) { return "<" + s + ">"; }
int mul(int a, int b) { return a * b; }
int fails_on_13(int x) {
  if (x == 13) throw std::domain_error("13 is unlucky");
  return x;
}
double half(double x) { return x / 2; }
// bool parameters and results (std::vector<bool> is a proxy container: the
// registry's map and starmap once bound `auto&` to its elements and did not compile).
int from_flag(bool b) { return b ? 1 : -1; }
bool is_even(int x) { return x % 2 == 0; }
bool both(bool a, bool b) { return a && b; }
MANTA_REMOTE(twice, label, mul, fails_on_13, half, from_flag, is_even, both);

class pool : public runtime_per_workers {};
INSTANTIATE_TEST_SUITE_P(workers, pool, ::testing::Values(1, 2, 4));

TEST_P(pool, map_keeps_order_for_any_chunk_size) {
  manta::pool p;
#if defined(__SANITIZE_THREAD__)
  std::vector<int> xs(20001);  // chunks of one item are a task each: fewer under ThreadSanitizer
#else
  std::vector<int> xs(100001);
#endif
  std::iota(xs.begin(), xs.end(), -50000);
  for (std::size_t chunk : {0u, 1u, 7u, 100000u, 500000u}) {
    auto ys = p.map(twice, xs, chunk);
    ASSERT_EQ(ys.size(), xs.size());
    for (std::size_t i = 0; i < xs.size(); i += 997) EXPECT_EQ(ys[i], 2L * xs[i]);
    EXPECT_EQ(ys.back(), 2L * xs.back());
  }
  auto small = p.map(twice, std::vector<int>{1, 2, 3}, 1);
  EXPECT_EQ(small, (std::vector<long>{2, 4, 6}));
  EXPECT_TRUE(p.map(twice, std::vector<int>{}).empty());
  std::vector<std::string> words{"a", "bb", "ccc"};
  EXPECT_EQ(p.map(label, words), (std::vector<std::string>{"<a>", "<bb>", "<ccc>"}));
}

TEST_P(pool, functions_of_bools_run_as_tasks_and_in_maps) {
  manta::pool p;
  EXPECT_EQ(manta::get(manta::task(from_flag).remote(true)), 1);
  EXPECT_FALSE(manta::get(manta::task(is_even).remote(3)));
  EXPECT_EQ(p.map(from_flag, std::vector<bool>{true, false, true}), (std::vector<int>{1, -1, 1}));
  EXPECT_EQ(p.map(is_even, std::vector<int>{1, 2, 3, 4}), (std::vector<bool>{false, true, false, true}));
  EXPECT_EQ(p.starmap(both, std::vector<std::tuple<bool, bool>>{{true, true}, {true, false}}),
            (std::vector<bool>{true, false}));
}

TEST_P(pool, starmap_applies_tuples) {
  manta::pool p;
  std::vector<std::tuple<int, int>> pairs;
  for (int i = 0; i < 1000; ++i) pairs.emplace_back(i, i + 1);
  auto ys = p.starmap(mul, pairs);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(ys[i], i * (i + 1));
}

TEST_P(pool, imap_yields_in_order_and_imap_unordered_yields_everything) {
  manta::pool p;
  std::vector<double> xs(1000);
  std::iota(xs.begin(), xs.end(), 0.0);
  std::vector<double> ordered;
  for (double y : p.imap(half, xs, 10)) ordered.push_back(y);
  ASSERT_EQ(ordered.size(), xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) EXPECT_EQ(ordered[i], xs[i] / 2);
  std::multiset<double> unordered;
  for (double y : p.imap_unordered(half, xs, 10)) unordered.insert(y);
  EXPECT_EQ(unordered, std::multiset<double>(ordered.begin(), ordered.end()));
}

TEST_P(pool, apply_async_and_apply) {
  manta::pool p;
  auto r = p.apply_async(mul, 6, 7);
  EXPECT_EQ(manta::get(r), 42);
  EXPECT_EQ(p.apply(mul, 3, 4), 12);
}

TEST_P(pool, an_exception_in_map_reaches_the_caller) {
  manta::pool p;
  std::vector<int> xs(100);
  std::iota(xs.begin(), xs.end(), 0);
  try {
    p.map(fails_on_13, xs);
    FAIL() << "no exception";
  } catch (const manta::task_error& e) {
    EXPECT_EQ(e.message(), "13 is unlucky");
    EXPECT_EQ(e.remote_type(), "std::domain_error");
  }
  // The pool keeps working.
  EXPECT_EQ(p.map(twice, std::vector<int>{5})[0], 10);
}

/// The documented per-item loop: every item taken, each failure caught.
/// @returns the items, and how many failed
template <class Range>
std::pair<std::vector<int>, int> take_each_catching(Range& results) {
  std::vector<int> got;
  int failures = 0;
  for (auto it = results.begin(); it != results.end();) {
    try {
      got.push_back(*it);
      ++it;
    } catch (const manta::task_error&) {
      ++failures;
    }
  }
  return {got, failures};
}

// A loop that catches per item goes on with the rest of an imap range, and
// sees no item twice: the iterator held the item before a failed one, and
// handed it out again (0 1 2 <error> 2 4 5).
TEST_P(pool, an_imap_loop_that_catches_a_failed_item_goes_on_with_the_rest_once) {
  manta::pool p;
  const std::vector<int> xs{10, 11, 12, 13, 14, 15, 13, 13, 16};  // a failure, and two in a row
  auto results = p.imap(fails_on_13, xs, 1);
  auto [got, failures] = take_each_catching(results);
  EXPECT_EQ(got, (std::vector<int>{10, 11, 12, 14, 15, 16}));
  EXPECT_EQ(failures, 3);
}

TEST_P(pool, a_loop_over_results_whose_first_item_failed_goes_on_with_the_rest) {
  // begin() threw the first item's failure, outside the loop's try.
  manta::pool p;
  const std::vector<int> xs{13, 10, 11};
  for (bool ordered : {true, false}) {
    auto results = ordered ? p.imap(fails_on_13, xs, 1) : p.imap_unordered(fails_on_13, xs, 1);
    auto [got, failures] = take_each_catching(results);
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, (std::vector<int>{10, 11})) << (ordered ? "imap" : "imap_unordered");
    EXPECT_EQ(failures, 1);
  }
  // Stepping without looking passes the first item too.
  auto results = p.imap(fails_on_13, std::vector<int>{1, 2, 3}, 1);
  auto it = results.begin();
  ++it;
  EXPECT_EQ(*it, 2);
}

TEST(pool_misuse, a_pool_needs_a_runtime) { EXPECT_THROW(manta::pool{}, manta::usage_error); }

}  // namespace

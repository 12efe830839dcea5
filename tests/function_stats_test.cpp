// function_stats_test.cpp: the per-function counts and run times behind
// `manta summary` and /metrics, driven directly (no runtime).
#include <string>
#include <unordered_map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/function_stats.hpp"

namespace {

using manta::runtime::function_stats;
using nlohmann::json;

json entry(const json& report, const std::string& name) {
  for (const auto& f : report["functions"])
    if (f["name"] == name) return f;
  return {};
}

TEST(function_stats, counts_runs_and_outcomes_busiest_first) {
  function_stats s;
  for (int i = 0; i < 10; ++i) {
    s.ran("f", 2'000'000);  // 2 ms
    s.finished("f");
  }
  s.ran("g", 50'000);
  s.failed("g");
  s.failed("h");  // failed without a run (an argument failed)
  json r = s.report({{"g", 2}});
  ASSERT_EQ(r["functions"].size(), 3u) << r.dump();
  EXPECT_EQ(r["functions"][0]["name"], "f");
  EXPECT_EQ(entry(r, "f")["finished"], 10);
  EXPECT_EQ(entry(r, "f")["runs"], 10);
  EXPECT_NEAR(entry(r, "f")["mean_s"].get<double>(), 0.002, 1e-9);
  EXPECT_NEAR(entry(r, "f")["total_s"].get<double>(), 0.02, 1e-9);
  EXPECT_EQ(entry(r, "g")["failed"], 1);
  EXPECT_EQ(entry(r, "g")["running"], 2);
  EXPECT_EQ(entry(r, "h")["runs"], 0);
  // Every run is in one bucket: 2 ms lies in (1 ms, 3 ms], the 6th.
  const json f = entry(r, "f");
  const json& bounds = r["bucket_bounds_s"];
  ASSERT_EQ(f["buckets"].size(), bounds.size() + 1);
  ASSERT_EQ(bounds[5].get<double>(), 3e-3);
  for (std::size_t i = 0; i < f["buckets"].size(); ++i) EXPECT_EQ(f["buckets"][i], i == 5 ? 10 : 0) << i;
}

TEST(function_stats, p95_stays_within_the_runs) {
  function_stats s;
  s.ran("once", 5'900'000);  // one run of 5.9 ms: its bucket ends at 10 ms
  json r = s.report({});
  EXPECT_NEAR(entry(r, "once")["p95_s"].get<double>(), 0.0059, 1e-9) << "not the bucket's end";
  function_stats many;
  for (int i = 0; i < 100; ++i) many.ran("f", i < 95 ? 100'000 : 20'000'000);  // 95 of 0.1 ms, 5 of 20 ms
  const double p95 = entry(many.report({}), "f")["p95_s"].get<double>();
  EXPECT_GT(p95, 3e-5);
  EXPECT_LE(p95, 1e-4) << "95% of the runs took 0.1 ms at most";
}

TEST(function_stats, names_beyond_the_limit_fold_into_other) {
  function_stats s;
  for (std::size_t i = 0; i < function_stats::max_functions + 50; ++i) s.finished("f" + std::to_string(i));
  json r = s.report({});
  EXPECT_EQ(r["functions"].size(), function_stats::max_functions + 1);
  EXPECT_EQ(entry(r, "(other)")["finished"], 50);
}

}  // namespace

// runtime/function_stats.hpp: per-function counts and run times, what `manta
// summary`, /metrics and the dashboard show (as `ray summary tasks`). Kept by
// the scheduler under its mutex, so not thread-safe itself.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>

#include <nlohmann/json_fwd.hpp>

namespace manta::runtime {

class function_stats {
 public:
  /// Upper bounds of the run-time histogram's buckets, in seconds (then +Inf).
  static constexpr std::array<double, 15> bucket_bounds = {1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03,
                                                           0.1,  0.3,  1,    3,    10,   30,   100};
  /// Names kept apart at most; runs of later ones are counted under "(other)",
  /// so a program naming tasks by the thousand cannot grow this for ever.
  static constexpr std::size_t max_functions = 1000;

  /// A run of `name` ended (its result, or an exception), after `ns`.
  void ran(const std::string& name, std::uint64_t ns);
  /// A task of `name` finished: its results are there.
  void finished(const std::string& name) { entry_of(name).finished++; }
  /// A task of `name` failed for good (its run, an argument, a crash, a cancel).
  void failed(const std::string& name) { entry_of(name).failed++; }

  /// {"functions": [{name, finished, failed, running, runs, total_s, mean_s,
  /// p95_s, buckets: [count per bound, then +Inf]}], "bucket_bounds_s": [...]},
  /// busiest first; `running` counts each name's tasks now on a worker.
  nlohmann::json report(const std::unordered_map<std::string, std::size_t>& running) const;

 private:
  struct entry {
    std::uint64_t finished = 0, failed = 0, runs = 0, total_ns = 0, max_ns = 0;
    std::array<std::uint64_t, bucket_bounds.size() + 1> buckets{};
  };
  entry& entry_of(const std::string& name);
  std::unordered_map<std::string, entry> by_name_;
};

}  // namespace manta::runtime

// runtime/function_stats.cpp: per-function counts and run times.
#include "runtime/function_stats.hpp"

#include <algorithm>
#include <vector>

#include <nlohmann/json.hpp>

namespace manta::runtime {
namespace {

template <class Entry>
double interpolated_p95(const Entry& e) {
  if (e.runs == 0) return 0;
  const double target = 0.95 * static_cast<double>(e.runs);
  double below = 0, lower = 0;
  for (std::size_t i = 0; i < e.buckets.size(); ++i) {
    const double upper = i < function_stats::bucket_bounds.size() ? function_stats::bucket_bounds[i]
                                                                   : function_stats::bucket_bounds.back();
    const double here = static_cast<double>(e.buckets[i]);
    if (below + here >= target && here > 0) return lower + (upper - lower) * (target - below) / here;
    below += here;
    lower = upper;
  }
  return lower;
}

/// The run time under which 95% of `e`'s runs ended, interpolated inside its
/// bucket (runs past the last bound count at that bound), and never above the
/// longest run (one run of 5.9 ms read as 9.6 ms, the bucket's end).
template <class Entry>
double p95_of(const Entry& e) {
  return std::min(interpolated_p95(e), static_cast<double>(e.max_ns) * 1e-9);
}

}  // namespace

function_stats::entry& function_stats::entry_of(const std::string& name) {
  if (auto it = by_name_.find(name); it != by_name_.end()) return it->second;
  if (by_name_.size() >= max_functions) return by_name_["(other)"];
  return by_name_[name];
}

void function_stats::ran(const std::string& name, std::uint64_t ns) {
  entry& e = entry_of(name);
  ++e.runs;
  e.total_ns += ns;
  e.max_ns = std::max(e.max_ns, ns);
  const double s = static_cast<double>(ns) * 1e-9;
  const auto at = std::lower_bound(bucket_bounds.begin(), bucket_bounds.end(), s) - bucket_bounds.begin();
  ++e.buckets[static_cast<std::size_t>(at)];
}

nlohmann::json function_stats::report(const std::unordered_map<std::string, std::size_t>& running) const {
  std::vector<std::pair<const std::string*, const entry*>> order;
  order.reserve(by_name_.size());
  for (const auto& [name, e] : by_name_) order.emplace_back(&name, &e);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    const auto ta = a.second->finished + a.second->failed, tb = b.second->finished + b.second->failed;
    return ta != tb ? ta > tb : *a.first < *b.first;
  });
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [name, e] : order) {
    const auto r = running.find(*name);
    const double total_s = static_cast<double>(e->total_ns) * 1e-9;
    out.push_back({{"name", *name},
                   {"finished", e->finished},
                   {"failed", e->failed},
                   {"running", r == running.end() ? 0 : r->second},
                   {"runs", e->runs},
                   {"total_s", total_s},
                   {"mean_s", e->runs ? total_s / static_cast<double>(e->runs) : 0.0},
                   {"p95_s", p95_of(*e)},
                   {"buckets", e->buckets}});
  }
  // Running now but never ended yet: listed too.
  for (const auto& [name, n] : running)
    if (!by_name_.count(name))
      out.push_back({{"name", name}, {"finished", 0}, {"failed", 0}, {"running", n}, {"runs", 0}, {"total_s", 0.0},
                     {"mean_s", 0.0}, {"p95_s", 0.0}, {"buckets", std::array<std::uint64_t, bucket_bounds.size() + 1>{}}});
  return {{"functions", std::move(out)}, {"bucket_bounds_s", bucket_bounds}};
}

}  // namespace manta::runtime

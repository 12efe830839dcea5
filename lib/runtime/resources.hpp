// runtime/resources.hpp: the node's resource ledger: CPUs (fractions allowed),
// GPUs (ids handed out exclusively) and custom named resources.
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <manta/detail/task_request.hpp>
#include <manta/options.hpp>

#include "runtime/pool_allocated.hpp"

namespace manta::runtime {

/// What a task or actor asks for.
struct demand {
  double cpu = 0;
  int gpu = 0;
  std::map<std::string, double> custom;
  bool empty() const { return cpu == 0 && gpu == 0 && custom.empty(); }
  bool operator==(const demand&) const = default;
  auto operator<=>(const demand&) const = default;
};

/// Not thread-safe: the scheduler uses it under its mutex.
class resource_ledger {
 public:
  /// Fractional amounts are compared with this slack (sums of doubles drift).
  static constexpr double epsilon = 1e-9;

  resource_ledger() = default;
  resource_ledger(double cpus, int gpus, std::map<std::string, double> custom);

  /// Why `d` can never be met on this node (naming the resource), or nothing.
  std::optional<std::string> infeasible(const demand& d) const;
  /// Whether `d` fits in what is free now.
  bool fits(const demand& d) const;
  /// Whether `n` CPUs (and nothing else) fit in what is free now.
  bool fits_cpu(double n) const { return n <= cpu_free_ + epsilon; }
  /// Takes `d` (which must fit); `gpu_ids` become the GPU ids granted. On a throw, nothing is taken.
  void take(const demand& d, pool_vector<int>& gpu_ids);
  /// Gives back what take granted.
  void give(const demand& d, std::span<const int> gpu_ids);
  /// CPUs alone, for tasks that lend theirs while they wait.
  void take_cpu(double n) { cpu_free_ -= n; }
  void give_cpu(double n) { cpu_free_ += n; }

  std::map<std::string, double> totals() const;
  std::map<std::string, double> available() const;

 private:
  double cpu_total_ = 0, cpu_free_ = 0;
  int gpu_total_ = 0;
  std::vector<int> gpu_free_;
  std::map<std::string, double> custom_total_, custom_free_;
};

/// GPUs of this machine, counted by the CUDA runtime in a short-lived child
/// process (a CUDA context must never exist in a process that forks workers);
/// 0 when built without CUDA or when there is no device.
int detect_gpus();

/// The node's resources as `opts` declare them for `workers` workers: CPUs (an
/// entry "CPU" overrides the count), GPUs (an entry "GPU", else num_gpus, else
/// the machine's) and the custom ones.
resource_ledger ledger_for(const options& opts, int workers);

/// What a task (or an actor) submitted with `o` holds while it runs.
demand demand_of(const detail::task_options& o);

/// Why a task (or, with `actor`, an actor) named `name`, submitted with `o`
/// (whose demand is `need`), can never run on this node (the message a
/// usage_error carries); or nothing.
std::optional<std::string> check_demand(const resource_ledger& ledger, const detail::task_options& o,
                                        const demand& need, bool actor, const std::string& name);

}  // namespace manta::runtime

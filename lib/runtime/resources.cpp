// runtime/resources.cpp: the ledger, and GPU discovery.
#include "runtime/resources.hpp"

#include "runtime/memory_monitor.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <algorithm>
#include <cstdio>

#ifdef MANTA_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace manta::runtime {

resource_ledger ledger_for(const options& opts, int workers) {
  std::map<std::string, double> custom = opts.resources;
  double cpus = workers;
  if (auto it = custom.find("CPU"); it != custom.end()) {
    cpus = it->second;
    custom.erase(it);
  }
  int gpus = opts.num_gpus >= 0 ? opts.num_gpus : -1;
  if (auto it = custom.find("GPU"); it != custom.end()) {
    gpus = static_cast<int>(it->second);
    custom.erase(it);
  }
  if (gpus < 0) gpus = detect_gpus();
  if (!custom.count("memory")) custom["memory"] = static_cast<double>(read_memory_usage().total);
  return resource_ledger(cpus, gpus, std::move(custom));
}

demand demand_of(const detail::task_options& o) {
  demand need{o.num_cpus, static_cast<int>(o.num_gpus), o.resources};
  if (o.memory) need.custom["memory"] = static_cast<double>(o.memory);
  return need;
}

std::optional<std::string> check_demand(const resource_ledger& ledger, const detail::task_options& o,
                                        const demand& need, bool actor, const std::string& name) {
  auto what = [&] { return actor ? "actor " + name : "task '" + name + "'"; };
  if (o.num_gpus != static_cast<int>(o.num_gpus))
    return "manta: " + what() + " asks for " + std::to_string(o.num_gpus) + " GPUs; GPUs are handed out whole";
  if (auto why = ledger.infeasible(need)) return "manta: " + what() + " " + *why;
  return std::nullopt;
}

resource_ledger::resource_ledger(double cpus, int gpus, std::map<std::string, double> custom)
    : cpu_total_(cpus), cpu_free_(cpus), gpu_total_(gpus), custom_total_(custom), custom_free_(custom) {
  for (int i = 0; i < gpus; ++i) gpu_free_.push_back(i);
}

std::optional<std::string> resource_ledger::infeasible(const demand& d) const {
  auto say = [](const std::string& what, double want, double have) {
    auto number = [](double x) {  // (bytes of memory whole, not as 1.1e+12)
      char b[32];
      std::snprintf(b, sizeof b, x == std::floor(x) && std::fabs(x) < 1e18 ? "%.0f" : "%g", x);
      return std::string(b);
    };
    return "asks for " + number(want) + " " + what + " but this node has " + number(have);
  };
  if (d.cpu > cpu_total_ + epsilon) return say("CPU", d.cpu, cpu_total_);
  if (d.gpu > gpu_total_) return say("GPU", d.gpu, gpu_total_);
  for (const auto& [name, amount] : d.custom) {
    auto it = custom_total_.find(name);
    if (it == custom_total_.end())
      return "asks for the resource '" + name + "', which this node does not offer";
    if (amount > it->second + epsilon) return say("'" + name + "'", amount, it->second);
  }
  return std::nullopt;
}

bool resource_ledger::fits(const demand& d) const {
  if (!fits_cpu(d.cpu)) return false;
  if (d.gpu > static_cast<int>(gpu_free_.size())) return false;
  for (const auto& [name, amount] : d.custom) {
    auto it = custom_free_.find(name);
    if (it == custom_free_.end() || amount > it->second + epsilon) return false;
  }
  return true;
}

void resource_ledger::take(const demand& d, pool_vector<int>& gpu_ids) {
  gpu_ids.assign(gpu_free_.begin(), gpu_free_.begin() + d.gpu);  // (first: it may throw)
  cpu_free_ -= d.cpu;
  for (const auto& [name, amount] : d.custom) custom_free_[name] -= amount;
  gpu_free_.erase(gpu_free_.begin(), gpu_free_.begin() + d.gpu);
}

void resource_ledger::give(const demand& d, std::span<const int> gpu_ids) {
  cpu_free_ += d.cpu;
  for (const auto& [name, amount] : d.custom) custom_free_[name] += amount;
  gpu_free_.insert(gpu_free_.end(), gpu_ids.begin(), gpu_ids.end());
  std::sort(gpu_free_.begin(), gpu_free_.end());
}

std::map<std::string, double> resource_ledger::totals() const {
  std::map<std::string, double> out = custom_total_;
  out["CPU"] = cpu_total_;
  out["GPU"] = gpu_total_;
  return out;
}

std::map<std::string, double> resource_ledger::available() const {
  std::map<std::string, double> out = custom_free_;
  out["CPU"] = std::max(0.0, cpu_free_);
  out["GPU"] = static_cast<double>(gpu_free_.size());
  return out;
}

int detect_gpus() {
#ifdef MANTA_HAVE_CUDA
  int fds[2];
  if (::pipe(fds) != 0) return 0;
  pid_t child = ::fork();
  if (child == 0) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    [[maybe_unused]] auto n = ::write(fds[1], &count, sizeof count);
    ::_exit(0);
  }
  ::close(fds[1]);
  int count = 0;
  if (child < 0 || ::read(fds[0], &count, sizeof count) != sizeof count) count = 0;
  ::close(fds[0]);
  if (child > 0) ::waitpid(child, nullptr, 0);
  return count;
#else
  return 0;
#endif
}

}  // namespace manta::runtime

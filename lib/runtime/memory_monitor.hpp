// runtime/memory_monitor.hpp: how much memory the machine uses, and the thread
// that watches it for options.memory_threshold.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace manta::runtime {

struct memory_usage {
  std::uint64_t used = 0;   ///< bytes in use (what the kernel cannot give back without killing)
  std::uint64_t total = 0;  ///< bytes there are: the machine's, or the cgroup's limit if lower
  double fraction() const { return total ? static_cast<double>(used) / static_cast<double>(total) : 0; }
  /// "9.1 of 9.6 GiB (95%)"
  std::string describe() const;
};

/// The machine's memory from /proc/meminfo (MemTotal - MemAvailable), or this
/// process's cgroup (v2 memory.current / memory.max, v1 usage / limit) when it
/// has a lower limit.
memory_usage read_memory_usage();

/// Resident bytes of process `pid` (0 if it is gone).
std::uint64_t resident_bytes_of(pid_t pid);

/// Calls `over(usage)` from a thread of its own each time it finds the used
/// fraction above `threshold`, checking every `period`.
class memory_monitor {
 public:
  memory_monitor(double threshold, std::function<void(const memory_usage&)> over,
                 std::chrono::milliseconds period = std::chrono::milliseconds(100));
  ~memory_monitor();  ///< stops and joins the thread
  memory_monitor(const memory_monitor&) = delete;
  memory_monitor& operator=(const memory_monitor&) = delete;

 private:
  void run();

  const double threshold_;
  const std::function<void(const memory_usage&)> over_;
  const std::chrono::milliseconds period_;
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace manta::runtime

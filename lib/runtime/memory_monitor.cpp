// runtime/memory_monitor.cpp: reading memory use, and the monitor's thread.
#include "runtime/memory_monitor.hpp"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace manta::runtime {
namespace {

/// The first number in `path`, or 0 (absent, unreadable, or "max").
std::uint64_t read_number(const std::string& path) {
  std::ifstream f(path);
  std::uint64_t v = 0;
  if (!(f >> v)) return 0;
  return v;
}

/// The value of `key` in a memory.stat file, or 0.
std::uint64_t stat_value(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  std::string k;
  std::uint64_t v = 0;
  while (f >> k >> v)
    if (k == key) return v;
  return 0;
}

/// The cgroup this process is in, for the memory controller: v2's path ("0::/x")
/// or v1's ("N:memory:/x"), with the mount it lives under.
bool cgroup_memory(std::uint64_t& used, std::uint64_t& limit) {
  std::uint64_t inactive = 0;
  std::ifstream f("/proc/self/cgroup");
  std::string line;
  while (std::getline(f, line)) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) {  // v2
      const std::string dir = "/sys/fs/cgroup" + path;
      limit = read_number(dir + "/memory.max");
      used = read_number(dir + "/memory.current");
      inactive = stat_value(dir + "/memory.stat", "inactive_file");
    } else if (controllers.find("memory") != std::string::npos) {  // v1
      const std::string dir = "/sys/fs/cgroup/memory" + path;
      limit = read_number(dir + "/memory.limit_in_bytes");
      used = read_number(dir + "/memory.usage_in_bytes");
      inactive = stat_value(dir + "/memory.stat", "total_inactive_file");
    } else {
      continue;
    }
    // Page cache the kernel can drop is not memory in use (as the OOM killer sees it).
    used = used > inactive ? used - inactive : 0;
    if (limit && used) return true;
  }
  return false;
}

}  // namespace

std::string memory_usage::describe() const {
  char s[96];
  std::snprintf(s, sizeof s, "%.2f of %.2f GiB (%.1f%%)", static_cast<double>(used) / (1 << 30),
                static_cast<double>(total) / (1 << 30), 100 * fraction());
  return s;
}

memory_usage read_memory_usage() {
  memory_usage m;
  std::ifstream f("/proc/meminfo");
  std::string key;
  std::uint64_t kb = 0, available = 0;
  std::string unit;
  while (f >> key >> kb) {
    std::getline(f, unit);
    if (key == "MemTotal:") m.total = kb << 10;
    if (key == "MemAvailable:") available = kb << 10;
  }
  m.used = m.total > available ? m.total - available : 0;
  std::uint64_t cg_used = 0, cg_limit = 0;
  // A cgroup's limit counts when it is below the machine's (unlimited is a huge number).
  if (cgroup_memory(cg_used, cg_limit) && cg_limit < m.total) {
    m.used = cg_used;
    m.total = cg_limit;
  }
  return m;
}

std::uint64_t resident_bytes_of(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/statm");
  std::uint64_t size = 0, resident = 0;
  if (!(f >> size >> resident)) return 0;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

memory_monitor::memory_monitor(double threshold, std::function<void(const memory_usage&)> over,
                               std::chrono::milliseconds period)
    : threshold_(threshold), over_(std::move(over)), period_(period), thread_([this] { run(); }) {}

memory_monitor::~memory_monitor() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
}

void memory_monitor::run() {
  std::unique_lock lock(mu_);
  while (!stop_cv_.wait_for(lock, period_, [&] { return stop_; })) {
    lock.unlock();
    try {
      const memory_usage m = read_memory_usage();
      if (m.fraction() > threshold_) over_(m);
    } catch (...) {
      // Short of memory itself (bad_alloc), or the runtime stopping: look again next period.
    }
    lock.lock();
  }
}

}  // namespace manta::runtime

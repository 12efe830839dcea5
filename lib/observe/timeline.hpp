// observe/timeline.hpp: what ran where and when, as a Chrome trace (opens in
// Perfetto or chrome://tracing). Workers time their own tasks and send start
// and duration with each result; the driver, which sees every result, keeps the
// node's events in one buffer. Off (the default) a recording site costs one
// relaxed load; on, an event is a lock and an append.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace manta::observe {

/// steady_clock in ns: the clock workers and the driver share on one machine.
std::uint64_t now_ns() noexcept;

class timeline {
 public:
  /// Events kept at most (about 100 MB); later ones are counted, not kept.
  static constexpr std::size_t max_events = 1'000'000;

  struct task_event {
    std::string name;
    bool actor_call = false;
    pid_t pid = 0;
    std::uint64_t submitted_ns = 0, started_ns = 0, duration_ns = 0;
    std::uint64_t arg_bytes = 0, result_bytes = 0;
    bool ok = true;
  };

  bool on() const noexcept { return on_.load(std::memory_order_relaxed); }
  void start() noexcept { on_.store(true, std::memory_order_relaxed); }
  void stop() noexcept { on_.store(false, std::memory_order_relaxed); }

  void task(task_event&& e);
  /// A point in time: a spill, a process's death. `detail` goes in its args.
  void instant(std::string name, pid_t pid, std::string detail);
  /// Names a process in the trace ("driver", "worker 3", "actor Counter").
  void name_process(pid_t pid, std::string name);

  /// The events so far as a Chrome trace: {"traceEvents": [...]}.
  std::string json() const;
  /// Forgets the events recorded so far.
  void clear();
  std::size_t size() const;

 private:
  struct instant_event {
    std::string name, detail;
    pid_t pid = 0;
    std::uint64_t at_ns = 0;
  };
  std::atomic<bool> on_{false};
  mutable std::mutex mu_;
  std::uint64_t origin_ns_ = now_ns();  ///< ts 0 in the trace
  std::vector<task_event> tasks_;
  std::vector<instant_event> instants_;
  std::vector<std::pair<pid_t, std::string>> names_;
  std::uint64_t dropped_ = 0;
};

}  // namespace manta::observe

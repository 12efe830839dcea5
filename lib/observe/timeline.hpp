// observe/timeline.hpp: what ran where and when, as a Chrome trace (opens in
// Perfetto or chrome://tracing). Workers time their own tasks and send start
// and duration with each result; the driver, which sees every result, keeps the
// node's events in one buffer. Off (the default) a recording site costs one
// relaxed load; on, an event is a lock, a name lookup and a 64-byte append.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace manta::observe {

/// steady_clock in ns: the clock workers and the driver share on one machine.
std::uint64_t now_ns() noexcept;

class timeline {
 public:
  /// Events kept at most (64 MB of them); later ones are counted, not kept.
  static constexpr std::size_t max_events = 1'000'000;

  struct task_event {
    std::string_view name;  ///< copied (interned) when recorded
    bool actor_call = false;
    pid_t pid = 0;
    pid_t thread = 0;  ///< the thread that ran it (0: the process's main track)
    std::uint64_t submitted_ns = 0;  ///< 0: not known (submitted before recording began)
    std::uint64_t started_ns = 0, duration_ns = 0;
    std::uint64_t arg_bytes = 0, result_bytes = 0;
    bool ok = true;
  };

  bool on() const noexcept { return on_.load(std::memory_order_relaxed); }
  void start() noexcept { on_.store(true, std::memory_order_relaxed); }
  void stop() noexcept { on_.store(false, std::memory_order_relaxed); }

  void task(const task_event& e);
  /// A point in time: a spill, a process's death. `detail` goes in its args.
  void instant(std::string_view name, pid_t pid, std::string_view detail);
  /// Names a process in the trace ("driver", "worker 3", "actor Counter").
  void name_process(pid_t pid, std::string name);

  /// The events so far as a Chrome trace: {"traceEvents": [...]}. The events
  /// are copied under the lock and written out after it: recording goes on.
  std::string json() const;
  /// Forgets the events and process names recorded so far.
  void clear();
  std::size_t size() const;

 private:
  struct event {  // plain data: copied in one go by json()
    char phase;   ///< 'X' complete, 'i' instant
    bool actor_call, ok;
    pid_t pid, thread;
    std::uint32_t name, detail;  ///< indexes into strings_
    std::uint64_t submitted_ns, started_ns, duration_ns, arg_bytes, result_bytes;
  };
  std::uint32_t intern(std::string_view s);  // with mu_ held
  bool full();                               // with mu_ held

  std::atomic<bool> on_{false};
  mutable std::mutex mu_;
  std::uint64_t origin_ns_ = now_ns();  ///< ts 0 in the trace
  std::vector<event> events_;
  std::vector<std::string> strings_;  ///< names and details, each once
  struct string_hash {
    using is_transparent = void;  // looked up by string_view: no string made per event
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::uint32_t, string_hash, std::equal_to<>> string_index_;
  std::vector<std::pair<pid_t, std::string>> names_;
  std::uint64_t dropped_ = 0;
};

}  // namespace manta::observe

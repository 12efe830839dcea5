// detail/introspect.hpp: a look inside the running node, for tests and tools.
// Not part of the stable API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace manta::detail {

/// pids of the zygote and the live workers of this driver's runtime.
std::vector<int> runtime_process_ids();
/// Bytes of the arena in use.
std::size_t arena_used_bytes();
/// Objects in the directory.
std::size_t object_count();
/// Tasks and actor calls the node holds: waiting for arguments, queued, running.
std::size_t task_count();

/// What the node has gone through since init.
struct runtime_counters {
  std::uint64_t tasks_finished = 0;   ///< tasks and actor calls that sealed their results
  std::uint64_t task_retries = 0;     ///< runs re-queued after a crash (or an exception, when asked)
  std::uint64_t processes_lost = 0;   ///< workers and actor hosts that died unasked
  std::uint64_t actor_restarts = 0;
  /// Workers started beyond the pool's size while its workers waited in get/wait.
  std::uint64_t extra_workers_started = 0;
  /// Tasks sent ahead to a busy worker, and those taken back before they started.
  std::uint64_t tasks_sent_ahead = 0;
  std::uint64_t tasks_taken_back = 0;
};
runtime_counters counters();

/// What spilling has done since init.
struct spill_counters {
  std::uint64_t spilled = 0;      ///< objects written to the spill file
  std::uint64_t restored = 0;     ///< objects read back into the arena
  std::uint64_t spilled_now = 0;  ///< objects in the spill file now
  std::uint64_t disk_bytes = 0;   ///< bytes the spill file occupies on disk now
};
spill_counters spilling();

}  // namespace manta::detail

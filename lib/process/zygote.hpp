// process/zygote.hpp: the zygote, forked by init() while the driver is still
// single-threaded; it forks every later process (workers, actor hosts) and
// reports their exits, so no multithreaded process ever forks.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "process/control.hpp"

namespace manta::process {

struct zygote_request {
  enum kind_t : std::uint32_t { spawn_worker = 1, stop = 2 } kind;
  std::int32_t slot;
  std::uint64_t process_number;
};

/// Replies on the zygote socket. `spawned` carries four fds: the driver's write
/// end to the process, its read end from the process, and the process's stdout
/// and stderr read ends.
struct zygote_reply {
  enum kind_t : std::uint32_t { spawned = 1, exited = 2 } kind;
  std::int32_t slot;
  std::int32_t pid;
  std::int32_t status;  ///< waitpid status, for `exited`
};

struct zygote_config {
  std::uint32_t epoch = 0;
  std::size_t num_workers = 0;
  control_block* control = nullptr;
  std::byte* arena_base = nullptr;
  int pipe_capacity = 1 << 20;
  int doorbell_read = -1;   ///< closed in the zygote
  int doorbell_write = -1;  ///< handed to every process
  std::uint64_t worker_setup = 0;  ///< id of options.worker_setup, or 0
  std::string control_socket;      ///< the driver's socket: removed when the zygote exits
  std::string crash_dir;           ///< where workers write their crashing thread's stack, or empty
};

struct zygote_handle {
  pid_t pid = -1;
  int socket = -1;  ///< driver's end, SOCK_SEQPACKET, close-on-exec
};

/// What a program embedding an interpreter must do around the runtime's own
/// forks (init's fork of the zygote, and the zygote's of every worker and actor
/// host): Python's PyOS_BeforeFork and PyOS_AfterFork_Parent/_Child. Each may
/// be null. Set before init; the zygote and its children inherit them.
struct fork_hooks {
  void (*before)() = nullptr;
  void (*after_in_parent)() = nullptr;
  void (*after_in_child)() = nullptr;
};
void set_fork_hooks(const fork_hooks& hooks) noexcept;

/// Forks the zygote. Call while the process has a single thread.
/// @throws std::system_error
zygote_handle start_zygote(const zygote_config& config);

}  // namespace manta::process

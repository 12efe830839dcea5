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

/// Forks the zygote. Call while the process has a single thread.
/// @throws std::system_error
zygote_handle start_zygote(const zygote_config& config);

}  // namespace manta::process

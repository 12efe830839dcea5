// process/worker.hpp: the loop of a worker process: read tasks from the driver's
// pipe, run them (nested ones too, while a task waits in get), send results back.
#pragma once

#include <cstddef>
#include <cstdint>

#include "process/control.hpp"

namespace manta::process {

struct worker_config {
  int from_driver = -1;  ///< read end of the driver's pipe to this worker
  int to_driver = -1;    ///< write end of this worker's pipe to the driver
  int doorbell = -1;     ///< write end of the pipe that wakes the driver's I/O thread
  int slot = 0;
  std::uint64_t process_number = 0;
  std::uint32_t epoch = 0;
  std::size_t num_workers = 0;
  control_block* control = nullptr;
  std::byte* arena_base = nullptr;
  std::uint64_t worker_setup = 0;  ///< id of options.worker_setup, or 0
  const char* crash_dir = "";      ///< where a crash's stack goes (observe/crash_stack.hpp), or ""
};

/// Runs the worker until the driver goes away; never returns.
[[noreturn]] void run_worker(const worker_config& config);

}  // namespace manta::process

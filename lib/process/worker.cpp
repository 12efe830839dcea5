// process/worker.cpp: the loop of a worker process. Tasks arrive on the driver's
// pipe and run one at a time; a task that waits in get/wait tells the driver
// (which lends its CPU) and runs what the driver sends meanwhile, nested on its
// stack, so a fixed pool never deadlocks on nested tasks. Once a constructor
// has run here, the process is an actor host instead (actor_host.cpp).
#include "process/worker.hpp"
#include "observe/thread_name.hpp"

#include <unistd.h>

#include <exception>
#include <string>

#include "observe/crash_stack.hpp"
#include "observe/log.hpp"
#include "process/actor_host.hpp"
#include "process/task_runner.hpp"
#include "process/worker_context.hpp"

namespace manta::process {

void run_worker(const worker_config& config) {
  // Nothing may unwind out of here: below is the zygote's fork, and below that
  // the user's main, which must never run a second time in this process.
  try {
    observe::name_runtime_thread("manta-worker");
    observe::install_crash_handler(config.crash_dir);
    static worker_context* ctx = new worker_context(config);  // lives until _exit
    set_current_context(ctx);
    // Held for the process's life, before any runtime lock: entry points nested
    // in the runtime's own sections then never take the context lock after them.
    context_use hold;
    std::string body;
    for (;;) {
      ctx->take_task(body);
      run_task_body(*ctx, body);
      if (ctx->actor_host()) host_actor(*ctx);
    }
  } catch (const std::exception& e) {
    MANTA_ERROR << "worker: " << e.what();
  } catch (...) {
    MANTA_ERROR << "worker: an unknown exception left the worker loop";
  }
  ::_exit(70);
}

}  // namespace manta::process

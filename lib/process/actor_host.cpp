// process/actor_host.cpp: a process hosting one actor, after its constructor ran.
#include "process/actor_host.hpp"

#include <unistd.h>

#include <exception>
#include <stdexcept>
#include <system_error>
#include <string>
#include <thread>

#include "observe/log.hpp"
#include "process/task_runner.hpp"
#include "process/worker_context.hpp"

namespace manta::process {
namespace {

[[noreturn]] void execute_calls(worker_context& ctx) {
  try {
    context_use hold;  // a worker's context lives as long as the process
    std::string body;
    for (;;) {
      ctx.take_task(body);
      run_task_body(ctx, body);
    }
  } catch (const std::exception& e) {
    MANTA_ERROR << "actor host: " << e.what();
  } catch (...) {
  }
  ::_exit(70);
}

}  // namespace

void host_actor(worker_context& ctx) {
  const int n = ctx.concurrency();
  if (n <= 1) execute_calls(ctx);
  ctx.set_threaded();
  for (int i = 0; i < n; ++i) {
    try {
      std::thread([&ctx] { execute_calls(ctx); }).detach();
    } catch (const std::system_error& e) {
      // The worker loop ends the process: the actor dies with this reason logged.
      throw std::runtime_error("cannot start executor thread " + std::to_string(i + 1) + " of " +
                               std::to_string(n) + " (max_concurrency): " + e.what());
    }
  }
  ctx.read_forever();
}

}  // namespace manta::process

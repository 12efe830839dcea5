// process/actor_host.cpp: a process hosting one actor, after its constructor ran.
#include "process/actor_host.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
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

/// The executor threads of a threaded actor: the first few start with the
/// host, the rest only when every started one is busy, so an async actor's
/// max_concurrency of 1000 costs threads only for calls that overlap.
class executors {
 public:
  static constexpr int started_at_once = 16;

  executors(worker_context& ctx, int max) : ctx_(ctx), max_(max) {}

  /// Runs the calls on this thread alone (max_concurrency 1).
  [[noreturn]] void run_here() {
    started_ = max_;
    execute_calls();
  }

  /// Starts the first threads. @throws std::runtime_error if one cannot start
  void start() {
    const int first = std::min(max_, started_at_once);
    for (int i = 0; i < first; ++i) add();
  }

 private:
  [[noreturn]] void execute_calls() {
    try {
      context_use hold;  // a worker's context lives as long as the process
      std::string body;
      for (;;) {
        idle_.fetch_add(1);
        ctx_.take_task(body);
        if (idle_.fetch_sub(1) == 1 && started_.load() < max_) grow();  // one still waits for the next call
        run_task_body(ctx_, body);
      }
    } catch (const std::exception& e) {
      MANTA_ERROR << "actor host: " << e.what();
    } catch (...) {
    }
    ::_exit(70);
  }

  /// One more thread, asked by an executor that took the last idle place:
  /// one that cannot start leaves the actor serving with those it has (the
  /// call just taken, and those in flight, must not die with it).
  void grow() {
    try {
      add();
    } catch (const std::exception& e) {
      if (!warned_.exchange(true)) MANTA_WARN << "actor host: " << e.what() << "; going on with the threads running";
    }
  }

  void add() {
    const int n = started_.fetch_add(1) + 1;
    if (n > max_) {
      started_.fetch_sub(1);
      return;
    }
    try {
      std::thread([this] { execute_calls(); }).detach();
    } catch (const std::system_error& e) {
      started_.fetch_sub(1);
      // At the host's start, out of the loop: the process ends, the actor dies with this reason logged.
      throw std::runtime_error("cannot start executor thread " + std::to_string(n) + " of " +
                               std::to_string(max_) + " (max_concurrency): " + e.what());
    }
  }

  worker_context& ctx_;
  const int max_;
  std::atomic<int> started_{0};
  std::atomic<int> idle_{0};
  std::atomic<bool> warned_{false};
};

}  // namespace

void host_actor(worker_context& ctx) {
  const int n = ctx.concurrency();
  auto* threads = new executors(ctx, std::max(n, 1));  // as long as the process: never freed
  if (n <= 1) threads->run_here();
  ctx.set_threaded();
  threads->start();
  ctx.read_forever();
}

}  // namespace manta::process

// runtime/api.cpp: manta::init, manta::shutdown and the introspection calls,
// and what a fork of the driver does with the runtime (leaves it alone).
#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <tuple>

#include <manta/detail/progress.hpp>
#include <manta/errors.hpp>
#include <manta/version.hpp>
#include <manta/runtime.hpp>

#include "ipc/owned_fds.hpp"
#include "observe/control_socket.hpp"
#include "observe/log.hpp"
#include "runtime/introspect.hpp"
#include "runtime/local_runtime.hpp"
#include "runtime/cluster_entry.hpp"
#include "runtime/node_runtime.hpp"

namespace manta {
namespace {
std::mutex lifecycle_mu;
runtime::node_runtime* node = nullptr;  ///< guarded by lifecycle_mu
/// The parent's runtime, in a child forked from it: never used or freed there
/// (kept reachable, so a leak checker in the child does not report it).
runtime::node_runtime* left_by_fork = nullptr;
runtime::local_runtime* local = nullptr;  ///< options.local_mode's runtime; guarded by lifecycle_mu
runtime::local_runtime* local_left_by_fork = nullptr;
pid_t owner = 0;                        ///< the process that made `node`
thread_local bool in_lifecycle = false;  ///< this thread holds lifecycle_mu
bool locked_for_fork = false;

/// The zygote, a worker or actor host, or a process one of them forked: the
/// lifecycle belongs to the driver (these processes' copy of lifecycle_mu was
/// taken when the zygote was forked, inside init).
bool in_worker() { return process::spawned_by_runtime(); }

/// Holds lifecycle_mu and says so (init forks the zygote while it holds it, and
/// a fork must not wait for the lock its own thread has).
struct lifecycle_lock {
  lifecycle_lock() {
    lifecycle_mu.lock();
    in_lifecycle = true;
  }
  ~lifecycle_lock() {
    in_lifecycle = false;
    lifecycle_mu.unlock();
  }
};

// A fork by the program: the lock is held across it, so the child gets it free
// and `node` unchanging. The child keeps nothing of the runtime: its context is
// dropped, the runtime's descriptors closed, and its exit does not shut down
// the parent's processes. Only the driver's own forks are concerned (never the
// zygote, which init forks, nor the processes the zygote forks).
void before_fork() {
  if (owner == 0 || ::getpid() != owner || in_lifecycle) return;
  lifecycle_mu.lock();
  locked_for_fork = true;
}
void after_fork_in_parent() {
  if (std::exchange(locked_for_fork, false)) lifecycle_mu.unlock();
}
void after_fork_in_child() {
  const bool unlock = std::exchange(locked_for_fork, false);
  process::forget_exiting();  // (a fork while another thread was in exit(): the child is not exiting)
  if (process::process_context* c = process::current_context(); c && c->is_worker()) {
    // A task forked: its child is not a worker (its messages would corrupt the
    // worker's), so the API there says so instead.
    ipc::close_owned_fds();
    process::forget_context_after_fork();
  }
  if ((node || local) && owner != 0 && ::getpid() != owner) {
    ipc::close_owned_fds();
    process::forget_context_after_fork();
    left_by_fork = std::exchange(node, nullptr);  // the parent's; never touched here
    local_left_by_fork = std::exchange(local, nullptr);
    owner = 0;
  } else if (!in_lifecycle && !in_worker()) {
    // A fork after shutdown: threads of the parent may still have been freeing
    // refs of its runtimes (never init's own fork of the zygote, nor the zygote's).
    process::forget_parents_allocations();
  }
  if (unlock) lifecycle_mu.unlock();
}
}  // namespace

namespace {
/// What this process is in a cluster, if anything. Without the cluster layer,
/// a setting that asks for one is refused by name.
std::unique_ptr<runtime::cluster_role> cluster_role_of(const options& opts) {
  if (const runtime::cluster_layer* layer = manta_cluster_layer()) return layer->role_of(opts);
  const char* node_env = std::getenv("MANTA_NODE");
  const char* address_env = std::getenv("MANTA_ADDRESS");
  const char* asked = !opts.address.empty()           ? "options.address"
                      : node_env && *node_env         ? "MANTA_NODE"
                      : address_env && *address_env   ? "MANTA_ADDRESS"
                                                      : nullptr;
  if (asked)
    throw usage_error(std::string("manta: ") + asked +
                      " asks for a cluster, and this manta was built without one (MANTA_ENABLE_BRIDGE=OFF)");
  return nullptr;
}

/// Ends `node` (init could not finish).
void discard(runtime::node_runtime* n) {
  n->begin_stop();
  {
    process::exclusive_context_scope exclusive;
    n->finish_stop();
    process::set_current_context(nullptr);
  }
  delete n;
}
}  // namespace

const char* version() noexcept { return MANTA_VERSION; }

void init(const options& opts) {
  // Workers are forked while init holds lifecycle_mu: they must never take it.
  if (in_worker()) throw usage_error("manta::init called inside a task (or a process a task forked)");
  static bool fork_handlers = (::pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child), true);
  (void)fork_handlers;
  if (std::string why = log::check_env_level(); !why.empty()) throw usage_error("manta: " + why);
  std::unique_ptr<runtime::cluster_role> role = cluster_role_of(opts);
  runtime::node_runtime* serving = nullptr;
  {
    lifecycle_lock lock;
    if (process::current_context()) {
      if (opts.ignore_reinit) return;
      throw usage_error("manta::init called twice; shut down first or set options.ignore_reinit");
    }
    if (opts.num_workers < 0) throw usage_error("manta: options.num_workers must be >= 0");
    if (!(opts.memory_threshold >= 0 && opts.memory_threshold <= 1))
      throw usage_error("manta: options.memory_threshold must be a fraction in [0, 1] (0: off), not " +
                        std::to_string(opts.memory_threshold));
    if (opts.worker_setup) detail::function_for(opts.worker_setup);  // registered, or usage_error
    if (role && opts.local_mode) throw usage_error(role->local_mode_refusal());
    if (role) role->prepare(opts);
    const char* progress_env = std::getenv("MANTA_PROGRESS");
    detail::set_progress(opts.progress || (progress_env && std::strcmp(progress_env, "1") == 0));
    if (opts.local_mode) {
      local = new runtime::local_runtime(opts);
      process::set_current_context(local);
    } else {
      try {
        node = new runtime::node_runtime(opts);
      } catch (const std::exception& e) {
        if (role) role->runtime_failed(e.what());
        throw;
      }
      process::set_current_context(node);
      if (role) try {
          role->attach(*node);
        } catch (...) {
          discard(std::exchange(node, nullptr));
          throw;
        }
    }
    owner = ::getpid();
    static bool at_exit = (std::atexit([] {
      process::mark_exiting();
      shutdown();
    }), true);
    (void)at_exit;
    serving = role && role->serves() ? node : nullptr;
  }
  if (!serving) return;
  // A node of a cluster: it serves until the cluster stops or its head is lost,
  // and never returns to main.
  const int status = role->serve(*serving);
  shutdown();
  role->before_exit();
  std::exit(status);
}

void shutdown() {
  if (in_worker()) return;  // a worker's runtime ends with its process
  // Inside a local_mode task (or exit() there): the task is the driver's own
  // thread, so this is a call from a worker, which stops nothing. Checked before
  // the lifecycle lock: the task holds the local runtime's lock, which stop takes.
  if (runtime::local_runtime::in_task_here()) return;
  lifecycle_lock lock;
  if (!node && !local) return;
  if (::getpid() != owner) {  // forked without the fork handlers (a raw clone): not ours to stop
    process::forget_context_after_fork();
    left_by_fork = std::exchange(node, nullptr);
    local_left_by_fork = std::exchange(local, nullptr);
    owner = 0;
    return;
  }
  if (local) {
    local->stop();
    process::exclusive_context_scope exclusive;
    process::set_current_context(nullptr);
    process::note_shut_down();
    delete std::exchange(local, nullptr);
    owner = 0;
    return;
  }
  node->begin_stop();
  process::exclusive_context_scope exclusive;
  node->finish_stop();
  process::set_current_context(nullptr);
  process::note_shut_down();
  delete node;
  node = nullptr;
  owner = 0;
}

bool is_initialized() noexcept { return process::current_context() != nullptr; }

namespace detail {

std::vector<int> runtime_process_ids() {
  if (in_worker()) return {};
  std::lock_guard lock(lifecycle_mu);
  std::vector<int> out;
  if (node)
    for (pid_t p : node->process_ids()) out.push_back(p);
  return out;
}

std::size_t arena_used_bytes() {
  if (in_worker()) return {};
  std::lock_guard lock(lifecycle_mu);
  return node ? node->arena().used_bytes() : 0;
}

runtime_counters counters() {
  if (in_worker()) return {};
  std::lock_guard lock(lifecycle_mu);
  return node ? node->counters() : runtime_counters{};
}

spill_counters spilling() {
  if (in_worker()) return {};
  std::lock_guard lock(lifecycle_mu);
  return node ? node->spilling() : spill_counters{};
}

std::size_t object_count() {
  if (in_worker()) return {};
  std::lock_guard lock(lifecycle_mu);
  return node ? node->object_count() : local ? local->object_count() : 0;
}

std::size_t task_count() {
  if (in_worker()) return {};
  std::lock_guard lock(lifecycle_mu);
  return node ? node->task_count() : 0;
}

}  // namespace detail
}  // namespace manta

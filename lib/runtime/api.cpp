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

#include "bridge/token.hpp"
#include "ipc/owned_fds.hpp"
#include "observe/control_socket.hpp"
#include "observe/log.hpp"
#include "runtime/introspect.hpp"
#include "runtime/local_runtime.hpp"
#include "runtime/cluster.hpp"
#include "runtime/cluster_member.hpp"
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
/// What the environment makes of this process: a node of a cluster
/// (MANTA_NODE), its driver (options.address, or MANTA_ADDRESS), or neither.
struct cluster_role {
  std::string serve;  ///< MANTA_NODE: the head to serve
  std::string drive;  ///< the head to send tasks to
  std::optional<runtime::launch> launch;  ///< started by mpirun or srun, with neither of the above
};

cluster_role role_of(const options& opts) {
  cluster_role r;
  if (const char* v = std::getenv("MANTA_NODE"); v && *v) r.serve = v;
  if (!opts.address.empty()) r.drive = opts.address;
  else if (const char* v = std::getenv("MANTA_ADDRESS"); v && *v) r.drive = v;
  if (!r.serve.empty()) r.drive.clear();  // a node takes tasks; it does not drive
  if (r.serve.empty() && r.drive.empty()) r.launch = runtime::launched();
  return r;
}

/// Where the ranks of a launch meet: MANTA_LAUNCH_DIR, else the log_dir (private, made if missing).
std::string launch_dir(const options& opts) {
  if (const char* v = std::getenv("MANTA_LAUNCH_DIR"); v && *v) return v;
  const std::string dir = opts.log_dir.empty() ? observe::default_log_dir() : opts.log_dir;
  std::error_code ec;
  if (std::filesystem::create_directories(dir, ec))
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
  return dir;
}

/// The token a member proves: options.log_dir's (or MANTA_TOKEN_FILE).
std::string cluster_token(const options& opts) {
  const std::string dir = opts.log_dir.empty() ? observe::default_log_dir() : opts.log_dir;
  try {
    return bridge::read_token_file(bridge::default_token_file(dir));
  } catch (const bridge::token_error& e) {
    throw usage_error(std::string("manta: joining a cluster needs its token: ") + e.what());
  }
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
  cluster_role role = role_of(opts);
  runtime::node_runtime* serving = nullptr;
  std::string token;
  if (role.launch && (std::getenv("MANTA_TLS") || std::getenv("MANTA_TLS_CA")) && !std::getenv("MANTA_TLS_CERT"))
    throw usage_error("manta: MANTA_TLS / MANTA_TLS_CA are set, but the head that rank 0 of " + role.launch->launcher +
                      " hosts speaks TLS only with MANTA_TLS_CERT and MANTA_TLS_KEY set (for every rank); "
                      "set them, or unset MANTA_TLS / MANTA_TLS_CA");
  // A node of a launch learns rank 0's head from its files before it starts
  // (no thread of manta's runs yet), or over MPI once its zygote is forked
  // (MPI starts threads of its own).
  std::optional<runtime::launch> head_over_mpi;
  if (role.launch && role.launch->rank != 0) {
    if (runtime::launch_over_mpi(*role.launch))
      head_over_mpi = role.launch;
    else
      std::tie(role.serve, token) = runtime::wait_for_launch_head(*role.launch, launch_dir(opts));
    role.launch.reset();
  }
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
    if ((!role.serve.empty() || !role.drive.empty() || head_over_mpi) && opts.local_mode)
      throw usage_error("manta: options.local_mode runs everything in this process; it cannot join a cluster");
    if (role.launch && opts.local_mode)
      throw usage_error("manta: options.local_mode runs everything in this process; it cannot lead a launch");
    if (token.empty() && (!role.serve.empty() || !role.drive.empty())) token = cluster_token(opts);
    const char* progress_env = std::getenv("MANTA_PROGRESS");
    detail::set_progress(opts.progress || (progress_env && std::strcmp(progress_env, "1") == 0));
    if (opts.local_mode) {
      local = new runtime::local_runtime(opts);
      process::set_current_context(local);
    } else {
      try {
        node = new runtime::node_runtime(opts);
      } catch (const std::exception& e) {
        // The other ranks of an MPI launch wait in its broadcast: rank 0 tells
        // them why no head comes; another rank still takes its part.
        if (role.launch && runtime::launch_over_mpi(*role.launch))
          try {
            runtime::send_launch_over_mpi(*role.launch, "", "", e.what());
          } catch (const std::exception&) {  // (the first error says more)
          }
        else if (head_over_mpi)
          try {
            runtime::receive_launch_over_mpi(*head_over_mpi);
          } catch (const std::exception&) {
          }
        throw;
      }
      process::set_current_context(node);
      try {
        if (!role.drive.empty())
          node->attach_cluster(std::make_unique<runtime::cluster_member>(*node, role.drive, token, false));
        if (role.launch) node->attach_cluster(runtime::cluster_member::lead_launch(*node, *role.launch, launch_dir(opts)));
        if (head_over_mpi) std::tie(role.serve, token) = runtime::receive_launch_over_mpi(*head_over_mpi);
      } catch (const std::exception& e) {
        discard(std::exchange(node, nullptr));
        if (head_over_mpi) throw;  // it says which rank and why
        throw error(role.launch ? std::string("manta: could not lead the cluster of ") + role.launch->launcher +
                                      ": " + e.what()
                                : "manta: could not join the cluster at " + role.drive + ": " + e.what());
      }
    }
    owner = ::getpid();
    static bool at_exit = (std::atexit([] {
      process::mark_exiting();
      shutdown();
    }), true);
    (void)at_exit;
    serving = role.serve.empty() ? nullptr : node;
  }
  if (!serving) return;
  // A node of a cluster: it serves until the cluster stops or its head is lost,
  // and never returns to main.
  int status = 0;
  try {
    std::string why = runtime::serve_as_node(*serving, role.serve, token);
    if (!why.empty()) {
      std::fprintf(stderr, "manta: this node ends: %s\n", why.c_str());
      status = 3;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "manta: could not serve the cluster at %s: %s\n", role.serve.c_str(), e.what());
    status = 2;
  }
  shutdown();
  runtime::finalize_programs_mpi();
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

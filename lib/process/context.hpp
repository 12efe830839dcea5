// process/context.hpp: what a manta process can do for the header templates.
// The driver's node runtime and a worker's runtime both implement it; the entry
// points of detail/core.hpp dispatch to the current one.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <span>
#include <vector>

#include <manta/detail/core.hpp>
#include <manta/detail/task_request.hpp>
#include <manta/nodes.hpp>

namespace manta::process {

class process_context {
 public:
  virtual ~process_context() = default;
  virtual detail::ref_node* put(const detail::encoded_value& v) = 0;
  virtual detail::extent allocate_extent(std::size_t bytes) = 0;
  virtual void free_extent(const detail::extent& x) noexcept = 0;
  virtual detail::ref_node* put_extent(std::uint64_t tag, const detail::extent& x,
                                       std::size_t size) = 0;
  /// The object's bytes, pinned in place until `unpin`.
  virtual detail::object_data fetch(detail::ref_node* n, detail::deadline until) = 0;
  /// One more pin of an object fetched and not yet unpinned.
  virtual void repin(detail::ref_node*) noexcept {}
  virtual void unpin(detail::ref_node*) noexcept {}
  virtual void wait(std::span<detail::ref_node* const> nodes, std::size_t num,
                    detail::deadline until, std::vector<bool>& ready) = 0;
  virtual detail::ref_node* ref_from_id(const object_id& id) = 0;
  /// The last local count of `n` is gone.
  virtual void release(detail::ref_node* n) noexcept = 0;
  virtual void submit(detail::task_request&& request, detail::ref_node** returns) = 0;
  virtual detail::ref_node* find_actor(const std::string& name, std::uint64_t class_tag) = 0;
  virtual void kill_actor(detail::ref_node* node) = 0;
  virtual void cancel_producer(detail::ref_node* node) = 0;
  virtual std::vector<int> gpu_ids() = 0;
  virtual std::map<std::string, double> resources(bool available_only) = 0;
  virtual std::size_t worker_count() const noexcept = 0;
  virtual std::uint32_t epoch() const noexcept = 0;
  virtual bool is_worker() const noexcept = 0;
  /// The other nodes of the cluster this runtime drives (none on a single node).
  virtual std::vector<node_info> cluster_nodes() { return {}; }
};

/// A fresh runtime epoch: random and never 0 (0 means "no runtime").
std::uint32_t new_epoch();

/// The context of this process, or nullptr. Thread-safe.
process_context* current_context() noexcept;
void set_current_context(process_context* c) noexcept;
/// shutdown ended the runtime: a call without one says so, not "call init first".
void note_shut_down() noexcept;

/// The context, or a usage_error naming `what` was attempted without a runtime.
process_context& require_context(const char* what);

/// This process is the zygote, a worker, an actor host, or a process one of
/// them forked: never a driver (it cannot init, and its exit stops nothing).
bool spawned_by_runtime() noexcept;
/// Called by the zygote as it starts; inherited by everything it forks.
void mark_spawned_by_runtime() noexcept;
/// Whether a runtime of this epoch was made in this process since its last
/// fork (only those runtimes' refs are freed in a fork child: the others'
/// entries point into arenas the parent still uses, and came from the parent's
/// allocator). True for every epoch in a process that was never forked so
/// (forget_parents_allocations).
bool made_since_fork(std::uint32_t epoch) noexcept;

/// Set in a fork child of a process that made runtimes: threads of the parent may
/// have held the locks of TBB's allocator, which has no fork handlers, so the
/// runtime's objects come from malloc here from then on (runtime/pool_allocated.hpp).
inline std::atomic<bool> allocate_from_malloc{false};

/// In a fork child (not a process of the runtime's own): the context lock as
/// threads of the parent left it is reset; if a runtime was ever made here,
/// allocates from malloc from now on and frees none of the parent's
/// runtimes' refs (see allocate_from_malloc).
void forget_parents_allocations() noexcept;

/// In a child the program forked from a driver: the runtime stays the parent's.
/// The context is dropped (without touching the parent's processes), and so is
/// the state of its lock, which threads of the parent may have held.
void forget_context_after_fork() noexcept;

}  // namespace manta::process

namespace manta::detail {
/// Readable name of a mangled type name.
std::string demangle(const char* mangled);
}  // namespace manta::detail

namespace manta::process {
/// While alive, this thread holds the context lock shared: the context cannot be
/// torn down. Nests. Every entry point holds one; so does the driver's I/O thread
/// for its whole life, so the context lock is always taken before the runtime's own.
class context_use {
 public:
  context_use();
  ~context_use();
  context_use(const context_use&) = delete;
  context_use& operator=(const context_use&) = delete;

 private:
  bool counted_;
};

/// The process is in exit() (its atexit handler stops the runtime). Another
/// thread whose call would now fail with "shut down" parks instead
/// (`park_until_exit`): its exception would escape into std::terminate and turn
/// the program's exit status into an abort, where threads that block in a
/// call while the process exits should simply end with it.
void mark_exiting() noexcept;
/// In a fork child: whatever the parent was doing, this process is not exiting.
void forget_exiting() noexcept;
/// True in a thread other than the one that called exit(), once it did, and
/// not one of the runtime's own.
bool exiting_elsewhere() noexcept;
/// Lets go of this thread's hold of the context (`context_use`) and sleeps
/// until the process ends. Only where `exiting_elsewhere()`.
[[noreturn]] void park_until_exit() noexcept;

/// While alive, this thread holds the context lock exclusively: no other thread
/// is inside an entry point, and releases on this thread do not take the lock.
/// Used to tear a context down.
class exclusive_context_scope {
 public:
  exclusive_context_scope();
  ~exclusive_context_scope();
  exclusive_context_scope(const exclusive_context_scope&) = delete;
  exclusive_context_scope& operator=(const exclusive_context_scope&) = delete;
};
}  // namespace manta::process

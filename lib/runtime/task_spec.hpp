// runtime/task_spec.hpp: a submitted task as the driver keeps it, from
// submission until its results are sealed or it fails. Owned by the task graph.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <boost/smart_ptr/intrusive_ptr.hpp>

#include <manta/detail/task_request.hpp>
#include <manta/registry.hpp>

#include "ipc/messages.hpp"
#include "runtime/pool_allocated.hpp"
#include "runtime/resources.hpp"

namespace manta::runtime {

struct object_entry;
struct actor_record;
struct task_spec;

/// A queue a task waits in: the ready queue, an actor's call queue, or the
/// tasks sent to one worker. A task is in one lane at most (task_spec::lane).
using lane = std::deque<task_spec*>;

/// What a task asks of its node: the options it was submitted with and the
/// demand they make while it runs. Immutable, and shared by the tasks submitted
/// with equal options (most share the defaults): a pending task holds a pointer,
/// not the 200 bytes of both.
struct task_profile {
  task_profile(detail::task_options o, demand d, bool immortal = false)
      : options(std::move(o)), need(std::move(d)), immortal(immortal) {}
  const detail::task_options options;
  const demand need;  ///< nothing for a method call: its actor holds the resources
  /// The defaults' are never freed, and not counted: the submitting thread and
  /// the one that frees tasks would bounce one counter between their cores.
  const bool immortal;
  mutable std::atomic<std::int64_t> uses{0};
};
inline void intrusive_ptr_add_ref(const task_profile* p) noexcept {
  if (!p->immortal) p->uses.fetch_add(1, std::memory_order_relaxed);
}
inline void intrusive_ptr_release(const task_profile* p) noexcept {
  if (!p->immortal && p->uses.fetch_sub(1, std::memory_order_acq_rel) == 1) delete p;
}
using profile_ptr = boost::intrusive_ptr<const task_profile>;

/// The profile of tasks (or, with `method`, of method calls) submitted with the default options.
const profile_ptr& default_profile(bool method);
/// The profile of a task submitted in `mode` with options `o`: a shared one for
/// the defaults, and the last one this thread made when `o` equals its options
/// (a loop submitting with the same options makes one).
profile_ptr profile_of(detail::task_options&& o, detail::call_mode mode);

struct task_spec : pool_allocated {
  task_spec();  // out of line: it owns an actor_record, incomplete here
  task_spec(const task_spec&) = delete;
  task_spec& operator=(const task_spec&) = delete;
  ~task_spec();

  const detail::task_options& options() const { return profile->options; }
  /// What it holds while it runs.
  const demand& need() const { return profile->need; }
  const std::string& name() const { return options().name.empty() ? fn->name : options().name; }
  /// What the tools call it: its name, but an actor's constructor by the
  /// actor's class (a named actor's options name the actor, not the call).
  const std::string& label() const;
  /// One CPU and nothing else: such tasks share their worker's CPU and may queue behind each other.
  bool is_default() const { return need().cpu == 1 && need().gpu == 0 && need().custom.empty(); }
  bool is_call() const { return actor && mode != detail::call_mode::construct; }

  std::uint64_t key = 0;
  const detail::function_info* fn = nullptr;
  detail::call_mode mode = detail::call_mode::call;
  std::uint16_t num_returns = 1;
  std::uint16_t arg_count = 0;
  /// A node of a cluster: the driver whose program it serves (an index into
  /// node_runtime's origins; 0: none known). Inherited by the tasks it submits.
  std::uint16_t origin = 0;
  profile_ptr profile;  ///< never null: the defaults' until set
  std::string args;                     ///< argument blob (process/args_blob.hpp)
  pool_vector<object_entry*> deps;      ///< counted
  pool_vector<object_entry*> contained; ///< counted
  pool_vector<object_entry*> returns;   ///< counted
  std::uint64_t parent = 0;  ///< the task that submitted it from a worker, or 0
  std::uint64_t submitted_ns = 0;  ///< when it was submitted, while the timeline records

  // Kept by the task graph.
  int pending_deps = 0;  ///< arguments not sealed yet
  union {
    lane* in_lane = nullptr;  ///< the queue it waits in, if any
    /// Before the graph has it: the next in node_runtime's submissions (one
    /// pointer for both keeps a task_spec in the allocator's 224-byte bin).
    task_spec* next_submitted;
  };

  // While it runs.
  int attempts = 0;  ///< runs lost to crashes (or exceptions, with retry_exceptions)
  int worker = -1;   ///< slot it was sent to, while in flight
  std::uint64_t sent_seq = 0;  ///< order of its last sending among all tasks (the memory monitor's "newest")
  pool_vector<int> gpus;  ///< GPU ids granted while it runs
  // The flags side by side: a task_spec stays in the 224-byte bin of the pool allocator.
  bool charged = false;   ///< non-default tasks: `need` is taken from the ledger
  bool blocked = false;   ///< waits in get/wait on its worker (its CPU is lent)
  bool inputs_pinned = false;  ///< its large arguments are kept in the arena (while sent)
  bool cancelled = false;  ///< cancelled while in flight: its results already failed
  bool remote = false;  ///< it goes to the cluster (runtime/cluster.hpp)
  bool spilled = false;  ///< remote only because it would have queued here: it may come back
  bool local_only = false;  ///< it spilled and came back, or could not go: it runs here
  bool ahead = false;  ///< sent ahead to a busy worker, perhaps not started (scheduler::take_back)
  std::uint64_t grant = ipc::no_offset;  ///< extent offered for its result, while in flight
  /// Its expected run time when sent (placement's estimate; infinite: unknown or blocking).
  double expected_ns = 0;

  actor_record* actor = nullptr;       ///< method calls and constructors: the actor
  object_entry* actor_entry = nullptr; ///< method calls: the actor's entry (counted)
  /// A constructor submitted and not registered yet owns its actor's record.
  std::unique_ptr<actor_record> new_actor;
};

}  // namespace manta::runtime

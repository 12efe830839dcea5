// cluster/remote_jobs.hpp: the work a node does for other members of the
// cluster, written once for its two users: the serving thread (tasks the head
// places on this node: serve_as_node) and a driver's hosting thread (calls
// other nodes make on the actors this driver offered: cluster_driver).
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "bridge/task_wire.hpp"
#include "ipc/failure.hpp"
#include "cluster/cluster_member.hpp"
#include "runtime/node_runtime.hpp"

namespace manta::runtime {

/// Sets `flag` while it lives (and clears it on a throw too).
struct raised {
  explicit raised(std::atomic<bool>& f) : flag(f) { flag.store(true); }
  ~raised() { flag.store(false); }
  raised(const raised&) = delete;
  raised& operator=(const raised&) = delete;
  std::atomic<bool>& flag;
};

/// This machine's host name ("localhost" if it has none).
std::string host_name();

namespace remote {

/// The outcome of task `id` that failed with `e`.
bridge::task_outcome failed_outcome(std::uint64_t id, ipc::error_info e);
/// Why `what` (a task or call named `name`) fails: object `key` cannot come.
/// Its driver says with which error (object_store_full: it could not be read
/// back), else node_died_error (its driver left, or it was freed).
ipc::error_info unfetched(const std::string& what, const std::string& name, const std::string& key,
                          const std::string& why, const std::optional<ipc::error_info>& cause);
/// A usage_error raised in `function` (this process), as a failure.
ipc::error_info usage_failure(const std::string& message, const std::string& function);

/// A task the head sent, running here.
struct job {
  std::uint64_t id = 0;
  std::vector<detail::ref_node*> returns;  ///< counted
  std::vector<detail::ref_node*> pinned;   ///< results whose bytes its outcome borrows
  std::vector<detail::ref_node*> handles;  ///< counted: actor handles its arguments hold, made here
  bool call = false;  ///< an actor's call: it waits in its actor's queue, not for a worker
};

/// The actors drivers started on this node, by key (remote_task::actor): one
/// handle each, given back when the driver ends the actor.
using actor_table = std::map<std::string, detail::ref_node*>;
/// Copies of drivers' objects that tasks here named, by key: one count each,
/// given back when the driver frees the object (or leaves). The entries are
/// also kept as a set, which made_here_inside asks on every round.
class object_table {
 public:
  object_table() = default;
  object_table(const object_table&) = delete;
  object_table& operator=(const object_table&) = delete;
  bool has(const std::string& key) const { return by_key_.count(key) != 0; }
  /// The copy kept as `key`, or null.
  detail::ref_node* find(const std::string& key) const {
    auto it = by_key_.find(key);
    return it == by_key_.end() ? nullptr : it->second;
  }
  /// Whether `n` is a copy of a driver's object (under any key).
  bool is_copy(const detail::ref_node* n) const { return entries_.count(n) != 0; }
  /// Keeps `n` (one count, taken over) as `key`.
  void keep(const std::string& key, detail::ref_node* n) {
    by_key_.emplace(key, n);
    ++entries_[n];
  }
  /// Gives back every copy (with the runtime in use: process::context_use).
  void clear() {
    for (auto& [key, n] : by_key_) detail::release(n);
    by_key_.clear();
    entries_.clear();
  }
  /// Gives back the copy kept as `key`, if any.
  void drop(const std::string& key) {
    auto it = by_key_.find(key);
    if (it == by_key_.end()) return;
    if (auto e = entries_.find(it->second); --e->second == 0) entries_.erase(e);
    detail::release(it->second);
    by_key_.erase(it);
  }

 private:
  std::map<std::string, detail::ref_node*> by_key_;
  std::unordered_map<const detail::ref_node*, int> entries_;  ///< how many keys name each
};

/// Whether every object `t` names is here.
bool has_objects(const bridge::remote_task& t, const object_table& objects);

/// Submits `t` to this node's runtime; an actor's constructor goes into
/// `actors` and leaves the job without results. @throws what submission throws
job start(node_runtime& rt, const bridge::remote_task& t, actor_table& actors, const object_table& objects);

/// Keeps the value an object frame carries (mode_object) as `t.object`, under
/// the id its driver gave it: refs to it inside other values resolve here.
/// @throws what putting it throws (the arena is full), usage_error for a malformed key
void keep_object(node_runtime& rt, object_table& objects, const bridge::remote_task& t);

/// Keeps object `key` that failed at its driver as failed here (`failed`
/// note), so what names it runs and its get raises the object's own error, as
/// on the driver's node. @returns false if it cannot (a malformed key)
bool keep_failed(node_runtime& rt, object_table& objects, const bridge::object_note& note);

/// A driver ended one of its actors here: its handle goes (it ends once its
/// calls are done), or it is killed at once.
void end_actor(node_runtime& rt, actor_table& actors, const bridge::actor_end& e);

/// The objects refs inside `j`'s results name that their driver may not
/// hold, and refs inside those, each after the ones it holds refs to (the
/// driver keeps them in that order): those this node made, those it got
/// from other nodes (results of its own nested tasks), and every actor
/// handle. Copies of drivers' objects, fetched for tasks here (`fetched`),
/// are not among them.
std::vector<object_entry*> made_here_inside(const node_runtime& rt, const job& j, const object_table& fetched);

/// What `j` still waits for: a result not sealed, or an object made here that
/// one names and that is not made yet; null when it can be answered.
detail::ref_node* awaited(const node_runtime& rt, const job& j, const object_table& fetched);
/// Whether every job of `running` still awaits something; each one's is marked
/// (node_runtime::watch_seal) so that its seal ends a wait_sealed.
bool all_awaited(node_runtime& rt, const std::vector<job>& running, const object_table& fetched);

/// The outcome of a job that awaits nothing; its values borrow the results'
/// bytes in the arena (pinned) until done_with. Objects made here that refs
/// in the results name go with them: the driver keeps them under their ids.
bridge::task_outcome finish(cluster_member& member, job& j, const object_table& fetched);

/// Gives back a finished job's results (once its outcome is sent).
void done_with(node_runtime& rt, job& j);

}  // namespace remote
}  // namespace manta::runtime

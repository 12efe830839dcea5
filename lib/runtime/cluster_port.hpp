// runtime/cluster_port.hpp: the cluster as the runtime sees it. A runtime that
// joined a cluster holds one (node_runtime::attach_cluster); the single-node
// runtime calls nothing else of the cluster, and knows nothing of the bridge.
// runtime/cluster_member.hpp is the implementation: a driver's link to the
// head, or a node's service.
//
// Unless a method says otherwise, the runtime calls it with the scheduler's
// lock held, and it never blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <manta/detail/core.hpp>
#include <manta/detail/task_request.hpp>
#include <manta/nodes.hpp>

#include "ipc/failure.hpp"

namespace manta::runtime {

struct task_spec;
struct object_entry;
struct actor_record;

class cluster_port {
 public:
  virtual ~cluster_port() = default;

  /// Leaves the cluster: nothing more comes back from it (begin_stop, with no
  /// lock held). The port stays usable until destroyed, refusing what is sent.
  virtual void leave() = 0;
  /// After leave() and the port's end: gives back what it held of the
  /// runtime's objects (no lock held).
  virtual void give_back() = 0;

  // ---- tasks
  /// Whether `t`, which this node can never run, may go to the cluster.
  virtual bool can_run(const task_spec& t) = 0;
  /// Marks `t` (not admitted here: `why`) to go to the cluster, or throws
  /// usage_error saying why no node can take it either. Without the lock.
  virtual void send_elsewhere(task_spec& t, const std::string& why) = 0;
  /// What a task submitted from this thread carries for the cluster (a node:
  /// placed by the head, never spilled back; the driver it serves). Without the lock.
  virtual void mark_origin(task_spec& t) = 0;
  /// Sends `t` (its arguments sealed); an error if it cannot go.
  virtual std::optional<ipc::error_info> send_remote(task_spec& t) = 0;
  /// Whether a ready task no local worker can take now may go to the cluster.
  virtual bool remote_room(const task_spec& t, std::size_t in_flight) = 0;
  /// Whether one more task asking `o` may go to the cluster now.
  virtual bool cluster_room(const detail::task_options& o, std::size_t in_flight) = 0;
  /// Task `key`, sent before, was cancelled here.
  virtual void cancel_remote(std::uint64_t key) = 0;

  // ---- actors
  virtual void end_remote_actor(const std::string& key, bool kill) = 0;
  /// A worker's get_actor found nothing here: asks the cluster (false, with
  /// `error` if it is gone, when nobody will answer).
  virtual bool find_actor_later(int slot, std::uint64_t generation, std::uint64_t request, const std::string& name,
                                std::uint64_t class_tag, std::string& error) = 0;
  /// The driver's get_actor found nothing here: the actor of the cluster of
  /// that name, adopted (a handle), or nullptr. A user thread, without the
  /// lock. @throws usage_error as get_actor does
  virtual detail::ref_node* find_actor(const std::string& name, std::uint64_t class_tag) = 0;
  /// Whether named actors started here take their names in the cluster.
  virtual bool names_in_cluster() = 0;
  /// A named actor of this node was created: its name goes to the cluster.
  virtual void offer_named(actor_record& a) = 0;

  // ---- objects
  /// `e`, which a node asked for while it was pending, is sealed or failed.
  virtual void object_settled(object_entry* e) = 0;
  /// This runtime's object `id` was freed: nodes holding copies drop them.
  virtual void object_freed(const object_id& id) = 0;

  // ---- the cluster
  /// Its nodes (and, seen from a node, its drivers' machines).
  virtual std::vector<manta::node_info> nodes() = 0;
  /// The I/O thread, woken by node_runtime::cluster_io_due: sends what waits.
  virtual void run_io() = 0;
};

}  // namespace manta::runtime

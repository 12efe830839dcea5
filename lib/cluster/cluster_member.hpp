// cluster/cluster_member.hpp: a runtime's membership of a cluster, the
// cluster_port the runtime holds. It owns the link to the head
// (cluster_driver), and does for the link what needs the runtime: tasks out
// and their outcomes in, objects other nodes ask for, actors offered, lent and
// looked up, a node's output sent to the drivers it serves.
//
// It works on the runtime's own state (the scheduler, the directory, the
// store) under the runtime's locks, as node_runtime's own code did: it is the
// runtime's friend, and the only one.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bridge/task_wire.hpp"
#include "ipc/messages.hpp"
#include "cluster/cluster.hpp"
#include "runtime/cluster_port.hpp"

namespace manta::runtime {

class node_runtime;

class cluster_member final : public cluster_port {
 public:
  /// Joins the cluster at `address` as a driver of `rt`.
  /// @param serving  a node of the cluster (MANTA_NODE), which joins as a
  ///   driver too, so tasks its workers submit may go to other nodes (and
  ///   get_actor there finds actors of the cluster), while what the head
  ///   sends here (submitted by the serving thread) runs here and never goes back
  /// @throws bridge::join_error saying why it could not
  cluster_member(node_runtime& rt, const std::string& address, const std::string& token, bool serving);
  /// Rank 0 of a launch (mpirun, srun): hosts the head, tells the other ranks
  /// where it is (over MPI, or in files in `dir`), drives, and waits until
  /// every other rank joined. @throws usage_error (or what the head throws)
  static std::unique_ptr<cluster_member> lead_launch(node_runtime& rt, const launch& l, const std::string& dir);
  ~cluster_member() override;
  cluster_member(const cluster_member&) = delete;
  cluster_member& operator=(const cluster_member&) = delete;

  // ---- cluster_port
  void leave() override;
  void give_back() override;
  bool can_run(const task_spec& t) override;
  void send_elsewhere(task_spec& t, const std::string& why) override;
  void mark_origin(task_spec& t) override;
  std::optional<ipc::error_info> send_remote(task_spec& t) override;
  bool remote_room(const task_spec& t, std::size_t in_flight) override;
  bool cluster_room(const detail::task_options& o, std::size_t in_flight) override;
  void cancel_remote(std::uint64_t key) override;
  void end_remote_actor(const std::string& key, bool kill) override;
  bool find_actor_later(int slot, std::uint64_t generation, std::uint64_t request, const std::string& name,
                        std::uint64_t class_tag, std::string& error) override;
  detail::ref_node* find_actor(const std::string& name, std::uint64_t class_tag) override;
  bool names_in_cluster() override { return serving_; }
  void offer_named(actor_record& a) override;
  void object_settled(object_entry* e) override;
  void object_freed(const object_id& id) override;
  std::vector<manta::node_info> nodes() override;
  void run_io() override;

  // ---- for the link's threads (cluster_driver, serve_as_node)
  node_runtime& runtime() noexcept { return rt_; }
  /// This runtime's id as a driver of its cluster ("driver-N").
  const std::string& id() const noexcept { return link_->id(); }
  /// Whether the link to the head ended, and why (lost()).
  bool link_ended() const noexcept { return link_->ended(); }
  std::string link_lost() const { return link_->lost(); }
  /// The serving thread, or a host thread: the driver whose task it submits
  /// next (remote_task::origin), for this thread alone.
  void set_origin(const std::string& driver);
  /// A driver: lines a task of its printed on another node, for this
  /// terminal (prefixed with the pid and node). Any thread; never blocks.
  void print_remote_output(const bridge::remote_output& o);
  /// Remote tasks' outcomes, as they came (from the applier thread).
  void remote_finished(std::vector<bridge::task_outcome>&& batch);
  /// The cluster is gone: every remote task in flight fails with node_died_error.
  void cluster_lost(const std::string& why);
  /// A node asks for an object a remote task named (from the applier thread):
  /// its value goes to that node from the arena, or object_lost; one still
  /// pending goes once it is sealed.
  void send_object(const bridge::object_note& ask);
  /// A handle of `handle`'s actor leaves in a task's results for another
  /// member (the serving or host thread): how it travels. An actor of this
  /// node gets a key in the cluster (the head learns of it from the outcome)
  /// and one this driver started on the cluster keeps its own; both are
  /// handed over, and this node keeps a count until the head says the
  /// receiver is done with it (actor_returned). Another driver's actor
  /// travels borrowed. Each call that hands one over keeps a count.
  /// @throws usage_error for an actor whose constructor has not gone to the cluster yet
  bridge::returned_handle lend_actor(detail::ref_node* handle);
  /// The head's word that the actor lent as `key` is no longer held where it
  /// went (from the applier thread): the count kept for it goes.
  void actor_returned(const std::string& key);
  /// The head's answer to a worker's lookup (from the applier thread).
  void actor_found_for(const cluster_driver::actor_asker& asker, const bridge::actor_lookup& found);

 private:
  /// The link's first half: the object exists before the link starts, since
  /// the link's threads call back into it.
  cluster_member(node_runtime& rt, bool serving) : rt_(rt), serving_(serving) {}
  void join(const std::string& address, const std::string& token);
  /// Whether the runtime still holds this membership (under the scheduler's
  /// lock): the link's threads may call in while the runtime lets go of it.
  bool attached() const noexcept;
  /// A remote task's outcome made ready for the scheduler.
  struct remote_answer {
    std::uint64_t id = 0;
    std::vector<ipc::value_location> values;
    std::vector<std::vector<object_id>> inside;  ///< per result: the ids of the refs in it
    ipc::error_info error;
    bool ok = true;
  };
  /// Keeps the objects `o`'s results name (appending them, counted, to `held`)
  /// and places its large values in the arena: before the scheduler's lock is
  /// taken, so a gigabyte's copy holds up no dispatch. An outcome that cannot
  /// be taken in fails its task instead (`out.ok` false, `out.error` why).
  void prepare_outcome(bridge::task_outcome& o, remote_answer& out, std::vector<detail::ref_node*>& held);
  /// Sends `e` (counted, the count given to the sender) as `ask` asks, or object_lost.
  void send_object_now(const bridge::object_note& ask, object_entry* e);
  /// A node: sends the lines its processes printed to the drivers whose
  /// tasks they ran (the I/O thread, under the scheduler's lock).
  void send_waiting_output();

  node_runtime& rt_;
  const bool serving_;  ///< a node of the cluster: submit's tasks came from the head
  /// The head this runtime hosts as rank 0 of a launch (outlives link_'s membership).
  std::unique_ptr<launch_head> launch_head_;
  std::unique_ptr<cluster_driver> link_;
  // Under the runtime's scheduler lock:
  /// Asks for objects still pending, by entry (each counted once).
  std::unordered_map<object_entry*, std::vector<bridge::object_note>> asked_pending_;
  std::uint64_t remote_actors_ = 0;  ///< actors started on the cluster (their keys' numbers)
  /// Handles lent in results, by key: the entry, and how many counts of it
  /// are kept, one per lend.
  std::unordered_map<std::string, std::pair<object_entry*, std::size_t>> lent_;
  /// A node: the drivers whose programs its tasks serve (task_spec::origin
  /// indexes it). Which one a thread's next submission serves is that thread's own (set_origin).
  std::vector<std::string> origins_{std::string()};
  /// A node: lines its processes printed, waiting for the I/O thread (shared
  /// with the output thread's sink, which may outlive this object by a call).
  struct output_queue;
  std::shared_ptr<output_queue> output_;
};

}  // namespace manta::runtime

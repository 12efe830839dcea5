// cluster/cluster.hpp: this runtime's part in a cluster of several nodes (the
// TCP bridge, lib/bridge).
//
// A driver (MANTA_ADDRESS, or options.address) joins the head as a driver and
// keeps the node table the head sends. A task its own node cannot run (it asks
// for a resource only other nodes have) is sent to the head once its arguments
// are sealed, each argument as a value; the head places it on a node, and its
// outcome comes back through node_runtime::remote_finished.
//
// A node (MANTA_NODE) joins as a node and serves: each task the head sends is
// submitted to this runtime like any other (large arguments put into its own
// arena first), and its results are sent back once sealed.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <manta/detail/task_request.hpp>
#include <manta/nodes.hpp>

#include "bridge/head.hpp"
#include "bridge/node_link.hpp"
#include "bridge/task_wire.hpp"
#include "ipc/failure.hpp"
#include "runtime/directory.hpp"

namespace manta::runtime {

class node_runtime;
class cluster_member;

class cluster_driver {
 public:
  /// Joins the head at `address` as a driver.
  /// @throws bridge::join_error saying why it could not
  cluster_driver(cluster_member& member, const std::string& address, const std::string& token,
                 std::map<std::string, double> resources);
  /// Leaves the cluster (leave()).
  ~cluster_driver();
  /// Leaves the cluster: the head drops this driver's tasks, nothing more comes
  /// back, and nothing more is sent. Waits for its threads; the object stays
  /// usable (send refuses, the table stays) until destroyed.
  void leave();
  cluster_driver(const cluster_driver&) = delete;
  cluster_driver& operator=(const cluster_driver&) = delete;

  /// Why no node of the cluster can run a task asking `o` (empty: one can). Any thread.
  std::string lacking(const detail::task_options& o) const;
  /// CPUs of the alive nodes that could run a task asking `o`, as joined
  /// (what runs there is not counted: the caller counts what it sent). Any thread.
  double spare_cpus(const detail::task_options& o) const;
  /// A stored argument sent from where it lies in the arena: pinned and
  /// counted until sent (then node_runtime::sent gives it back).
  struct held_argument {
    std::size_t at;          ///< where in the task's args its bytes go
    std::string_view bytes;  ///< in the arena
    detail::ref_node* node;
  };
  /// Queues `t` for the head, its `held` arguments' bytes to go in at their
  /// places; never blocks (called under the scheduler's mutex).
  /// @returns false once the cluster is gone (lost() says why); `held` is given back
  bool send(bridge::remote_task t, std::vector<held_argument> held);
  /// Queues the end of an actor this driver started on the cluster (behind
  /// the calls queued before it); never blocks.
  void end_actor(const std::string& key, bool kill);
  /// Queues the cancellation of task `id`, sent before; never blocks.
  void cancel(std::uint64_t id);
  /// Asks the head for the actor named `name` anywhere in the cluster; waits
  /// for the answer (at most 10 s). Its key is empty, and why set, if there is none.
  bridge::actor_lookup find_actor(const std::string& name);
  /// A worker of this node waits for a lookup (find_actor_later): who it is.
  struct actor_asker {
    int slot;
    std::uint64_t generation, request, class_tag;
    std::string name;
  };
  /// Asks the head for the actor named `asker.name` for a worker; never
  /// blocks. The answer, or the cluster's end, reaches
  /// node_runtime::actor_found_for from the applier thread.
  /// @returns false if the cluster is gone (nothing will answer)
  bool find_actor_later(actor_asker asker);
  /// Queues the news that object `key`, which nodes may hold copies of, was freed.
  void object_freed(const std::string& key);
  /// Queues a control frame behind the tasks queued before it; never blocks.
  void send_control(bridge::frame_type type, std::string body);
  /// Offers an actor of this node to the cluster under `key` (on_driver_key),
  /// ahead of the task whose arguments carry its handle; its calls from other
  /// nodes come back through the head and run here (host_loop).
  /// A named one is named in the cluster too (refused there if the name is
  /// taken: it is killed, saying so).
  void offer_actor(const std::string& key, std::uint64_t class_tag, const std::string& name);
  /// This driver's id in the cluster ("driver-N"): its actors' keys start with it.
  const std::string& id() const noexcept { return id_; }
  /// The nodes of the cluster, as the head last described them.
  std::vector<manta::node_info> nodes() const;
  /// The drivers' machines, as the head last described them (each under its
  /// runtime's id; not nodes' own links).
  std::vector<manta::node_info> drivers() const;
  /// Why the cluster is gone (its head lost, or the cluster stopped), or empty.
  std::string lost() const;
  /// Whether the link ended (lost() says why); cheap, any thread.
  bool ended() const noexcept { return ended_.load(std::memory_order_acquire); }

 private:
  void on_frames(std::vector<bridge::frame>&& frames);
  /// What on_frames does with one frame (on the link's thread).
  void take_frame(bridge::frame&& f);
  void on_end(const std::string& why);
  void send_loop();
  /// Hands outcomes to the runtime, off the link's thread (which must keep
  /// reading: sealing a large result may spill the arena).
  void apply_loop();
  /// Runs the calls other nodes make on the actors this node offered, and
  /// answers them (started with the first call).
  void host_loop();
  /// Calls and cancels of the frames on_frames is taking (the link's thread):
  /// they reach host_inbox_ and host_cancels_ together.
  std::vector<bridge::remote_task> host_staged_;
  std::vector<std::uint64_t> cancels_staged_;
  /// News of objects the hosting thread fetched (object_lost, object_freed).
  using object_news = std::pair<bridge::frame_type, bridge::object_note>;
  std::vector<object_news> news_staged_;
  /// Rounds of calls put into host_inbox_, and whether the hosting thread
  /// waits in the runtime for results (calls that come meanwhile wake it).
  std::atomic<std::uint64_t> host_arrivals_{0};
  std::atomic<bool> host_waits_{false};
  std::deque<bridge::remote_task> host_inbox_;  // under mu_
  std::vector<std::uint64_t> host_cancels_;     ///< calls cancelled by their caller (under mu_)
  std::vector<object_news> host_news_;          // under mu_
  std::thread host_;

  cluster_member& member_;  ///< what the link's threads hand their news to
  node_runtime& rt_;
  mutable std::mutex mu_;  // table_, version_, lost_, queue_, stopping_
  std::condition_variable cv_;
  std::vector<manta::node_info> table_;
  std::vector<manta::node_info> drivers_;
  std::uint64_t version_ = 0;
  std::uint64_t next_lookup_ = 0;
  std::map<std::uint64_t, bridge::actor_lookup> lookups_;  ///< answers to find_actor, until taken
  std::set<std::uint64_t> asking_;  ///< find_actor requests still waited for (later answers are dropped)
  std::map<std::uint64_t, actor_asker> askers_;  ///< find_actor_later requests, until answered
  std::map<std::uint64_t, std::string> offering_;  ///< named actors offered, by request: their keys, until answered
  std::string lost_;
  struct outgoing {
    bridge::remote_task task;
    std::vector<held_argument> held;
    /// Instead of the task, when `control_body` is not empty: a control frame.
    bridge::frame_type control = bridge::frame_type::actor_end;
    std::string control_body;
  };

  std::deque<outgoing> queue_;
  /// Gives back what `q` holds (with mu_ not held: a release may take the runtime's locks).
  void give_back(std::deque<outgoing>& q) noexcept;
  void give_back(outgoing& o) noexcept;
  /// What arrived, in order: outcomes, then (once) the end of the link. The
  /// end is handled after the outcomes before it, so none of them is lost.
  struct inbound {
    bool end = false;
    std::string why;  ///< the end's
    bridge::task_outcome outcome;
    std::optional<bridge::object_note> fetch;  ///< instead of an outcome: a node asks for an object
    std::string killed;  ///< instead of an outcome: another driver killed this driver's actor (its key)
    std::string killed_why;  ///< the head's reason, if it gave one
    std::string returned;    ///< instead of an outcome: an actor lent in a result is no longer held (its key)
    /// Instead of an outcome: the head's answer to the offer of a named actor (its key, why not).
    std::optional<std::pair<std::string, std::string>> offer_answer;
    /// Instead of an outcome: the answer to a worker's lookup.
    std::optional<std::pair<actor_asker, bridge::actor_lookup>> found;
  };
  std::deque<inbound> inbound_;  // under mu_
  /// Queues `in` for the applier thread (from the link's thread), which
  /// on_frame wakes once the frames that came together are all queued.
  void to_applier(inbound&& in);
  bool unannounced_ = false;  ///< queued for the applier since it was last woken (the link's thread)
  std::condition_variable applier_cv_;  ///< the applier waits on it (under mu_)
  bool stopping_ = false;
  bool left_ = false;
  std::atomic<bool> ended_{false};  ///< on_end ran
  std::unique_ptr<bridge::node_link> link_;
  /// link_->node_id(), kept: the link goes at leave(), and the id is asked after.
  std::string id_;
  std::thread sender_, applier_;
};

/// A process started by a launcher that started several (mpirun, srun): rank 0
/// hosts the head and drives; the other ranks are nodes. They meet through two
/// files in a directory all of them see (MANTA_LAUNCH_DIR, else the log_dir):
/// launch-<job>.token and launch-<job>.address, written by rank 0.
struct launch {
  std::string launcher;  ///< "mpirun" or "srun"
  int rank = 0;
  int size = 1;
  std::string job;  ///< the launcher's job id: the files' names
};
/// What the environment says of a launch, if this process is one of several.
/// @throws usage_error if a launcher started several but gave no job id
std::optional<launch> launched();
/// Rank 0's side of a launch: hosts the head, then writes the files.
class launch_head {
 public:
  /// Listens on MANTA_BIND (default loopback) and writes the token and address
  /// files into `dir` (none if `dir` is empty: they travel over MPI).
  /// @throws what bridge::head and the token file throw
  launch_head(const launch& l, const std::string& dir);
  /// Stops the cluster (every node exits) and removes the files.
  ~launch_head();
  launch_head(const launch_head&) = delete;
  launch_head& operator=(const launch_head&) = delete;
  const std::string& address() const noexcept { return address_; }
  const std::string& token() const noexcept { return token_; }

 private:
  std::string token_, address_, token_file_, address_file_;
  std::unique_ptr<bridge::head> head_;
};
/// The other ranks: waits (up to MANTA_LAUNCH_TIMEOUT seconds, default 60) for
/// rank 0's files in `dir`; returns {address, token}. @throws usage_error
std::pair<std::string, std::string> wait_for_launch_head(const launch& l, const std::string& dir);

/// Whether the ranks of `l` meet over MPI instead of through files: under
/// mpirun, when manta is built with MPI (runtime/launch_mpi.cpp).
bool launch_over_mpi(const launch& l) noexcept;
/// Rank 0's side: tells every other rank the head's address and token, or
/// why it has none (`failure` not empty). Collective: every rank must call
/// this or receive_launch_over_mpi. MPI is initialised for it and finalised
/// after, unless the program had initialised it.
void send_launch_over_mpi(const launch& l, const std::string& address, const std::string& token,
                          const std::string& failure);
/// The other ranks: {address, token} from rank 0. @throws usage_error with
/// rank 0's failure, or if MPI fails
std::pair<std::string, std::string> receive_launch_over_mpi(const launch& l);
/// A node never returns to main: MPI that the program initialised is
/// finalised before it exits (else mpirun calls the exit abnormal, and rank
/// 0's MPI_Finalize waits for it forever). Nothing without MPI.
void finalize_programs_mpi() noexcept;

/// MANTA_NODE: serves the cluster at `address` with `rt` until the cluster
/// stops (returns "") or the head is lost (returns why).
/// @throws bridge::join_error if it cannot join
std::string serve_as_node(node_runtime& rt, const std::string& address, const std::string& token);

/// An object's key in the cluster: its driver's id, then its id.
std::string object_key(const std::string& driver, const object_id& id);
/// The id an object's key in the cluster ("<driver id>/<32 hex digits>") ends
/// with, as its driver made it; nullopt if the key is malformed.
std::optional<object_id> id_in_object_key(const std::string& key);

/// A failure from another node as this one stores it.
ipc::error_info from_remote(const bridge::remote_error& e);
bridge::remote_error to_remote(const ipc::error_info& e);

}  // namespace manta::runtime

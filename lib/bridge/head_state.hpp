// bridge/head_state.hpp: the head's state, free of sockets and threads. It
// takes what members send (their joins, frames and losses) with the time, and
// returns the frames to send; bridge/head.hpp serves it over connections, and
// tests and the head_state fuzzer drive it directly, as the scheduler is.
//
// What it keeps: the node table (head_state.cpp: joins, losses, the table the
// drivers are sent), the task router (head_tasks.cpp: placing tasks by
// resources, then load, and routing their parts and outcomes back), the actor
// table (head_actors.cpp: where each actor lives, its restarts, names and
// handles lent in results) and the object directory (head_objects.cpp: which
// node holds a copy of which driver's object, fetches passed on).
//
// Nodes join, prove nothing here (the transport proved the token) and say who
// they are; one whose registry differs from the first member's is refused,
// the first difference named. A member silent past `lost_after`, or whose
// connection ended, is lost: its tasks go to another node within their
// max_retries, or fail with node_died; its actors start again elsewhere within
// their max_restarts. Drivers are sent the node table whenever it changes.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "bridge/task_wire.hpp"
#include "bridge/wire.hpp"

namespace manta::bridge {

inline constexpr std::chrono::milliseconds heartbeat_every{500};
/// How long a silent peer (no frame, no heartbeat) is waited for before it is
/// lost: MANTA_SILENCE_LIMIT_S seconds (at least 1), else 30 s, as Ray's
/// health checks (a closed connection is a loss at once, whatever this says).
/// Long enough for a driver paused in a debugger to come back.
/// @throws std::invalid_argument naming the variable if it is not such a number
std::chrono::milliseconds silence_limit();

/// Work lost with its node (an actor to start again, a task to run again)
/// waits this long for a node that can take it to join (the same node
/// started again, or a new one), by default.
inline constexpr std::chrono::milliseconds node_wait{60'000};

/// The head's node table lists at most this many lost nodes (the last ones).
inline constexpr std::size_t lost_nodes_listed = 128;

/// What a node says when it joins.
struct node_info {
  std::string host;
  int pid = 0;
  std::map<std::string, double> resources;
  std::vector<std::string> functions;  ///< the names its binary registered, sorted
  std::string role = "node";           ///< "node" (runs tasks) or "driver" (sends them)
  /// The id it would like (its runtime's node_id()); the head gives "node-N" if empty or taken.
  std::string id;
};

/// A row of the head's node table.
struct node_state {
  std::string id;       ///< "node-1", "node-2"... in order of joining
  std::string address;  ///< the peer's IP:port as the head sees it
  node_info info;
  bool alive = true;
  std::string lost_why;  ///< once lost: the connection ended, or heartbeats stopped
};

/// Why a node with the totals `has` cannot run a task asking for this much (the
/// first resource short, and by how much), or empty if it can. `memory`: bytes
/// of the node's "memory" resource (task options' memory).
std::string lacking(const std::map<std::string, double>& has, double cpus, double gpus,
                    const std::map<std::string, double>& custom, double memory = 0);

class head_state {
 public:
  using clock = std::chrono::steady_clock;
  struct settings {
    std::chrono::milliseconds lost_after = silence_limit();
    /// How long work lost with its node waits for a node that has what it
    /// asks, when no alive one has (0: it fails at once).
    std::chrono::milliseconds node_wait = bridge::node_wait;
    /// Bytes of tasks' frames kept at most, to send again on a node's loss;
    /// a task past it runs, but fails with its node instead of running again.
    std::uint64_t max_kept = std::uint64_t{4} << 30;
  };
  /// A peer as the head's state knows it: the transport's connection derives
  /// from it (the state never touches a socket), a test's is a plain one.
  struct member {
    std::string node_id;  ///< set once it joined: "node-N" or "driver-N"
    bool driver = false;  ///< it joined as a driver
    node_info joined_as;  ///< a driver's join (its machine, listed with the drivers)
    std::string address;  ///< a driver's, as the head sees it
    clock::time_point last_heard{};
    bool done = false;  ///< lost (or never joined and finished)
    /// Long frames it is sending, by its number for them: the head's number of
    /// their task (0 for one dropped) and the bytes still to come.
    struct in_stream {
      std::uint64_t id = 0;
      std::uint64_t left = 0;
      bool outcome = false;  ///< a task's outcome (from a node, or a driver hosting an actor), not a task
    };
    std::map<std::uint64_t, in_stream> in_streams;
  };
  using member_ptr = std::shared_ptr<member>;
  /// A frame's body, shared between the queues it waits in (a task's body is
  /// also kept to send again): large bodies are never copied on their way through.
  using shared_body = std::shared_ptr<const std::string>;
  /// A frame for a member, to send once the caller released its lock.
  struct outgoing {
    member_ptr to;
    frame_type type;
    shared_body body;
    bool kept = false;  ///< a task's frame the head keeps anyway: not counted against a slow peer's limit
  };

  explicit head_state(settings s);

  /// `m` (not joined yet, at address `where`) sent `join_body`, the first frame
  /// after its handshake. Queues `joined` and what its joining changes (the
  /// table for the drivers, actors waiting for a node like it), or `refused`
  /// saying why (its registry differs, a malformed join).
  /// @returns whether it joined
  bool join(const member_ptr& m, std::string_view join_body, const std::string& where, clock::time_point now,
            std::vector<outgoing>& out);
  /// A frame from joined member `m`: routed. @throws what a malformed frame
  /// throws (wire_error,...): its connection must end (then lose it)
  void take(const member_ptr& m, frame&& f, clock::time_point now, std::vector<outgoing>& out);
  /// Part of a long frame from `m` arrived: it is alive.
  void heard(member& m, clock::time_point now) noexcept { m.last_heard = now; }
  /// `m`'s connection ended (or the transport dropped it) with `why`: its
  /// work goes elsewhere or fails, the drivers hear. Nothing if it was lost already.
  void lose(member& m, const std::string& why, clock::time_point now, std::vector<outgoing>& out);
  /// Members silent past lost_after are lost (returned: the transport tells
  /// them and ends their connections); the work waiting for a node that ran
  /// out of time fails.
  std::vector<member_ptr> drop_silent(clock::time_point now, std::vector<outgoing>& out);
  /// Tells every member the cluster stopped, drivers first (their tasks then
  /// fail saying so, not "lost with <node>").
  void stop(std::vector<outgoing>& out) const;

  const std::vector<node_state>& nodes() const noexcept { return nodes_; }
  /// The node table as JSON (what `status_reply` and `cluster_update` carry).
  std::string nodes_json() const;
  /// What the state holds, for tests and the fuzzer's checks.
  struct sizes {
    std::size_t members = 0, routed = 0, actors = 0, waiting = 0, directory = 0;
    std::uint64_t kept_bytes = 0;
  };
  sizes held() const noexcept;
  /// Whether `body` is held to send again (a routed task's frame, an actor's
  /// constructor): what an outgoing frame marked `kept` must be. For checks.
  bool keeps(const shared_body& body) const noexcept;
  std::chrono::milliseconds lost_after() const noexcept { return settings_.lost_after; }

 private:
  /// A task the head forwarded to a node, until its outcome is routed back.
  struct routed_task {
    std::weak_ptr<member> driver;
    std::uint64_t driver_id = 0;  ///< the driver's number for it
    std::string node;             ///< where it runs
    std::weak_ptr<member> node_connection;
    /// As the node was sent it, to send it again: one run_task frame, or the
    /// parts of a long one (a stream numbered as the task, both ways).
    std::vector<std::pair<frame_type, shared_body>> frames;
    bool complete = true;            ///< every part of the task arrived
    bool outcome_streaming = false;  ///< parts of its outcome went to the driver, not the last
    bool keep = true;                ///< its frames are kept (false: past settings_.max_kept, it cannot be sent again)
    std::size_t kept = 0;            ///< bytes of `frames`
    std::string name;
    double num_cpus = 1, num_gpus = 0;
    std::map<std::string, double> resources;
    std::uint64_t memory = 0;          ///< bytes of the node's "memory" resource
    int retries_left = 0;              ///< on the loss of its node
    std::vector<std::string> objects;  ///< the stored objects it names (remote_task::objects)
    /// A task lost with its node while no alive node could take it: it waits
    /// (node empty) until one joins, or fails at `wait_by` saying `lost_with`.
    std::chrono::steady_clock::time_point wait_by{};
    std::string lost_with;
    bool spilled = false;  ///< remote_task::spilled: never waits for a node
    std::string actor;     ///< an actor's constructor or call: the actor's key
    /// An actor's call: sent again only to its actor started again elsewhere,
    /// within the actor's max_task_retries (retries_left), never on its own.
    bool method = false;
    /// Its outcome, streaming to the driver, lends actor handles: taken over
    /// after its last part (its first part's header lists them).
    task_outcome lends;
  };
  /// An actor the head placed, by its key: where it lives, and how to start it
  /// again on another node when that one is lost.
  struct placed_actor {
    std::weak_ptr<member> driver;
    std::string node;
    std::weak_ptr<member> node_connection;
    routed_task ctor;           ///< its constructor as placed; its one frame, when kept
    std::uint64_t ctor_id = 0;  ///< the head's number for its constructor (in that frame)
    int restarts_left = 0;      ///< on the loss of its node
    /// Its max_task_retries (negative: no limit): a call running when its node
    /// is lost runs again after the restart, if its frame was kept.
    int task_retries = 0;
    /// The driver whose program started it (remote_task::origin): when that
    /// driver leaves, it ends, whichever driver (a node's) owns it.
    std::string origin;
    std::string name;  ///< its name in the cluster, or empty
    std::uint64_t class_tag = 0;
    bool complete = true;  ///< its constructor went whole to its node (false while its parts go)
    /// It lives on its driver's own node (host_actor): calls go to that
    /// driver's connection; never placed, counted on a node or started again.
    bool on_driver = false;
    /// The members whose handles of it went to `driver` in results, handing
    /// it over (returned_handle::owned), one per handle: each is told
    /// (actor_returned) once it is forgotten.
    std::vector<std::weak_ptr<member>> lenders;
    std::string gone;  ///< why it is gone (its later calls fail with it), or empty
    /// Lost with its node while no alive node had what it asks: it starts
    /// again once one joins (place_restarting), or is gone at `restart_by`.
    bool restarting = false;
    bool first_start = false;  ///< restarting, but never started: no restart is charged
    std::chrono::steady_clock::time_point restart_by{};
    std::string lost_with;  ///< while restarting: "was lost with <node> (<why>)"
    /// While restarting: its calls, held until it starts (routed_ numbers, in
    /// order; `true`: a call made meanwhile, `false`: one running when lost).
    std::vector<std::pair<std::uint64_t, bool>> held_calls;
  };

  /// Marks `c`'s member lost: its tasks go elsewhere or fail, drivers hear of it.
  void lose_member(member& c, const std::string& why, std::vector<outgoing>& out);
  /// Places `t` on the least loaded alive node that has what it needs;
  /// empty with `why` set if none can run it.
  member_ptr place(const routed_task& t, std::string& why);
  /// A driver sent a task: forwarded, or its failure sent back.
  void route_task(const member_ptr& driver, std::string&& body, std::vector<outgoing>& out);
  /// A node sent an outcome: routed to the task's driver.
  void route_outcome(member& from, std::string&& body, std::vector<outgoing>& out);
  /// A part of a long task (from a driver) or outcome (from a node):
  /// forwarded as it comes, renumbered in place.
  void route_part(const member_ptr& from, std::string&& body, std::vector<outgoing>& out);
  /// Sends `t` to `node`: what arrived of it so far.
  void forward(routed_task& t, const member_ptr& node, std::vector<outgoing>& out);
  /// A routed task for `t` from `driver`, not placed yet.
  routed_task routed_from(const member_ptr& driver, const remote_task& t);
  /// The failure a driver gets for a task no node could take.
  shared_body unplaced(const remote_task& t, const std::string& why);
  /// Where an actor's constructor or call goes: a constructor is
  /// placed as a task and the actor recorded, a call goes to its actor's node.
  /// Empty with `why` set if it cannot go.
  member_ptr actor_target(const member_ptr& driver, const remote_task& t, routed_task& r, std::string& why);
  /// The failure a driver gets for an actor's constructor or call that cannot go.
  shared_body actor_refused(const remote_task& t, const std::string& why);
  /// After `r` (an actor's, numbered `id`) was forwarded as frame `body`
  /// (empty for a long one),.
  void actor_forwarded(std::uint64_t id, routed_task& r, const shared_body& body);
  /// A driver ended one of its actors (actor_end): its node hears of it.
  void end_actor(const member& driver, std::string_view body, std::vector<outgoing>& out);
  /// The alive connection of member `id` (a driver's when `driver`), or empty.
  member_ptr connection_of(const std::string& id, bool driver) const;
  /// The alive connection of member `id`, a node's or a driver's (both fetch
  /// objects), or empty.
  member_ptr member_of(const std::string& id) const;
  /// Where a task sent to one node (remote_task::node) goes; an
  /// object's value also enters the object directory.
  member_ptr node_target(const member_ptr& driver, const remote_task& t, routed_task& r, std::string& why);
  /// A node asks for an object (fetch_object), a driver cannot send one
  /// (object_lost) or freed one (object_freed): passed on.
  void route_object_note(const member& from, frame_type type, std::string_view body, std::vector<outgoing>& out);
  /// One frame a joined member sent (`driver`: it joined as one), to its handler.
  void route_frame(const member_ptr& c, bool driver, frame&& f, std::vector<outgoing>& out);
  /// A driver offers an actor of its own node to the cluster (host_actor);
  /// one whose name is taken in the cluster is refused (an actor_end with kill).
  void host_actor(const member_ptr& driver, std::string_view body, std::vector<outgoing>& out);
  /// A driver asks for a named actor (find_actor): answered.
  void find_named(const member_ptr& driver, std::string_view body, std::vector<outgoing>& out);
  /// Answers the lookups waiting for actor `key`, from its state now.
  void answer_lookups(const std::string& key, std::vector<outgoing>& out);
  /// Actor `key` is gone for good: `why` answers its later calls; its name is free.
  void actor_gone(const std::string& key, placed_actor& a, std::string why, std::vector<outgoing>& out);
  /// A driver cancelled a task it sent (cancel_task): its node hears of it.
  void cancel_routed(const member& driver, std::string_view body, std::vector<outgoing>& out);
  /// The actors on lost node `c` start again elsewhere, or are gone.
  /// @param resend  calls of `c`'s actors that may run again, in the order sent:
  ///                 sent behind their actor's new start, or failed
  void lose_actors(const member& c, const std::string& why, std::vector<std::uint64_t> resend,
                   std::vector<outgoing>& out);
  /// Starts actor `key` again on `node` from the constructor the head kept,
  /// then sends the calls held for it.
  void restart_on(const std::string& key, placed_actor& a, const member_ptr& node, const std::string& lost_with,
                  std::vector<outgoing>& out);
  /// The actors and tasks waiting for a node: sent where one now fits, or
  /// gone once their wait is over or their driver left.
  void place_restarting(std::vector<outgoing>& out);
  /// Holds a call of restarting actor `t.actor` until it starts;
  /// false if the head keeps no more (then it fails).
  bool hold_call(routed_task&& r, std::string&& body);
  /// Keeps the constructor of actor `t.actor`, which waits for a node before
  /// its first start; false if it does not wait. Past what the
  /// head keeps, the actor is gone and its driver hears.
  bool hold_constructor(const remote_task& t, const routed_task& r, std::string&& body, std::vector<outgoing>& out);
  /// Holds new task `r` until a node that can run it joins:
  /// false if the head keeps no more.
  bool hold_task(routed_task&& r, std::string&& body);
  /// Fails the calls held for `a` with `why`.
  void fail_held(placed_actor& a, const std::string& why, std::vector<outgoing>& out);
  /// Keeps a part of actor `key`'s long constructor with the actor, to start
  /// it again elsewhere, while the head keeps less than settings_.max_kept.
  void keep_constructor_part(const std::string& key, const shared_body& part);
  /// Stops keeping `r`'s frames.
  void forget_frames(routed_task& r);
  /// `a` counts on its node: its load, and the resources it holds for life.
  void host(const placed_actor& a);
  /// `a` no longer counts on its node (it is gone, or ended),.
  void unhost(placed_actor& a);
  /// Erases an actor; the member that lent it hears; returns the next.
  std::map<std::string, placed_actor>::iterator forget_actor(std::map<std::string, placed_actor>::iterator it,
                                                             std::vector<outgoing>& out);
  /// Actor handles in an outcome that went to `driver` (; queued
  /// after it): those its lender owned change owner, and actors on the
  /// lender's own node enter the table; the lender gets the others back at
  /// once, and every one when there is no driver to take them (gone, or null).
  void take_over_handles(const task_outcome& o, const member_ptr& driver, std::vector<outgoing>& out);
  /// Keeps a frame of `t` to send again, while the head keeps less than settings_.max_kept.
  void keep_frame(routed_task& t, frame_type type, const shared_body& body);
  /// Frames queued as kept from out[from] on that neither `r` nor its actor
  /// (a constructor's) holds any more are queued as not kept after all: they
  /// count against their receiver's queue (a frame the head keeps does not).
  void settle_kept(std::vector<outgoing>& out, std::size_t from, const routed_task& r) const;
  /// Forgets a routed task.
  void drop_route(std::map<std::uint64_t, routed_task>::iterator it);
  /// The node table for every driver.
  void tell_drivers(std::vector<outgoing>& out);
  /// Empty if `functions` matches the reference registry (the first node's), else the first difference.
  std::string registry_difference(const std::vector<std::string>& functions);

  settings settings_;
  clock::time_point now_{};  ///< the time the caller passed with what it handles now
  std::vector<node_state> nodes_;
  std::vector<member_ptr> members_;     ///< joined and not lost, in the order they joined
  std::vector<std::string> reference_;  ///< the first member's registry
  bool have_reference_ = false;
  int next_node_ = 0, next_driver_ = 0;
  std::map<std::uint64_t, routed_task> routed_;     ///< by the head's number
  std::map<std::string, int> running_;              ///< tasks forwarded to each node, not back yet
  std::map<std::string, placed_actor> actors_;      ///< by key: every driver's actors in the cluster
  std::set<std::string> restarting_;                ///< keys of actors waiting for a node to start again on
  std::vector<std::uint64_t> waiting_tasks_;        ///< tasks lost with their node, waiting for one (routed_ numbers)
  std::map<std::string, int> hosted_;               ///< actors living on each node (they count as its load)
  std::map<std::string, std::string> actor_names_;  ///< named actors' keys, by name (cluster-wide)
  /// Lookups of a named actor whose constructor is still on its way, by its key:
  /// answered once it went whole (a call sent before would overtake it).
  std::map<std::string, std::vector<std::pair<std::weak_ptr<member>, actor_lookup>>> waiting_lookups_;
  std::map<std::string, std::map<std::string, double>> held_;  ///< resources each node's actors hold for life
  /// The object directory: for each driver's object sent to nodes, the nodes
  /// holding a copy (told when the driver frees it, or leaves).
  std::map<std::string, std::set<std::string>> directory_;
  /// Fetches passed to drivers and not answered yet: (object key, asking node).
  /// A driver that leaves answers its own with object_lost, through the head.
  std::set<std::pair<std::string, std::string>> fetching_;
  std::uint64_t next_task_ = 0;
  std::uint64_t kept_bytes_ = 0;  ///< of every routed task's frames
  mutable std::uint64_t table_version_ = 0;
};

}  // namespace manta::bridge

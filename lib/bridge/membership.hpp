// bridge/membership.hpp: who is in the cluster, and the global scheduler. The
// head keeps the node table: each node connects, proves the token
// (bridge/auth), says who it is (its host, pid, resources and the names its
// binary registered) and then sends a heartbeat every half second, which the
// head answers. A node whose connection ends, or that stays silent for
// `lost_after` (3 s), is lost; a member whose registry differs from the first
// one's is refused, the first difference named. Drivers join the same way
// (role "driver"): they are sent the node table whenever it changes, and send
// the head tasks their own node cannot run, which the head places on a node
// (by resources, then load), forwards, and whose outcome it routes back; a
// task on a node that is lost goes to another within its max_retries, or fails
// with node_died. A tool connection asks for the table or stops the cluster:
// every member is told to stop. Members see the head lost the same way.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "bridge/task_wire.hpp"
#include "bridge/tls.hpp"
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

/// Could not join: the head refused (wrong token, registry differs) or is not there.
class join_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class head {
 public:
  struct config {
    std::string bind = "127.0.0.1";  ///< loopback unless told otherwise
    unsigned short port = 0;         ///< 0: any free port
    std::string token;
    /// TLS on every connection (bridge/tls), when set.
    std::shared_ptr<tls_context> tls;
    std::chrono::milliseconds lost_after = silence_limit();
    /// How long work lost with its node waits for a node that has what it
    /// asks, when no alive one has (0: it fails at once).
    std::chrono::milliseconds node_wait = bridge::node_wait;
    /// Called (on a head thread) when a tool asks to stop the cluster, after
    /// every node was told.
    std::function<void()> on_stop_request;
  };

  /// Listens and serves. @throws std::system_error if it cannot listen.
  explicit head(config c);
  /// Tells every node to stop, then closes every connection.
  ~head();
  head(const head&) = delete;
  head& operator=(const head&) = delete;

  unsigned short port() const noexcept { return port_; }
  std::vector<node_state> nodes() const;
  /// The node table as JSON (what `status_reply` carries).
  std::string nodes_json() const;
  /// Tells every node to stop.
  void stop_cluster();

 private:
  struct connection;
  /// A frame to send once the head's mutex is released.
  /// A frame's body, shared between the queues it waits in (a task's body is
  /// also kept to send again): large bodies are never copied on their way through.
  using shared_body = std::shared_ptr<const std::string>;
  struct outgoing {
    std::shared_ptr<connection> to;
    frame_type type;
    shared_body body;
    bool kept = false;  ///< a task's frame the head keeps anyway: not counted against a slow peer's limit
  };
  /// A task the head forwarded to a node, until its outcome is routed back.
  struct routed_task {
    std::weak_ptr<connection> driver;
    std::uint64_t driver_id = 0;  ///< the driver's number for it
    std::string node;             ///< where it runs
    std::weak_ptr<connection> node_connection;
    /// As the node was sent it, to send it again: one run_task frame, or the
    /// parts of a long one (a stream numbered as the task, both ways).
    std::vector<std::pair<frame_type, shared_body>> frames;
    bool complete = true;            ///< every part of the task arrived
    bool outcome_streaming = false;  ///< parts of its outcome went to the driver, not the last
    bool keep = true;                ///< its frames are kept (false: past max_kept, it cannot be sent again)
    std::size_t kept = 0;            ///< bytes of `frames`
    std::string name;
    double num_cpus = 1, num_gpus = 0;
    std::map<std::string, double> resources;
    std::uint64_t memory = 0;  ///< bytes of the node's "memory" resource
    int retries_left = 0;  ///< on the loss of its node
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
    std::weak_ptr<connection> driver;
    std::string node;
    std::weak_ptr<connection> node_connection;
    routed_task ctor;        ///< its constructor as placed; its one frame, when kept
    std::uint64_t ctor_id = 0;  ///< the head's number for its constructor (in that frame)
    int restarts_left = 0;   ///< on the loss of its node
    /// Its max_task_retries (negative: no limit): a call running when its node
    /// is lost runs again after the restart, if its frame was kept.
    int task_retries = 0;
    /// The driver whose program started it (remote_task::origin): when that
    /// driver leaves, it ends, whichever driver (a node's) owns it.
    std::string origin;
    std::string name;        ///< its name in the cluster, or empty
    std::uint64_t class_tag = 0;
    bool complete = true;    ///< its constructor went whole to its node (false while its parts go)
    /// It lives on its driver's own node (host_actor): calls go to that
    /// driver's connection; never placed, counted on a node or started again.
    bool on_driver = false;
    /// The members whose handles of it went to `driver` in results, handing
    /// it over (returned_handle::owned), one per handle: each is told
    /// (actor_returned) once it is forgotten.
    std::vector<std::weak_ptr<connection>> lenders;
    std::string gone;        ///< why it is gone (its later calls fail with it), or empty
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

  void accept_loop();
  void serve(std::shared_ptr<connection> c);
  void watch_heartbeats();
  void send_all_of(std::vector<outgoing>& out);
  /// Marks `c`'s member lost (under mu_): its tasks go elsewhere or fail, drivers hear of it.
  void lose_member(connection& c, const std::string& why, std::vector<outgoing>& out);
  /// Places `t` on the least loaded alive node that has what it needs (under mu_);
  /// empty with `why` set if none can run it.
  std::shared_ptr<connection> place(const routed_task& t, std::string& why);
  /// A driver sent a task (under mu_): forwarded, or its failure sent back.
  void route_task(const std::shared_ptr<connection>& driver, std::string&& body, std::vector<outgoing>& out);
  /// A node sent an outcome (under mu_): routed to the task's driver.
  void route_outcome(connection& from, std::string&& body, std::vector<outgoing>& out);
  /// A part of a long task (from a driver) or outcome (from a node), under
  /// mu_: forwarded as it comes, renumbered in place.
  void route_part(const std::shared_ptr<connection>& from, std::string&& body, std::vector<outgoing>& out);
  /// Sends `t` to `node` (under mu_): what arrived of it so far.
  void forward(routed_task& t, const std::shared_ptr<connection>& node, std::vector<outgoing>& out);
  /// A routed task for `t` from `driver`, not placed yet.
  routed_task routed_from(const std::shared_ptr<connection>& driver, const remote_task& t);
  /// The failure a driver gets for a task no node could take.
  shared_body unplaced(const remote_task& t, const std::string& why);
  /// Where an actor's constructor or call goes (under mu_): a constructor is
  /// placed as a task and the actor recorded, a call goes to its actor's node.
  /// Empty with `why` set if it cannot go.
  std::shared_ptr<connection> actor_target(const std::shared_ptr<connection>& driver, const remote_task& t,
                                           routed_task& r, std::string& why);
  /// The failure a driver gets for an actor's constructor or call that cannot go.
  shared_body actor_refused(const remote_task& t, const std::string& why);
  /// After `r` (an actor's, numbered `id`) was forwarded as frame `body`
  /// (empty for a long one), under mu_.
  void actor_forwarded(std::uint64_t id, routed_task& r, const shared_body& body);
  /// A driver ended one of its actors (actor_end): its node hears of it (under mu_).
  void end_actor(const connection& driver, std::string_view body, std::vector<outgoing>& out);
  /// The alive connection of member `id` (a driver's when `driver`), or empty (under mu_).
  std::shared_ptr<connection> connection_of(const std::string& id, bool driver) const;
  /// The alive connection of member `id`, a node's or a driver's (both fetch
  /// objects), or empty (under mu_).
  std::shared_ptr<connection> member_of(const std::string& id) const;
  /// Where a task sent to one node (remote_task::node) goes (under mu_); an
  /// object's value also enters the object directory.
  std::shared_ptr<connection> node_target(const std::shared_ptr<connection>& driver, const remote_task& t,
                                          routed_task& r, std::string& why);
  /// A node asks for an object (fetch_object), a driver cannot send one
  /// (object_lost) or freed one (object_freed): passed on (under mu_).
  void route_object_note(const connection& from, frame_type type, std::string_view body, std::vector<outgoing>& out);
  /// One frame a joined member sent (`driver`: it joined as one), to its handler (under mu_).
  void route_frame(const std::shared_ptr<connection>& c, bool driver, frame&& f, std::vector<outgoing>& out);
  /// A driver offers an actor of its own node to the cluster (host_actor), under
  /// mu_; one whose name is taken in the cluster is refused (an actor_end with kill).
  void host_actor(const std::shared_ptr<connection>& driver, std::string_view body, std::vector<outgoing>& out);
  /// A driver asks for a named actor (find_actor): answered (under mu_).
  void find_named(const std::shared_ptr<connection>& driver, std::string_view body, std::vector<outgoing>& out);
  /// Answers the lookups waiting for actor `key`, from its state now (under mu_).
  void answer_lookups(const std::string& key, std::vector<outgoing>& out);
  /// Actor `key` is gone for good: `why` answers its later calls; its name is free (under mu_).
  void actor_gone(const std::string& key, placed_actor& a, std::string why, std::vector<outgoing>& out);
  /// A driver cancelled a task it sent (cancel_task): its node hears of it (under mu_).
  void cancel_routed(const connection& driver, std::string_view body, std::vector<outgoing>& out);
  /// The actors on lost node `c` start again elsewhere, or are gone (under mu_).
  /// @param resend  calls of `c`'s actors that may run again, in the order sent:
  ///                 sent behind their actor's new start, or failed
  void lose_actors(const connection& c, const std::string& why, std::vector<std::uint64_t> resend,
                   std::vector<outgoing>& out);
  /// Starts actor `key` again on `node` from the constructor the head kept,
  /// then sends the calls held for it (under mu_).
  void restart_on(const std::string& key, placed_actor& a, const std::shared_ptr<connection>& node,
                  const std::string& lost_with, std::vector<outgoing>& out);
  /// The actors and tasks waiting for a node: sent where one now fits, or
  /// gone once their wait is over or their driver left (under mu_).
  void place_restarting(std::vector<outgoing>& out);
  /// Holds a call of restarting actor `t.actor` until it starts (under mu_);
  /// false if the head keeps no more (then it fails).
  bool hold_call(routed_task&& r, std::string&& body);
  /// Keeps the constructor of actor `t.actor`, which waits for a node before
  /// its first start (under mu_); false if it does not wait. Past what the
  /// head keeps, the actor is gone and its driver hears.
  bool hold_constructor(const remote_task& t, const routed_task& r, std::string&& body, std::vector<outgoing>& out);
  /// Holds new task `r` until a node that can run it joins (under mu_):
  /// false if the head keeps no more.
  bool hold_task(routed_task&& r, std::string&& body);
  /// Fails the calls held for `a` with `why` (under mu_).
  void fail_held(placed_actor& a, const std::string& why, std::vector<outgoing>& out);
  /// Keeps a part of actor `key`'s long constructor with the actor, to start
  /// it again elsewhere, while the head keeps less than max_kept (under mu_).
  void keep_constructor_part(const std::string& key, const shared_body& part);
  /// Stops keeping `r`'s frames (under mu_).
  void forget_frames(routed_task& r);
  /// `a` counts on its node: its load, and the resources it holds for life (under mu_).
  void host(const placed_actor& a);
  /// `a` no longer counts on its node (it is gone, or ended), under mu_.
  void unhost(placed_actor& a);
  /// Erases an actor (under mu_); the member that lent it hears; returns the next.
  std::map<std::string, placed_actor>::iterator forget_actor(std::map<std::string, placed_actor>::iterator it,
                                                             std::vector<outgoing>& out);
  /// Actor handles in an outcome that went to `driver` (under mu_; queued
  /// after it): those its lender owned change owner, and actors on the
  /// lender's own node enter the table; the lender gets the others back at
  /// once, and every one when there is no driver to take them (gone, or null).
  void take_over_handles(const task_outcome& o, const std::shared_ptr<connection>& driver, std::vector<outgoing>& out);
  /// Keeps a frame of `t` to send again, while the head keeps less than max_kept (under mu_).
  void keep_frame(routed_task& t, frame_type type, const shared_body& body);
  /// Forgets a routed task (under mu_).
  void drop_route(std::map<std::uint64_t, routed_task>::iterator it);
  /// The node table for every driver (under mu_).
  void tell_drivers(std::vector<outgoing>& out);
  std::string nodes_json_locked() const;
  /// Empty if `functions` matches the reference registry (the first node's), else the first difference.
  std::string registry_difference(const std::vector<std::string>& functions);

  config cfg_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  unsigned short port_ = 0;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mu_;  // nodes_, connections_, reference_
  std::vector<node_state> nodes_;
  std::vector<std::shared_ptr<connection>> connections_;
  std::vector<std::string> reference_;  ///< the first member's registry
  bool have_reference_ = false;
  int next_node_ = 0, next_driver_ = 0;
  std::map<std::uint64_t, routed_task> routed_;  ///< by the head's number
  std::map<std::string, int> running_;           ///< tasks forwarded to each node, not back yet
  std::map<std::string, placed_actor> actors_;   ///< by key: every driver's actors in the cluster
  std::set<std::string> restarting_;             ///< keys of actors waiting for a node to start again on
  std::vector<std::uint64_t> waiting_tasks_;     ///< tasks lost with their node, waiting for one (routed_ numbers)
  std::map<std::string, int> hosted_;            ///< actors living on each node (they count as its load)
  std::map<std::string, std::string> actor_names_;  ///< named actors' keys, by name (cluster-wide)
  /// Lookups of a named actor whose constructor is still on its way, by its key:
  /// answered once it went whole (a call sent before would overtake it).
  std::map<std::string, std::vector<std::pair<std::weak_ptr<connection>, actor_lookup>>> waiting_lookups_;
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
  std::thread acceptor_, watcher_;
};

/// A member's link to the head (a node's, or a driver's): joined in the
/// constructor, heartbeats on a thread of its own.
class node_link {
 public:
  /// Connects to `address` (HOST:PORT), proves `token`, joins as `info`.
  /// @param on_end  called once, on the link's thread, when the cluster stops
  ///                or the head is lost, with why; it may destroy the link, and
  ///                may run while another thread's destructor waits for it
  /// @param on_frames  called on the link's thread with the frames that are not
  ///                   membership's own (tasks, outcomes, the node table), in
  ///                   order, those that came together in one call (so a
  ///                   receiver hands them on together); it must not block.
  ///                   An exception from it ends the link.
  /// @param lander  where long frames from the head land (on the link's thread), if not joined
  /// @throws join_error saying why it could not join
  node_link(const std::string& address, const std::string& token, node_info info,
            std::function<void(const std::string& why)> on_end,
            std::function<void(std::vector<frame>&&)> on_frames = {}, frame_lander lander = {});
  ~node_link();
  node_link(const node_link&) = delete;
  node_link& operator=(const node_link&) = delete;

  const std::string& node_id() const noexcept { return id_; }
  /// Sends a frame to the head (any thread). @throws io_error if the link is down.
  void send(frame_type type, std::string_view body) { send(type, std::span<const std::string_view>(&body, 1)); }
  /// Sends a frame whose body is `pieces` joined, a long one in parts (other
  /// senders and heartbeats go between them). @throws io_error if the link is
  /// down, wire_error if it is over max_long_body (then nothing was sent)
  void send(frame_type type, std::span<const std::string_view> pieces);
  /// Sends frames already encoded (several small ones in one call). @throws io_error
  void send_encoded(std::string_view frames);
  /// Makes a long send under way, and every later one, fail (io_error) at its
  /// next part: a leaving member does not wait for gigabytes to go out.
  void stop_sending() noexcept { closing_.store(true, std::memory_order_release); }

 private:
  void run();

  /// Sends a frame (send_mu_ held); a failure shuts the connection down.
  void send_locked(std::string_view header, std::string_view body);

  int fd_ = -1;
  std::mutex send_mu_;  ///< the link's thread (heartbeats) and senders
  std::atomic<bool> sending_{false};  ///< a frame is on its way out
  int wake_fd_ = -1;
  frame_decoder in_;  ///< the connection's, from the handshake on
  part_assembler parts_;  ///< long frames from the head (the link's thread)
  std::atomic<std::uint64_t> next_stream_{0};
  std::atomic<bool> closing_{false};  ///< stop_sending was called
  std::string id_;
  std::function<void(const std::string&)> on_end_;
  std::function<void(std::vector<frame>&&)> on_frames_;
  const std::chrono::milliseconds silence_limit_ = silence_limit();  ///< the head's silence that loses it
  std::thread thread_;
};

/// A tool's request to the head at `address`: "status" (the node table as
/// JSON) or "stop" (stop the cluster; answers "{}").
/// @throws join_error if the head cannot be reached or refuses the token
std::string ask_head(const std::string& address, const std::string& token, const std::string& request);

/// Why a node with the totals `has` cannot run a task asking for this much (the
/// first resource short, and by how much), or empty if it can. `memory`: bytes
/// of the node's "memory" resource (task options' memory).
std::string lacking(const std::map<std::string, double>& has, double cpus, double gpus,
                    const std::map<std::string, double>& custom, double memory = 0);

/// Splits "HOST:PORT" ("[v6]:PORT" too). @throws join_error if malformed.
std::pair<std::string, unsigned short> split_address(const std::string& address);

}  // namespace manta::bridge

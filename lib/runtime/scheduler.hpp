// runtime/scheduler.hpp: the node's scheduler. It takes tasks from submission to
// their results: the task graph holds them, placement picks workers, actors get
// their processes and queues; it handles every message workers send and writes
// theirs into their outboxes. It starts no thread and forks nothing: processes
// are asked of its host (node_runtime, or a test), so unit tests and fuzzers
// drive it inside one process. Not thread-safe: node_runtime calls it with its
// scheduler mutex held.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <manta/detail/introspect.hpp>
#include <manta/nodes.hpp>
#include <nlohmann/json_fwd.hpp>

#include "ipc/channel.hpp"
#include "observe/timeline.hpp"
#include "process/control.hpp"
#include "ipc/messages.hpp"
#include "runtime/actor_record.hpp"
#include "runtime/directory.hpp"
#include "runtime/function_stats.hpp"
#include "runtime/object_store.hpp"
#include "runtime/placement.hpp"
#include "runtime/memory_monitor.hpp"
#include "runtime/resources.hpp"
#include "runtime/task_graph.hpp"

namespace manta::runtime {

/// The driver's side of one worker process or actor host, in slot `slot`.
struct worker_link {
  enum class state { dead, starting, alive };
  int slot = 0;
  std::uint64_t generation = 0;  ///< bumped per process in this slot
  pid_t pid = -1;
  /// Read by pollers without the scheduler mutex: set to alive (release) only
  /// once the pipes are in place.
  std::atomic<state> st{state::dead};
  ipc::outbox out;
  ipc::inbox in;  ///< read by the poller (poll role), not under the scheduler mutex
  int out_fd = -1, in_fd = -1;
  worker_state place;  ///< what it was sent, its CPU accounts
  /// Objects it holds refs to; true once it was told where one lies (which pins it).
  std::unordered_map<object_id, bool> holds;
  std::unordered_map<std::uint64_t, std::uint64_t> extents;  ///< granted, not yet sealed: size
  std::vector<std::uint64_t> blocked_keys;  ///< its tasks or calls waiting in get/wait now (block, unblock)
  bool awaiting_room = false;               ///< its request for room waits (on_alloc)
  std::uint32_t seen_seq = 0;  ///< its outbox_seq when its pipe was last drained
  actor_record* actor = nullptr;  ///< set when the process hosts an actor
  bool input_closed = false;      ///< its pipe ended, or it sent garbage: read no more
  bool killed_to_cancel = false;  ///< its death retries the other tasks without charging them
  std::string kill_reason;        ///< why the runtime killed it (its death's cause), or empty
  std::string crash_stack;        ///< the stack its crashing thread wrote, once it died of a signal
  bool killed_for_memory = false; ///< by the memory monitor: its task fails with out_of_memory_error
  /// Calls sent of each function with a max_calls, by function id; once one
  /// reaches its limit the worker takes nothing more and is replaced when idle.
  std::unordered_map<std::uint64_t, int> limited_calls;
  bool retiring = false;
  bool dirty = false, write_armed = false;
  /// An extra worker: since when it has had nothing to run (or zero: busy).
  std::chrono::steady_clock::time_point idle_since{};
};

/// What the scheduler needs from outside: processes and the pipes' readiness.
class scheduler_host {
 public:
  /// Start a process for `slot` (its pipes arrive through scheduler::spawned).
  virtual void spawn(int slot, std::uint64_t process_number) = 0;
  /// End a process now (SIGKILL); its death arrives through scheduler::exited.
  virtual void kill(pid_t pid) = 0;
  /// Call scheduler::writable when `w`'s pipe has room again (`on`), or stop.
  virtual void watch_writable(worker_link& w, bool on) = 0;
  /// Wake the I/O thread: an actor's last handle went on some thread (retire it
  /// there), or a task timeout falls due before any it knew of.
  virtual void wake() = 0;
  /// Send `t` (task_spec::remote, its arguments sealed) to the cluster; its
  /// outcome comes back through scheduler::remote_result. A failure if it cannot go.
  virtual std::optional<ipc::error_info> send_remote(task_spec& t) = 0;
  /// Whether `t`, which this node can never run, may go to the cluster (a
  /// node there has what it asks, and its arguments can travel).
  virtual bool cluster_can_run(const task_spec& t) = 0;
  /// Whether a ready task no local worker can take now may go to the cluster
  /// instead (some node has a CPU free), given `in_flight` remote tasks.
  virtual bool remote_room(const task_spec& t, std::size_t in_flight) = 0;
  /// What of remote_room depends on `o` alone: false means no ready task
  /// submitted with options like `o` may go to the cluster now.
  virtual bool cluster_room(const detail::task_options& o, std::size_t in_flight) = 0;
  /// An actor that lives on another node ended here (its handles are gone, or
  /// it was killed): tell its node. Never blocks.
  virtual void end_remote_actor(const std::string& key, bool kill) = 0;
  /// A remote task sent to the cluster (its `key`) was cancelled here: its node
  /// cancels it too (a queued actor call is dropped there). Never blocks.
  virtual void cancel_remote(std::uint64_t key) = 0;
  /// `e`, which a node of the cluster asked for while it was pending, is
  /// sealed or failed (its subscriber::cluster). Never blocks.
  virtual void object_settled(object_entry* e) = 0;
  /// A worker's get_actor(`name`) found no actor here: ask the cluster, and
  /// answer through scheduler::answer_actor_lookup (from another thread).
  /// False if there is no cluster to ask (`error` says why, if it is gone). Never blocks.
  virtual bool find_actor_later(int slot, std::uint64_t generation, std::uint64_t request, const std::string& name,
                                std::uint64_t class_tag, std::string& error) = 0;
  /// Whether a named actor a worker starts goes through the cluster, so its
  /// name is known cluster-wide (a node of a cluster: its own names reach nobody else).
  virtual bool names_in_cluster() = 0;
  /// A named actor of this node was created (a driver of a cluster offers it
  /// there, so the name is known cluster-wide). Never blocks.
  virtual void offer_named(actor_record& a) = 0;
  /// The other nodes of this runtime's cluster, as it last heard (none
  /// without one): a task's nodes() and cluster_resources(). Never blocks.
  virtual std::vector<manta::node_info> cluster_nodes() { return {}; }
  /// Make room for the worker's request by spilling, off the scheduler's lock
  /// (runtime/spiller); answer through scheduler::room_made. Never blocks.
  virtual void make_room(int slot, std::uint64_t generation, std::uint64_t request, std::uint64_t size) = 0;
  /// Read `entries` back from the spill file off the lock and hold them
  /// together (one count of each is given with them); answer through
  /// scheduler::restored. Never blocks.
  virtual void restore(std::vector<object_entry*> entries) = 0;

 protected:
  ~scheduler_host() = default;
};

/// How many extra workers a pool of `pool_size` may start while its workers
/// wait: 16 per worker, at least 64 (Ray's nodes start a worker per blocked
/// task with no fixed bound; a bound keeps a runaway from forking hundreds).
inline std::size_t max_extra_workers(std::size_t pool_size) { return std::max<std::size_t>(64, 16 * pool_size); }

/// "signal 9 (SIGKILL: Killed)" or "exit status 3", from a wait status.
std::string describe_exit(int status);

class scheduler {
 public:
  struct config {
    std::size_t pool_size = 1;  ///< pool workers, in slots [0, pool_size)
    std::size_t max_slots = 1;  ///< pool workers plus actor hosts
    /// Workers started beyond pool_size while pool workers wait (see
    /// balance_extra_workers), at most.
    std::size_t max_extra_workers = 0;
    /// Shared with the processes: their sequence words and running tasks.
    process::control_block* control = nullptr;
    /// Where tasks, deaths and process names are recorded while it records (or null).
    observe::timeline* timeline = nullptr;
  };
  scheduler(config c, directory& dir, object_store& store, resource_ledger ledger, scheduler_host& host);
  ~scheduler();
  scheduler(const scheduler&) = delete;
  scheduler& operator=(const scheduler&) = delete;

  /// Asks for the pool's processes.
  void start();

  // ---- tasks (from user threads, and from workers' submit messages)
  std::uint64_t new_key() noexcept { return next_key_.fetch_add(1, std::memory_order_relaxed) + 1; }
  /// Why the node can never run `t` (naming the resource), if so; sets what it needs.
  /// Reads only the node's totals, which never change: callable without the mutex.
  std::optional<std::string> admit(task_spec& t) const;
  /// Registers a submitted task: it runs once its arguments are sealed.
  void submit(std::unique_ptr<task_spec> t);
  /// Cancels the unfinished task producing `e` (see manta::cancel).
  void cancel(object_entry* e);
  /// Sends ready tasks to workers (and starts actors that now fit).
  void dispatch();
  /// A remote task's outcome: its results (`values`, one per return; inline
  /// data, copied into the arena when large; `inside`: the ids of the refs in
  /// each, objects in the directory) or its failure. A task cancelled
  /// meanwhile is not there any more: nothing happens. Nothing is dispatched:
  /// outcomes that came together are taken first, then one dispatch sends what
  /// they made room for.
  void remote_result(std::uint64_t key, std::span<const ipc::value_location> values,
                     std::span<const std::vector<object_id>> inside, const ipc::error_info* error);
  /// The origin of the task last sent to process `pid` (0: none, or no such process).
  std::uint16_t origin_of_process(pid_t pid) const;
  /// The cluster is gone: every remote task sent and not answered fails with `why`.
  void fail_remote(const ipc::error_info& why);
  /// When the earliest task timeout falls due (time_point::max() if none).
  /// Lock-free: the I/O thread reads it to know how long it may sleep.
  std::chrono::steady_clock::time_point next_timeout() const noexcept {
    return std::chrono::steady_clock::time_point(
        std::chrono::steady_clock::duration(next_timeout_.load(std::memory_order_acquire)));
  }
  /// Ends every task whose .timeout(d) passed by `now`: its results fail with
  /// timeout_error and its process is killed (what else ran there is retried
  /// uncharged, as for cancel).
  void expire_timeouts(std::chrono::steady_clock::time_point now);
  /// The machine's memory was above `threshold` (memory_monitor): kills the
  /// pool worker running the most recently sent task, retriable ones first. One
  /// at a time: nothing while the last one killed has not died yet. Memory is
  /// read (`read_usage`) once that is known, under the scheduler's lock: a
  /// reading taken before the last victim died would still count its memory.
  /// @returns whether a process was killed.
  bool kill_for_memory(const std::function<memory_usage()>& read_usage, double threshold);

  // ---- actors
  /// Reserves `name` for the actor whose handles point to `entry`; false if taken.
  bool reserve_name(const std::string& name, object_entry* entry);
  /// The actor named `name`, holding one more count, or nullptr.
  /// @throws usage_error if it is of another class
  object_entry* find_actor(const std::string& name, std::uint64_t class_tag);
  /// A handle's entry (one count) for another driver's actor `key`, found by
  /// name on the cluster: its calls go there; its handles going does not end it.
  object_entry* adopt_remote_actor(const std::string& key, std::uint64_t class_tag, const std::string& name);
  /// The same under `id`, for a handle that came inside a task's arguments
  /// (`label`: what messages call it).
  object_entry* adopt_remote_actor(const std::string& key, std::uint64_t class_tag, const std::string& label,
                                   const object_id& id);
  /// Another driver killed this driver's actor `key` (found by its name), or
  /// the head refused one this node offered (`why`): it is dead here too.
  void remote_actor_killed(const std::string& key, const std::string& why = {});
  /// The head's answer to the offer of named actor `key` (every one waiting,
  /// if `key` is empty: the cluster is gone): it starts, or, its name taken
  /// there (`why`), it dies without its constructor having run.
  void name_answered(const std::string& key, const std::string& why);
  /// The handle's entry (one more count) of the actor of this node offered to
  /// the cluster as `key` (cluster.hpp's on_driver_key), or nullptr once it is gone.
  object_entry* offered_actor(const std::string& key);
  /// The cluster's answer to a worker's get_actor (find_actor_later): a handle
  /// for the actor `key` of the cluster, or `error`, or neither (no such
  /// actor). A worker gone meanwhile gets nothing.
  void answer_actor_lookup(int slot, std::uint64_t generation, std::uint64_t request, const std::string& key,
                           std::uint64_t class_tag, const std::string& name, const std::string& error);
  void kill_actor(object_entry* e);
  /// The actor lost its last handle (on any thread): it stops.
  void retire(actor_record* a);
  std::map<std::string, double> resources(bool available_only) const;

  // ---- processes and their messages (from the I/O side)
  worker_link& link(int slot) { return *links_[static_cast<std::size_t>(slot)]; }
  /// Slots [0, slots_in_use()) may hold a process. Thread-safe.
  int slots_in_use() const noexcept { return slots_in_use_.load(std::memory_order_acquire); }
  /// Handles one message from `w`. @throws ipc::protocol_error for a malformed
  /// or impossible one (the caller then calls `malformed`).
  void handle(worker_link& w, const ipc::frame& f);
  /// `w` sent garbage: it is killed (its tasks are retried) and not read any more.
  void malformed(worker_link& w, const std::string& why);
  /// The process for `slot` started, with these pipes (fds now owned by the link).
  void spawned(int slot, pid_t pid, int to_process, int from_process);
  /// No process could be started for `slot`.
  void spawn_failed(int slot, const std::string& why);
  /// Why the latest process could not be started ("" if none failed).
  const std::string& last_spawn_failure() const noexcept { return last_spawn_failure_; }
  /// Asks again for pool processes that could not be started.
  void respawn_missing();
  /// The process in `w` is gone (everything it sent was handled): its tasks are
  /// retried or fail, what it held goes back, a new one is asked for.
  /// `crash_stack`: the stack its crashing thread wrote, if any.
  void exited(worker_link& w, int status, std::string crash_stack = {});
  /// The node cannot run anything any more (its zygote is gone): every task and
  /// actor fails with `why`, and every later one too.
  void lose_node(const std::string& why);
  bool lost() const noexcept { return lost_.has_value(); }
  /// `w`'s pipe has room again.
  void writable(worker_link& w);
  /// Writes what was batched for workers.
  void flush_dirty();

  // ---- shutdown and introspection
  /// No process is replaced from now on.
  void stopping() noexcept { stopping_ = true; }
  /// Drops every task, actor and hold (all processes are gone).
  void clear();
  detail::runtime_counters counters() const {
    return {tasks_finished_.load(), task_retries_.load(), processes_lost_.load(), actor_restarts_.load(),
            extras_started_.load(), sent_ahead_.load(), taken_back_.load()};
  }
  std::size_t pool_size() const noexcept { return cfg_.pool_size; }
  const task_graph& graph() const noexcept { return graph_; }
  /// Tasks (and calls) whose results failed, since the start.
  std::uint64_t tasks_failed() const noexcept { return tasks_failed_.load(std::memory_order_relaxed); }
  /// What `manta status` shows of the scheduler: processes, tasks, actors.
  nlohmann::json status_report() const;
  /// Per-function counts and run times (manta summary, /metrics).
  nlohmann::json function_report() const;
  /// Names every live process in the timeline ("worker 2", "actor Counter").
  void name_processes() const;
  /// For each worker process that made objects: its ids' creator half and the
  /// highest sequence number it has sent (every lower one was sent before).
  std::vector<std::pair<std::uint64_t, std::uint64_t>> worker_id_ranges() const {
    return {worker_ids_.begin(), worker_ids_.end()};
  }
  /// Pids of the processes holding a ref to each object they hold.
  std::unordered_map<object_id, std::vector<pid_t>> holders() const;
  placement& placer() noexcept { return place_; }
  /// The answer to host_.make_room: the extent taken for the request (or
  /// no_offset, and why not). A worker gone meanwhile: it goes back.
  void room_made(int slot, std::uint64_t generation, std::uint64_t request, std::uint64_t offset,
                 const std::string& why, bool disk_failed);
  /// The answer to host_.restore: `entries` were read back and pinned (`ok`;
  /// the pins and the counts given are dropped here once what waited took its
  /// own), or entries[failed_at] could not be (`why`: what waits for it fails,
  /// object_store_full).
  void restored(const std::vector<object_entry*>& entries, bool ok, std::size_t failed_at, const std::string& why);
  /// Whether workers are writing values into extents now (sealed soon, and
  /// then spillable): a reader that finds no room to read one back may wait.
  bool values_being_written() const { return others_writing(-1); }
  /// How long a room request waits for readers to unpin, and how often it
  /// looks; how long it waits for writers at most.
  static constexpr std::chrono::milliseconds alloc_unpin_wait{2000}, alloc_retry_every{5}, alloc_writers_wait{10'000};

 private:
  /// Adds `t`'s run, as `w` reported it, to the timeline.
  void record(const worker_link& w, const task_spec& t, const ipc::task_done& m);
  // scheduler.cpp: tasks
  void register_task(task_spec* t);
  /// `t`'s arguments are sealed: into the ready queue, or off to the cluster.
  void enqueue(task_spec* t);
  /// Sends `t` to `w`, or fails it if an argument cannot be read back.
  /// @returns false if it stays where it is: an argument is being read back
  /// from the spill file (with `may_defer`; else that is done here, at once).
  /// `ahead`: `w` is busy, and `t` starts once `w` is free unless taken back.
  bool send_task(worker_link& w, task_spec& t, bool may_defer = true, bool ahead = false);

  // look_ahead.cpp: a task sent ahead to a busy worker, so that no round trip
  // to the driver lies between its current task and the next; taken back for
  // a worker that would otherwise be idle, or when its worker waits.
  /// Puts `t`'s key in a free ahead word of `w`'s process (false: none free).
  bool mark_ahead(worker_link& w, task_spec& t);
  /// `t` was sent ahead and has not started: it leaves its worker (whose
  /// process will skip it) for the front of the ready queue. False if it
  /// started (or was not sent ahead): it stays.
  bool take_back(task_spec& t);
  /// `t` ran (or its worker died): it is no longer ahead.
  void not_ahead(task_spec& t) noexcept;
  /// Workers idle after a dispatch take tasks sent ahead to busy ones.
  void steal_for_idle();
  /// `w` waits in get: what was sent ahead to it goes back (it would run
  /// nested above the waiting task, holding it up once its objects come).
  /// @returns whether any did.
  bool take_back_from(worker_link& w);
  /// A request for room waits for readers: tasks sent ahead that pin stored
  /// arguments while they wait behind another let them go.
  void take_back_pinning();
  /// A task waits for `ids`: their producers sent ahead to other workers come
  /// back, to run on the waiting one's lent CPU or on a free worker.
  void take_back_awaited(std::span<const object_id> ids);
  /// `t` was sent ahead and its process has not started it (what the tools
  /// show as queued).
  bool not_started_ahead(const task_spec& t) const noexcept;
  int ahead_ = 0;  ///< tasks with `ahead` set
  std::atomic<std::uint64_t> sent_ahead_{0}, taken_back_{0};
  enum class pinned { all, deferred, failed };
  /// Pins `t`'s stored arguments. One spilled is read back off the lock
  /// (deferred) unless `!may_defer`; `why` says why one cannot be (failed).
  pinned pin_inputs(task_spec& t, bool may_defer, std::string& why);
  /// What waits for each object being read back: workers to tell where it
  /// lies. Tasks in the ready queue and actors' calls are sent by the
  /// dispatch that follows.
  struct restore_wait {
    std::vector<subscriber> subscribers;
    int jobs = 0;  ///< restore jobs under way that bring it back
  };
  /// Asks the host to read `entries` back and hold them together.
  void request_restore(const std::vector<object_entry*>& entries);
  std::unordered_map<object_entry*, restore_wait> restoring_;
  /// While restored() dispatches: objects that could not be read back, and why.
  std::unordered_map<object_entry*, std::string> restore_failed_;
  void unpin_inputs(task_spec& t);
  /// Seals `e` with the value at `loc` (in `from`'s extent, if large).
  void seal(object_entry* e, const ipc::value_location& loc, std::vector<object_id> contained,
            worker_link* from);
  /// Fails the task's results and everything depending on them; the task itself
  /// is finished unless `in_flight` (then it ends when its process reports or dies).
  void fail_task(task_spec* t, ipc::failure_ptr why, bool in_flight = false);
  void fail_task(task_spec* t, ipc::error_info why, bool in_flight = false) {
    fail_task(t, ipc::make_failure(std::move(why)), in_flight);
  }
  /// `from`: the slot whose task asked, or -1 (the driver). A task running in
  /// the asking process is not killed with it (the asker would die, be retried,
  /// and ask again): its results fail now and it runs to its end.
  void cancel_task(task_spec* t, int from = -1);
  /// Fails `t` with `why` and stops it as cancel_task does; then cancels its children.
  void stop_task(task_spec* t, const ipc::error_info& why, int from);
  /// An actor call past its timeout: it fails, and its actor's process is killed.
  void time_out_call(task_spec* t, worker_link& host, const std::string& limit);
  void finish_task(task_spec* t);
  void drop_grant(worker_link& w, task_spec& t);
  void notify(const subscriber& s, object_entry* e);
  void mark_dirty(worker_link& w, bool now);
  void flush(worker_link& w);
  void send_to(worker_link& w, const auto& m, bool now) {
    ipc::append(w.out.buffer(), m);
    mark_dirty(w, now);
  }

  // handlers.cpp: messages from workers
  void handle_message(worker_link& w, const ipc::frame& f);
  void on_task_done(worker_link& w, const ipc::task_done& m);
  void on_submit(worker_link& w, const ipc::submit& m);
  void on_put(worker_link& w, const ipc::put& m);
  void on_block(worker_link& w, const ipc::block& m);
  void on_unblock(worker_link& w, const ipc::unblock& m);
  void on_alloc(worker_link& w, const ipc::alloc_request& m);
  /// Whether a worker other than `slot` writes a value into an extent and runs
  /// on (none of its calls waits): once sealed, that value may be spilled.
  bool others_writing(int slot) const;
  /// Answers the room requests that waited for others' writes (on_alloc):
  /// granted now, or refused once no other writer is left to wait for.
  void retry_waiting_allocs();
  void schedule_alloc_retry();
  void on_find_actor(worker_link& w, const ipc::find_actor& m);
  /// The refs inside a value `w` sent (read from the arena when it put a long
  /// list there), after checking that the value lies where it may.
  std::vector<object_id> read_contained(worker_link& w, const ipc::id_list& ids,
                                        const ipc::value_location& loc);

  // actors.cpp
  /// A constructor was submitted: its actor exists (handles work) from now on;
  /// it starts once the constructor's arguments are sealed.
  /// @returns false if its name is taken: the actor is dead, and `ctor` gone
  bool create_actor(task_spec* ctor);
  void start_constructed(task_spec* ctor);
  void start_actor(actor_record& a);
  void start_waiting_actors();
  void send_constructor(worker_link& host, actor_record& a);
  void constructed(actor_record& a, const ipc::error_info* error);
  void actor_dispatch(actor_record& a);
  void actor_host_died(worker_link& w, const std::string& cause);
  void actor_dead(actor_record& a, const ipc::error_info& why);
  void give_back_resources(actor_record& a);
  void forget_actors();
  ipc::error_info actor_error(const actor_record& a, const std::string& what) const;
  int free_host_slot();

  // processes.cpp
  void request_spawn(int slot);
  /// The waiting rule: while a worker's every task waits in get/wait, its CPU
  /// is lent, and a ready task that no worker can take (it may not nest there)
  /// gets an extra worker, one per such waiting worker (at most
  /// max_extra_workers). An extra worker idle while there are more of them
  /// than waiting workers ends: the pool returns to its size once the waits end.
  /// `starved`: a ready task fits the free resources but found no worker.
  void balance_extra_workers(bool starved);
  /// `w`, an extra worker, is gone: its slot may host anything again.
  void forget_extra(worker_link& w);
  /// Extra workers alive or starting, not retiring (their slots).
  std::vector<int> extras_;
  /// How long a surplus extra worker stays idle before it ends (Ray's idle
  /// workers: 1 s); after a failed start, how long none is started.
  static constexpr std::chrono::milliseconds extra_idle_limit{1000};
  /// When a surplus idle extra worker is due to end (time_point::max(): none).
  std::chrono::steady_clock::time_point extras_check_at_ = std::chrono::steady_clock::time_point::max();
  std::chrono::steady_clock::time_point extra_spawn_after_{};
  void close_link(worker_link& w);
  void pool_worker_died(worker_link& w, int status);
  /// The keys of the tasks `w`'s process was executing (not merely queued), as
  /// it recorded them in its control slot.
  std::vector<std::uint64_t> running_keys(const worker_link& w) const;
  /// The tasks `parents` ran in the process `pid` that died (`cause`): what they
  /// submitted that nothing else holds a ref to is cancelled, with what that submitted.
  void cancel_orphans(const std::vector<std::uint64_t>& parents, pid_t pid, const std::string& cause);

  config cfg_;
  directory& dir_;
  object_store& store_;
  resource_ledger ledger_;
  scheduler_host& host_;
  lane remote_;  ///< remote tasks sent to the cluster, not answered yet (outlives graph_)
  lane remote_waiting_;  ///< remote tasks ready to go, while max_remote_in_flight are out
  /// Remote tasks out at once: the cluster's queues (and the copies of their
  /// arguments) stay bounded however many are submitted.
  static constexpr std::size_t max_remote_in_flight = 256;
  static constexpr std::size_t max_remote_bytes = 256u << 20;  ///< their arguments' bytes
  /// At least the arguments' bytes of the tasks in remote_: added to as each
  /// goes, counted exactly only when it would hold one back.
  std::size_t remote_bytes_bound_ = 0;
  /// The bytes a remote task carries: its blob, and its stored arguments sent as
  /// values (one sent by reference travels once per node, not with the task).
  static std::size_t carried_bytes(const task_spec& t);
  /// Sends waiting remote tasks while fewer than max_remote_in_flight are out.
  void send_waiting_remote();
  bool sending_remote_ = false;  ///< send_waiting_remote is on the stack (it may dispatch a remote actor's calls)
  /// A remote actor's constructor failed to go, or failed there: the actor is dead.
  void remote_constructor_failed(task_spec* ctor, const ipc::error_info& why);
  task_graph graph_;
  placement place_;
  std::vector<std::unique_ptr<worker_link>> links_;
  /// Room requests that found none while other workers were still writing values.
  struct waiting_alloc {
    int slot;
    std::uint64_t generation, request, size;
    std::chrono::steady_clock::time_point since;  ///< it waits at most alloc_writers_wait from then
    /// When it stops waiting for readers to unpin (max until it waits for them).
    std::chrono::steady_clock::time_point readers_until = std::chrono::steady_clock::time_point::max();
    bool spilling = false;  ///< the spiller makes room for it now (room_made answers)
    int spills_failed = 0;  ///< spills that made no room for it (a reader took the object meanwhile, or the disk is full)
  };
  /// What `a`, which found no room, does now: the spiller makes room (if
  /// spilling may, and did not just fail with `spill_failure`), it waits
  /// (waits_for_room), or it is refused.
  void find_room(waiting_alloc a, std::chrono::steady_clock::time_point now, const std::string& spill_failure);
  static constexpr int max_spill_tries = 64;  ///< (and alloc_writers_wait at most)
  std::vector<waiting_alloc> waiting_allocs_;
  /// When the waiting room requests are tried again (readers unpin without a message).
  std::chrono::steady_clock::time_point alloc_retry_at_ = std::chrono::steady_clock::time_point::max();
  /// Whether `a`, which found no room, waits on: for values other workers write
  /// (sealed soon, then spillable), or up to a limit for readers to unpin enough.
  bool waits_for_room(waiting_alloc& a, std::chrono::steady_clock::time_point now);
  std::atomic<int> slots_in_use_{0};
  std::uint64_t sent_seq_ = 0;
  std::vector<int> dirty_;
  std::atomic<std::uint64_t> next_key_{0};
  std::uint64_t next_process_number_ = 0;
  std::vector<std::unique_ptr<actor_record>> actors_;
  std::unordered_map<std::string, object_entry*> actor_names_;  ///< counted
  std::vector<actor_record*> waiting_actors_;  ///< waiting for resources
  std::optional<ipc::error_info> lost_;
  std::string last_spawn_failure_;
  /// Tasks sent with a timeout, earliest first; an entry whose task finished,
  /// moved or whose process changed is dropped when it falls due.
  struct timeout_entry {
    std::chrono::steady_clock::time_point due;
    std::uint64_t key;
    int slot;
    std::uint64_t generation;
    bool operator>(const timeout_entry& o) const noexcept { return due > o.due; }
  };
  std::priority_queue<timeout_entry, std::vector<timeout_entry>, std::greater<>> timeouts_;
  std::atomic<std::chrono::steady_clock::rep> next_timeout_{
      std::chrono::steady_clock::time_point::max().time_since_epoch().count()};
  void note_next_timeout() noexcept;
  bool stopping_ = false;
  std::atomic<std::uint64_t> tasks_finished_{0}, task_retries_{0}, processes_lost_{0}, actor_restarts_{0};
  std::atomic<std::uint64_t> extras_started_{0};
  std::atomic<std::uint64_t> tasks_failed_{0};
  function_stats functions_;
  /// Ids made by workers: creator half -> highest sequence seen (manta memory's scan).
  std::unordered_map<std::uint64_t, std::uint64_t> worker_ids_;
  void note_worker_id(const object_id& id) {
    std::uint64_t& last = worker_ids_[id.hi];
    last = std::max(last, id.lo);
  }
  // Scratch for send_task.
  std::vector<ipc::value_location> send_args_;
  std::vector<object_id> send_ids_;
};

}  // namespace manta::runtime

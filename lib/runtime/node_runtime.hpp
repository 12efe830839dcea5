// runtime/node_runtime.hpp: the runtime inside the driver. It owns the arena,
// the object directory, the zygote and the scheduler, and answers the calls
// user threads make (put, get, wait, submit...). An I/O thread (or a user
// thread waiting in get, which takes the poll role to save a wake-up) reads
// what processes send and hands it to the scheduler; worker output goes
// through its own forwarding thread.
//
// Locks, always taken in this order: the process's context lock (shared, by
// every entry point; process/context.hpp), then poll_mu_ (the poll role: the
// worker pipes' inboxes, the zygote socket's replies), then mu_ (the scheduler,
// and everything it owns). The object store and directory have their own
// locks below all of these.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <manta/detail/introspect.hpp>
#include <manta/errors.hpp>
#include <manta/options.hpp>

#include "observe/control_socket.hpp"
#include "observe/metrics_endpoint.hpp"
#include "observe/timeline.hpp"
#include "process/context.hpp"
#include "process/control.hpp"
#include "runtime/cluster_port.hpp"
#include "runtime/directory.hpp"
#include "runtime/handoff.hpp"
#include "runtime/memory_monitor.hpp"
#include "runtime/object_store.hpp"
#include "runtime/output_forwarder.hpp"
#include "runtime/scheduler.hpp"
#include "runtime/spiller.hpp"
#include "runtime/zygote_link.hpp"
#include "store/arena.hpp"

namespace manta::runtime {

class node_runtime final : public process::process_context, public scheduler_host {
 public:
  explicit node_runtime(const options& opts);
  ~node_runtime() override;

  /// First half of shutdown: stop threads and wake every waiter (usage_error).
  void begin_stop();
  /// Second half: end every process, release every object (call with the
  /// context lock held exclusively).
  void finish_stop();

  // ---- process_context (any thread)
  detail::ref_node* put(const detail::encoded_value& v) override;
  detail::extent allocate_extent(std::size_t bytes) override;
  void free_extent(const detail::extent& x) noexcept override;
  detail::ref_node* put_extent(std::uint64_t tag, const detail::extent& x, std::size_t size) override;
  detail::object_data fetch(detail::ref_node* n, detail::deadline until) override;
  void wait(std::span<detail::ref_node* const> nodes, std::size_t num, detail::deadline until,
            std::vector<bool>& ready) override;
  detail::ref_node* ref_from_id(const object_id& id) override;
  detail::ref_node* find_actor(const std::string& name, std::uint64_t class_tag) override;
  void kill_actor(detail::ref_node* node) override;
  void cancel_producer(detail::ref_node* node) override;
  std::vector<int> gpu_ids() override { return {}; }
  std::map<std::string, double> resources(bool available_only) override;
  void release(detail::ref_node* n) noexcept override;
  void repin(detail::ref_node* n) noexcept override;
  void unpin(detail::ref_node* n) noexcept override;
  /// Gives back an object send_remote pinned and counted for the cluster's
  /// sender (any thread holding no lock of the runtime's).
  void sent(detail::ref_node* n) noexcept;
  void submit(detail::task_request&& request, detail::ref_node** returns) override;
  std::size_t worker_count() const noexcept override { return pool_size_; }
  std::uint32_t epoch() const noexcept override { return epoch_; }
  bool is_worker() const noexcept override { return false; }

  // ---- introspection (tests and tools)
  detail::runtime_counters counters() const { return sched_->counters(); }
  /// pids of the zygote and live workers.
  /// The zygote's pid first, then each live worker's and actor host's.
  std::vector<pid_t> process_ids();
  store::arena& arena() noexcept { return *arena_; }
  detail::spill_counters spilling() const { return store_->stats(); }
  std::size_t object_count() const { return dir_->size(); }
  std::size_t task_count();
  /// The node lost its zygote: nothing can run here any more (lost_why says why).
  bool lost() const noexcept { return lost_.load(std::memory_order_acquire); }
  const std::string& lost_why() const noexcept { return lost_why_; }
  /// Where the tools reach this runtime (empty if it could not listen).
  const std::string& address() const { return socket_; }

  // ---- the cluster (runtime/cluster_port.hpp)
  /// Joins a cluster (init, once constructed): from now on the runtime sends
  /// there what it cannot run, and answers it.
  void attach_cluster(std::unique_ptr<cluster_port> cluster);
  /// The cluster has work for the I/O thread (cluster_port::run_io). Any thread.
  void cluster_io_due();
  /// A node of a cluster: keeps a driver's object under the driver's `id`, so
  /// that refs to it inside values resolve here. @throws what put throws
  detail::ref_node* import_object(const object_id& id, const detail::encoded_value& v);
  /// The same for a value written into `x` (allocate_extent), which it takes
  /// over (freed if this throws), holding the objects `contained` names.
  detail::ref_node* import_extent(const object_id& id, std::uint64_t tag, const detail::extent& x,
                                  std::span<const object_id> contained = {});
  /// Room for a value arriving from the cluster, written there as its bytes
  /// come (on a link's thread): only free room, never spilling for it (a disk
  /// write would stall that thread's heartbeats), and only while a quarter of
  /// the arena stays free for what runs here (a value waiting here cannot be
  /// spilled). Nullopt if there is none.
  std::optional<detail::extent> landing_room(std::size_t bytes);
  /// The same for an object that failed (a driver keeps one a node's result names).
  detail::ref_node* import_failed(const object_id& id, const ipc::error_info& why);
  /// A node of a cluster: a handle (one count) under `id` for the actor `key`
  /// that lives on a node of the cluster, as a task's arguments hold it; its
  /// calls go through the head, and its handles going here do not end it.
  /// @param owned  a handle handed over in a result (returned_handle::owned):
  ///                its handles going here end it, as this driver's own would
  detail::ref_node* borrow_actor(const object_id& id, const std::string& key, std::uint64_t class_tag,
                                 const std::string& label, bool owned = false);
  /// A handle handed over to this driver (returned_handle::owned): if it
  /// borrowed that actor before, it owns it now (its last handle ends it).
  void own_actor(detail::ref_node* handle);
  /// The head's answer to the offer of named actor `key` (from the applier thread).
  void offer_answered(const std::string& key, const std::string& why);
  /// Another driver killed this driver's actor `key`, or the head refused it
  /// (`why`), from the applier thread.
  void remote_actor_killed(const std::string& key, const std::string& why);
  /// The handle (one count) of this node's actor offered to the cluster as
  /// `key`, for a call from another node; nullptr once it is gone.
  detail::ref_node* hosted_actor(const std::string& key);
  std::vector<manta::node_info> cluster_nodes() override;

  /// A cluster's serving loop waits for its results as events, not by polling:
  /// it reads seals_seen(), marks what it waits for (watch_seal: its seal then
  /// wakes waiters), then looks (in that order: a seal before the mark is seen
  /// by the look, one after it moves the count), and waits in
  /// wait_sealed(seen) until an entry marked by anyone is sealed after that,
  /// or `interrupted()` (looked at whenever the wait wakes: wake_waiters()
  /// wakes it).
  std::uint32_t seals_seen() const noexcept;
  void watch_seal(detail::ref_node* n) noexcept;
  void wait_sealed(std::uint32_t seen, const std::function<bool()>& interrupted);
  /// Wakes the threads sleeping until an object is sealed (they look again).
  void wake_waiters() { dir_->wake_all(); }

  /// While one lives, this thread's submissions wait in the queue; they are
  /// registered and dispatched together when it ends: the serving loops of a
  /// cluster submit what came in one round under one lock, not one each.
  class submission_batch {
   public:
    explicit submission_batch(node_runtime& r);
    ~submission_batch();
    submission_batch(const submission_batch&) = delete;
    submission_batch& operator=(const submission_batch&) = delete;

   private:
    node_runtime& r_;
    bool outer_;
  };

 private:
  /// Holds mu_; on release, takes in the submissions queued meanwhile.
  class scheduler_lock {
   public:
    explicit scheduler_lock(node_runtime& r) : r_(r) { r_.mu_.lock(); }
    ~scheduler_lock() {
      r_.mu_.unlock();
      r_.take_submissions();
    }
    scheduler_lock(const scheduler_lock&) = delete;
    scheduler_lock& operator=(const scheduler_lock&) = delete;

   private:
    node_runtime& r_;
  };

  /// Counts a user call in progress so shutdown waits for it; refuses calls
  /// once stopping, and work once the node is lost.
  class call_guard {
   public:
    explicit call_guard(node_runtime& r, bool needs_node = false);
    ~call_guard() {
      --held_here;
      r_.active_calls_.fetch_sub(1, std::memory_order_acq_rel);
    }
    call_guard(const call_guard&) = delete;
    call_guard& operator=(const call_guard&) = delete;

    /// The runtime stops under this thread's call: in a process that is
    /// exiting, the thread lets go of its calls and parks; otherwise usage_error.
    [[noreturn]] static void stopped(node_runtime& r, const char* why);

   private:
    static thread_local int held_here;  // this thread's guards (calls nest)
    node_runtime& r_;
  };

  // scheduler_host (called with mu_ held)
  void spawn(int slot, std::uint64_t process_number) override;
  void kill(pid_t pid) override;
  void watch_writable(worker_link& w, bool on) override;
  void wake() override { wake_io(); }
  std::optional<ipc::error_info> send_remote(task_spec& t) override;
  bool remote_room(const task_spec& t, std::size_t in_flight) override;
  bool cluster_room(const detail::task_options& o, std::size_t in_flight) override;
  void end_remote_actor(const std::string& key, bool kill) override;
  void cancel_remote(std::uint64_t key) override;
  void object_settled(object_entry* e) override;
  bool find_actor_later(int slot, std::uint64_t generation, std::uint64_t request, const std::string& name,
                        std::uint64_t class_tag, std::string& error) override;
  bool names_in_cluster() override;
  void offer_named(actor_record& a) override;
  void make_room(int slot, std::uint64_t generation, std::uint64_t request, std::uint64_t size) override {
    spiller_->post({spiller::job::kind::room, slot, generation, request, size, {}});
  }
  void restore(std::vector<object_entry*> entries) override {
    spiller_->post({spiller::job::kind::restore, -1, 0, 0, 0, std::move(entries)});
  }
  /// Before an object of another runtime is kept here under `id`: the
  /// workers' control block lets them take such ids from then on.
  void accept_import(const object_id& id);
  /// put, under `id`.
  detail::ref_node* put_as(const object_id& id, const detail::encoded_value& v);
  /// The object `id` of `size` bytes written into `x`, which it takes over
  /// (counted once), holding the objects `contained` names. @throws usage_error
  /// if one of them is not here (`x` is then not taken over)
  detail::ref_node* seal_extent(const object_id& id, std::uint64_t tag, const detail::extent& x, std::size_t size,
                                std::span<const object_id> contained = {});
  bool cluster_can_run(const task_spec& t) override;
  /// The I/O thread: what the cluster asked it to do (cluster_io_due).
  void run_cluster_io();

  // node_runtime.cpp: objects and submissions
  object_entry* checked(detail::ref_node* n);
  /// checked() of each.
  std::vector<object_entry*> checked_all(std::span<detail::ref_node* const> nodes);
  template <class Done>
  bool wait_until(Done done, std::span<object_entry* const> watch, detail::deadline until);
  /// Pins `e` for a reader, waiting (until `until`) for room to read it back
  /// from the spill file while values being written or read hold that room.
  void pin_for_reader(object_entry* e, detail::deadline until);
  /// Registers queued submissions if the scheduler is free; if it is not, its
  /// holder does when it lets go (flat combining: submitters never wait on mu_).
  void take_submissions();
  void register_submissions();

  /// The arena's warmer, asking before each step whether a core is idle and memory not short.
  void start_arena_warming();

  // report.cpp: what the tools ask on the control socket
  /// Answers "status", "summary", "memory [limit=N] [sort=size|age] [group=made_by|where|holder]"
  /// or "timeline [seconds]" with a JSON document.
  std::string answer(const std::string& request);
  std::string status_json();
  /// What `manta memory` asks for: which objects, in which order, grouped how.
  struct memory_query {
    std::size_t limit = 0;  ///< objects listed at most (0: every one)
    std::string sort;       ///< "size" (largest first), "age" (oldest first), "" (as found)
    std::string group_by;   ///< "", "made_by", "where" or "holder": totals per group
  };
  std::string memory_json(const memory_query& q);
  /// Every object in the directory, each held by one more count.
  std::vector<object_entry*> scan_directory();
  std::string timeline_json(double seconds);

  // poller.cpp: the I/O thread and the poll role
  void io_loop();
  int poll_events(int timeout_ms);
  /// Reads what `w` sent; with `to_eof`, until its pipe closes (it is dead).
  /// @returns false if it stopped with data left to read.
  bool drain_worker(worker_link& w, bool to_eof = false);
  /// Stops processes from ringing the doorbell while this thread polls; false if
  /// the I/O thread was awake anyway. Undone by end_borrowed_poll.
  bool begin_borrowed_poll(std::uint32_t& idle_word);
  void end_borrowed_poll(std::uint32_t idle_word);
  /// Ends the tasks whose timeout passed; returns how long the I/O thread may
  /// sleep before the next one falls due (ms, -1: none).
  int expire_due_timeouts();
  /// Reads the zygote's replies: processes started, exited, or the zygote gone.
  void handle_zygote();
  void wake_io();

  options opts_;
  std::uint32_t epoch_;
  pid_t pid_;
  std::string log_dir_;
  std::string socket_;  ///< the control socket's path (set before its thread starts), or empty
  std::string crash_dir_;  ///< where workers write a crash's stack (log_dir, if private), or empty
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  /// Tasks, spills and deaths, while recording (MANTA_TIMELINE, or manta timeline).
  observe::timeline timeline_;
  std::string timeline_path_;  ///< MANTA_TIMELINE: written at shutdown
  std::mutex capture_mu_;      ///< one `manta timeline` capture at a time
  std::mutex scan_mu_;         ///< scan_from_
  /// Per id creator (the driver, each worker process): the first sequence
  /// number that may still be alive, from the last directory scan.
  std::unordered_map<std::uint64_t, std::uint64_t> scan_from_;
  std::size_t pool_size_ = 0;
  std::unique_ptr<store::arena> arena_;
  std::unique_ptr<object_store> store_;
  std::unique_ptr<directory> dir_;
  process::control_block* control_ = nullptr;
  // Made after the zygote is forked: the forwarder starts a thread, and the
  // zygote must be forked while the process has none of manta's.
  std::unique_ptr<zygote_link> zygote_;
  std::unique_ptr<output_forwarder> output_;
  std::unique_ptr<scheduler> sched_;  ///< guarded by mu_
  std::unique_ptr<memory_monitor> monitor_;  ///< options.memory_threshold; made last, stopped first
  /// The store's disk work for the scheduler (make_room, restore), off mu_.
  std::unique_ptr<spiller> spiller_;
  /// A job of the spiller done (on its thread): hands the outcome to the scheduler.
  void spiller_answered(const spiller::job& j, const spiller::outcome& out);
  std::unique_ptr<observe::control_server> address_;  ///< the tools' socket; stopped before the rest
  /// /metrics over HTTP when MANTA_METRICS_ADDRESS asks for it; stopped after address_.
  std::unique_ptr<observe::metrics_endpoint> metrics_;
  /// Where it listens (set before any thread that reads it starts, never changed).
  std::string metrics_address_;
  /// Binds (before the tools' socket, whose status names the address), then
  /// serves (after it: a scrape reads what that block sets).
  void bind_metrics_endpoint();
  void serve_metrics_endpoint();
  /// The cluster this runtime joined, if it did (set once, before any
  /// submission; read and let go under the scheduler's lock).
  std::unique_ptr<cluster_port> cluster_;
  std::atomic<bool> cluster_io_due_{false};
  /// The cluster's membership works on the runtime's state, under its locks.
  friend class cluster_member;

  std::atomic<bool> stopping_{false};
  std::atomic<bool> lost_{false};  ///< the node lost its zygote: nothing can run any more
  std::string lost_why_;           ///< why; written before lost_ is set
  // Written by user threads on every call: a cache line of their own, away
  // from the read-mostly flags above and the submission queue below.
  alignas(64) std::atomic<int> active_calls_{0};
  /// Pins user threads hold on arena objects (a get decoding, a view): while
  /// any remain at shutdown, the arena stays mapped (they read it).
  std::atomic<std::int64_t> user_pins_{0};
  /// From user threads, not yet registered (owned).
  alignas(64) intrusive_handoff<task_spec, &task_spec::next_submitted> submissions_;
  locked_handoff<actor_record*> retired_;  ///< actors whose last handle went, to stop
  /// Objects nodes of the cluster hold copies of, freed here: the head tells those nodes.
  locked_handoff<object_id> freed_remote_;

  std::mutex mu_;       // the scheduler
  std::mutex poll_mu_;  // the poll role: inboxes, the zygote socket's replies
  int epoll_fd_ = -1;             ///< zygote socket, full worker pipes
  int doorbell_[2] = {-1, -1};    ///< processes and wake_io write; only the I/O thread reads
  std::uint32_t processed_seq_ = 0;  ///< driver_seq up to which every pipe was drained
  std::uint32_t idle_generation_ = 0;
  std::atomic<bool> zygote_watched_{false};  ///< its socket is in the epoll set
  std::thread io_thread_;
  bool stopped_ = false;
};

}  // namespace manta::runtime

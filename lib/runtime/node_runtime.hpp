// runtime/node_runtime.hpp: the runtime inside the driver. It owns the arena, the
// object directory, the zygote and the worker links; a scheduler (under one mutex)
// turns submitted tasks into run_task messages once their arguments are sealed;
// an I/O thread (or a user thread waiting in get) reads what processes send back.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <tbb/concurrent_queue.h>

#include <manta/errors.hpp>
#include <manta/options.hpp>
#include <manta/registry.hpp>

#include "ipc/channel.hpp"
#include "ipc/messages.hpp"
#include "process/context.hpp"
#include "process/control.hpp"
#include "process/zygote.hpp"
#include <manta/detail/introspect.hpp>

#include "runtime/directory.hpp"
#include "runtime/resources.hpp"
#include "store/arena.hpp"

namespace manta::runtime {

struct actor_record;

/// A submitted task, from submission until its results are sealed or it fails.
struct task_spec {
  ~task_spec();
  const std::string& name() const { return options.name.empty() ? fn->name : options.name; }
  /// One CPU and nothing else: such tasks share their worker's CPU and may queue behind each other.
  bool is_default() const { return need.cpu == 1 && need.gpu == 0 && need.custom.empty(); }

  std::uint64_t key = 0;
  const detail::function_info* fn = nullptr;
  detail::call_mode mode = detail::call_mode::call;
  std::uint16_t num_returns = 1;
  std::uint16_t arg_count = 0;
  detail::task_options options;
  std::string args;                     ///< argument blob (process/args_blob.hpp)
  std::vector<object_entry*> deps;      ///< counted
  std::vector<object_entry*> contained; ///< counted
  std::vector<object_entry*> returns;   ///< counted
  int pending_deps = 0;
  int attempts = 0;  ///< runs lost to crashes (or exceptions, with retry_exceptions)
  int worker = -1;   ///< slot it was sent to, while in flight
  demand need;               ///< what it holds while it runs
  std::vector<int> gpus;     ///< GPU ids granted while it runs
  bool charged = false;      ///< non-default tasks: `need` is taken from the ledger
  bool blocked = false;
  bool queued = false;  ///< in ready_
  actor_record* actor = nullptr;       ///< method calls and constructors: the actor
  object_entry* actor_entry = nullptr; ///< method calls: the actor's entry (counted)
  std::uint64_t grant = ipc::no_offset;  ///< extent offered for its result, while in flight
  bool inputs_pinned = false;  ///< its large arguments are kept in the arena (while sent)
  bool cancelled = false;  ///< cancelled while in flight: its results already failed
  std::uint64_t parent = 0;  ///< the task that submitted it from a worker, or 0
};

/// An actor: its process, its queue of calls, what it holds, how it ends.
struct actor_record {
  enum class state { waiting, starting, constructing, alive, dead };
  state st = state::waiting;
  object_entry* entry = nullptr;  ///< what handles point to; null once the last handle is gone
  std::uint64_t class_tag = 0;
  std::string label;              ///< "Counter 'name'" for messages
  std::string name;               ///< registered name, or empty
  detail::task_options options;
  demand need;
  std::vector<int> gpus;
  bool holds_resources = false;
  // The constructor call, kept to run it again after a crash.
  const detail::function_info* ctor = nullptr;
  std::string ctor_args;
  std::uint16_t ctor_arg_count = 0;
  std::vector<object_entry*> ctor_deps;       ///< counted
  std::vector<object_entry*> ctor_contained;  ///< counted
  int host = -1;       ///< slot of its process
  int restarts = 0;
  bool killed = false;
  std::deque<task_spec*> queue;  ///< calls not sent yet, in submission order
  std::unique_ptr<ipc::error_info> death;
  ~actor_record();
};

/// The driver's side of one worker process (or actor host).
struct worker_link {
  enum class state { dead, starting, alive };
  int slot = 0;
  std::uint64_t generation = 0;
  pid_t pid = -1;
  /// Read by pollers without the scheduler mutex: set to alive (release) only
  /// once the pipes are in place.
  std::atomic<state> st{state::dead};
  ipc::outbox out;
  ipc::inbox in;
  int out_fd = -1, in_fd = -1, stdout_fd = -1, stderr_fd = -1;
  std::string stdout_partial, stderr_partial;
  /// Sent and not finished, in the order sent: they finish in that order (queued
  /// behind each other, an actor's calls) or the reverse (nested), mostly.
  std::deque<task_spec*> in_flight;
  int blocked = 0;         ///< in-flight tasks waiting in get/wait
  /// What each blocked task waits on (how many of which objects), innermost
  /// last: its tasks nest on one stack.
  struct wait_state {
    std::size_t needed = 1;
    std::vector<object_id> ids;
  };
  std::vector<wait_state> awaiting;
  int active_default = 0;  ///< in-flight default tasks (1 CPU) not blocked
  int nondefault = 0;      ///< in-flight tasks with other CPU requests
  bool holds_cpu = false;  ///< the CPU its default tasks share is taken
  /// Objects it holds refs to; true once it was told where one lies (which pins it).
  std::unordered_map<object_id, bool> holds;
  std::unordered_map<std::uint64_t, std::uint64_t> extents;  ///< granted, not yet sealed
  std::uint32_t seen_seq = 0;  ///< its outbox_seq when its pipe was last drained
  actor_record* actor = nullptr;  ///< set when the process hosts an actor
  bool input_closed = false, exited = false;
  bool killed_to_cancel = false;  ///< its death retries the other tasks without charging them
  int exit_status = 0;
  bool dirty = false, write_armed = false;
};

class node_runtime final : public process::process_context {
 public:
  explicit node_runtime(const options& opts);
  ~node_runtime() override;

  /// First half of shutdown: stop threads and wake every waiter (usage_error).
  void begin_stop();
  /// Second half: end every process, release every object (call with the
  /// context lock held exclusively).
  void finish_stop();

  // process_context
  detail::ref_node* put(const detail::encoded_value& v) override;
  detail::extent allocate_extent(std::size_t bytes) override;
  void free_extent(const detail::extent& x) noexcept override;
  detail::ref_node* put_extent(std::uint64_t tag, const detail::extent& x,
                               std::size_t size) override;
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
  void repin(detail::ref_node* n) noexcept override { store_->repin(static_cast<object_entry*>(n)); }
  void unpin(detail::ref_node* n) noexcept override { store_->unpin(static_cast<object_entry*>(n)); }
  void submit(detail::task_request&& request, detail::ref_node** returns) override;
  std::size_t worker_count() const noexcept override { return pool_size_; }
  std::uint32_t epoch() const noexcept override { return epoch_; }
  bool is_worker() const noexcept override { return false; }

  detail::runtime_counters counters() const {
    return {tasks_finished_.load(), task_retries_.load(), processes_lost_.load(), actor_restarts_.load()};
  }

  /// pids of the zygote and live workers (tests and tools).
  std::vector<pid_t> process_ids();
  store::arena& arena() noexcept { return *arena_; }
  detail::spill_counters spilling() const { return store_->stats(); }
  std::size_t object_count() const { return dir_.size(); }

 private:
  /// Statistics are kept per function and call mode.
  static std::uint64_t stats_key(const task_spec& t) {
    return t.fn->id ^ (static_cast<std::uint64_t>(t.mode) << 62);
  }
  struct fn_stats {
    double ewma_ns = 0;
    bool known = false;
    std::uint64_t result_bytes = 0;  ///< size of its last single result
    /// Its tasks wait in get/wait: never queue them behind others (a blocked
    /// worker runs what is in its pipe nested, so queued tasks would nest deeply).
    bool blocks = false;
  };

  // ---- objects
  object_entry* checked(detail::ref_node* n);
  object_entry* new_entry(const object_id& id, std::int64_t count);
  object_id next_object_id() noexcept;
  void publish(object_entry* e, std::uint32_t status);
  void wake_waiters();
  template <class Done>
  bool wait_until(Done done, std::span<object_entry* const> watch, detail::deadline until);

  // ---- scheduling (mu_ held)
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
  /// Registers queued submissions if the scheduler is free; if it is not, its
  /// holder does when it lets go (flat combining: submitters never wait on mu_).
  void take_submissions();
  /// Registers what was submitted and not yet taken in.
  void register_submissions();
  void register_task(task_spec* t);
  /// Cancels a task not yet finished (dropped if not sent, its process killed if
  /// running), and the unfinished tasks it submitted.
  void cancel_task(task_spec* t);
  /// Sets what the task needs; why the node can never run it, if so.
  std::optional<std::string> admit(task_spec& t);
  void dispatch();
  worker_link* pick_worker(const task_spec& t);
  /// It was given refs (borrowed, or inside its arguments) reaching an object not sealed yet.
  bool may_wait_on_others(const task_spec& t) const;
  /// All its tasks wait, and the innermost cannot go on yet: it may run more, nested.
  bool lending(const worker_link& w);
  void send_task(worker_link& w, task_spec& t);
  /// Keeps the task's large arguments in the arena while it runs, reading spilled
  /// ones back. @returns why one could not be, if so.
  std::optional<std::string> pin_inputs(task_spec& t);
  void unpin_inputs(task_spec& t);
  void seal(object_entry* e, const ipc::value_location& loc, std::vector<object_id> contained,
            worker_link* from);
  /// Fails the task's results and everything depending on them; the task itself
  /// ends unless `in_flight` (it ends when its process reports or dies).
  void fail_task(task_spec* t, ipc::failure_ptr error, bool in_flight = false);
  void fail_task(task_spec* t, ipc::error_info error, bool in_flight = false) {
    fail_task(t, ipc::make_failure(std::move(error)), in_flight);
  }
  /// The task waits on its arguments no more: it leaves their dependents (but `except`'s).
  void stop_waiting(task_spec* t, object_entry* except = nullptr);
  void finish_task(task_spec* t);
  void take_cpu(worker_link& w, task_spec& t);
  void return_cpu(worker_link& w, task_spec& t);
  /// A task waits in get/wait: its CPU goes back to the ledger until it runs again.
  void lend_cpu(worker_link& w, task_spec& t);
  void reclaim_cpu(worker_link& w, task_spec& t);
  void requeue_front(task_spec* t);
  void enqueue(task_spec* t);
  /// A worker now waits on `awaited`: run their producers there if none started yet.
  void lend_for(worker_link& w, const std::vector<object_id>& awaited);
  void drop_grant(worker_link& w, task_spec& t);
  void notify(const subscriber& s, object_entry* e);
  void mark_dirty(worker_link& w, bool now);
  void flush(worker_link& w);
  void flush_dirty();

  // ---- actors (mu_ held)
  /// A submitted constructor: the actor's record, its name, its process.
  void create_actor(task_spec* ctor, object_entry* entry);
  /// Takes the actor's resources and asks for its process, or waits for them.
  void start_actor(actor_record& a);
  void start_waiting_actors();
  void send_constructor(worker_link& host, actor_record& a);
  void on_constructed(actor_record& a, const ipc::error_info* error);
  /// Sends queued calls whose arguments are ready, in order, to a live actor.
  void actor_dispatch(actor_record& a);
  void actor_host_died(worker_link& w, const std::string& cause);
  /// Fails every queued and in-flight call; frees the process slot and resources.
  void actor_dead(actor_record& a, const ipc::error_info& why);
  void retire_actors();
  detail::ref_node* find_actor_locked(const std::string& name, std::uint64_t class_tag);
  ipc::error_info actor_error(const actor_record& a, const std::string& what) const;
  int free_host_slot();

  // ---- processes
  void request_spawn(int slot);
  void handle_zygote();
  void on_spawned(const process::zygote_reply& r, std::vector<int>& fds);
  void on_exited(pid_t pid, int status);
  void finalize_death(worker_link& w);
  /// A process is gone: free what it held, close its pipes, forward its last output.
  void close_link(worker_link& w);
  void kill_worker(worker_link& w, const std::string& why);

  // ---- I/O (poll_mu_ held)
  void io_loop();
  int poll_events(int timeout_ms);
  /// Reads what `w` sent; with `to_eof`, until its pipe closes (it is dead).
  /// @returns false if it stopped with data left to read.
  bool drain_worker(worker_link& w, bool to_eof = false);
  /// Stops processes from ringing the doorbell while this thread polls; false if
  /// the I/O thread was awake anyway. Undone by end_borrowed_poll.
  bool begin_borrowed_poll(std::uint32_t& idle_word);
  void end_borrowed_poll(std::uint32_t idle_word);
  void handle_frame(worker_link& w, const ipc::frame& f);
  void on_task_done(worker_link& w, const ipc::task_done& m);
  void on_submit(worker_link& w, const ipc::submit& m);
  void on_put(worker_link& w, const ipc::put& m);
  /// The refs inside a value a worker sent (read from the arena when it put a
  /// long list there); checks that the value lies where it may.
  std::vector<object_id> read_ids_and_check(worker_link& w, const ipc::id_list& ids,
                                            const ipc::value_location& loc);
  void forward_output(worker_link& w, bool err, bool drain);
  void wake_io();

  options opts_;
  std::uint32_t epoch_;
  std::unique_ptr<store::arena> arena_;
  std::unique_ptr<object_store> store_;
  process::control_block* control_ = nullptr;
  process::zygote_handle zygote_;
  directory dir_;
  std::atomic<std::uint64_t> next_object_seq_{0};
  std::atomic<std::uint32_t> seal_seq_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<int> active_calls_{0};
  std::atomic<std::uint64_t> tasks_finished_{0}, task_retries_{0}, processes_lost_{0},
      actor_restarts_{0};

  tbb::concurrent_queue<task_spec*> submissions_;  ///< from user threads, not yet registered
  std::atomic<std::uint64_t> next_key_{0};
  tbb::concurrent_queue<actor_record*> retired_;  ///< actors whose last handle went, to stop

  std::mutex mu_;  // the scheduler: everything below until poll_mu_
  std::vector<std::unique_ptr<worker_link>> workers_;
  std::unordered_map<std::uint64_t, task_spec*> tasks_;
  std::deque<task_spec*> ready_;
  std::vector<int> dirty_;
  std::vector<ipc::value_location> send_args_;  ///< scratch for send_task
  std::vector<object_id> send_ids_;
  std::unordered_map<std::uint64_t, fn_stats> stats_;
  std::uint64_t next_process_number_ = 0;
  resource_ledger ledger_;
  std::size_t pool_size_ = 0;
  std::size_t nested_live_ = 0;  ///< tasks_ with a parent: cancelling looks for children only then
  std::atomic<int> slots_in_use_{0};  ///< links [0, slots_in_use_) may be alive
  std::vector<std::unique_ptr<actor_record>> actors_;
  std::unordered_map<std::string, object_entry*> actor_names_;  ///< counted
  std::vector<actor_record*> waiting_actors_;

  std::mutex poll_mu_;  // the poll role: inboxes, output pipes, the zygote socket
  int epoll_fd_ = -1;               ///< zygote socket, worker output, full worker pipes
  int doorbell_[2] = {-1, -1};      ///< processes and wake_io write; only the I/O thread reads
  std::uint32_t processed_seq_ = 0;  ///< driver_seq up to which every pipe was drained
  std::uint32_t idle_generation_ = 0;
  std::thread io_thread_;
  bool stopped_ = false;

  friend struct call_guard;
};

/// Counts a user call in progress so shutdown waits for it; refuses calls once stopping.
struct call_guard {
  explicit call_guard(node_runtime& r) : r_(r) {
    r_.active_calls_.fetch_add(1, std::memory_order_acq_rel);
    if (r_.stopping_.load(std::memory_order_acquire)) {
      r_.active_calls_.fetch_sub(1, std::memory_order_acq_rel);
      throw usage_error("manta: the runtime is shutting down");
    }
  }
  ~call_guard() { r_.active_calls_.fetch_sub(1, std::memory_order_acq_rel); }
  call_guard(const call_guard&) = delete;
  call_guard& operator=(const call_guard&) = delete;
  node_runtime& r_;
};

}  // namespace manta::runtime

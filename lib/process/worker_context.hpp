// process/worker_context.hpp: a worker process's side of the runtime: its refs,
// its channel to the driver, and the calls tasks make (put, get, wait, submit).
// Any thread of the process may call it: one mutex guards the state, and the
// pipe from the driver is read by whichever waiting thread takes the reader role.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ipc/channel.hpp"
#include "ipc/messages.hpp"
#include "process/context.hpp"
#include "process/worker.hpp"

namespace manta::process {

/// A ref held by this process: what it knows of the object.
struct local_node final : detail::ref_node {
  bool subscribed = false;
  bool ready = false;
  bool failed = false;
  std::uint64_t type_tag = 0;
  std::uint64_t size = 0;
  std::uint64_t offset = ipc::no_offset;
  std::string inline_bytes;
  ipc::error_info error;
};

class task_invocation;

class worker_context final : public process_context {
 public:
  explicit worker_context(const worker_config& c);

  // ---- process_context (any thread)
  detail::ref_node* put(const detail::encoded_value& v) override;
  detail::extent allocate_extent(std::size_t bytes) override;
  void free_extent(const detail::extent& x) noexcept override;
  detail::ref_node* put_extent(std::uint64_t tag, const detail::extent& x, std::size_t size) override;
  detail::object_data fetch(detail::ref_node* n, detail::deadline until) override;
  void wait(std::span<detail::ref_node* const> nodes, std::size_t num, detail::deadline until,
            std::vector<bool>& ready) override;
  detail::ref_node* ref_from_id(const object_id& id) override;
  void release(detail::ref_node* n) noexcept override;
  void submit(detail::task_request&& request, detail::ref_node** returns) override;
  detail::ref_node* find_actor(const std::string& name, std::uint64_t class_tag) override;
  void kill_actor(detail::ref_node* node) override;
  void cancel_producer(detail::ref_node* node) override;
  std::vector<int> gpu_ids() override;
  std::map<std::string, double> resources(bool available_only) override;
  std::vector<node_info> cluster_nodes() override;
  std::size_t worker_count() const noexcept override { return cfg_.num_workers; }
  std::uint32_t epoch() const noexcept override { return cfg_.epoch; }
  bool is_worker() const noexcept override { return true; }

  // ---- for the roles (worker loop, actor host) and the task runner

  /// How a thread waiting here treats tasks that arrive meanwhile.
  enum class arrivals {
    queue,  ///< leave them for the thread that runs tasks
    nest,   ///< run them now, nested on this thread's stack (a blocked pool worker)
  };

  /// Blocks until a task is queued (or `until`), and returns its run_task body.
  /// @returns false on timeout
  bool take_task(std::string& body, detail::deadline until = detail::no_deadline);
  /// Runs one run_task body on this thread (the runner calls back into here).
  void run(const std::string& body);
  /// Reads and handles messages forever on this thread (an actor host whose
  /// executor threads run the calls). Never returns.
  [[noreturn]] void read_forever();

  /// The runner's way out: a finished task's message, sent in order with the
  /// rest, and the task ended (as task_ended, under the same lock: one per task
  /// fewer). `flush_now`: send at once rather than with the next batch.
  void send_done(const ipc::task_done& done, bool flush_now);
  /// Reserves an arena extent for a large value of a running task (asks the driver).
  /// @throws object_store_full
  std::uint64_t allocate(std::size_t size);
  /// Gives back an extent that will never be sealed.
  void give_back(std::uint64_t offset) noexcept;
  /// Writes `ids` where the driver can read them: inline (viewing `ids`) when
  /// few, else in an extent. @throws object_store_full
  ipc::id_list place_ids(const std::vector<object_id>& ids, bool in_arena = false);
  /// The calling thread starts (ends) running the task `key`. On the main thread
  /// of a pool worker this is what the driver's crash accounting reads (control
  /// block), and what a thread the task started waits on behalf of.
  void task_started(std::uint64_t key);
  /// Whether this process may run the task sent ahead as sending `seq`:
  /// false if the driver took it back (then nothing is sent for it). Results
  /// still in the outbox go out first: the task may run for long.
  bool claim_ahead(std::uint64_t seq);
  /// Runs options.worker_setup the first time any thread is about to run a task
  /// here (it may call the API). @throws usage_error, every time, if it failed.
  void ensure_setup();
  /// CUDA reads CUDA_VISIBLE_DEVICES when a process first uses it.
  void use_gpus(std::span<const std::int32_t> ids);
  std::byte* arena_base() const noexcept { return cfg_.arena_base; }

  /// This process now hosts an actor (its constructor ran): calls never nest.
  void become_actor_host(int concurrency) {
    std::lock_guard lock(mu_);
    actor_host_ = true;
    concurrency_ = concurrency;
  }
  bool actor_host() const noexcept { return actor_host_; }
  /// Calls the hosted actor may run at once (its max_concurrency).
  int concurrency() const noexcept { return concurrency_; }
  /// Threads other than the one running run() execute tasks (max_concurrency > 1).
  void set_threaded() {
    std::lock_guard lock(mu_);
    threaded_ = true;
  }

  // The hosted actor (set by its constructor).
  void* instance = nullptr;
  void (*destroy_instance)(void*) = nullptr;

 private:
  using lock_t = std::unique_lock<std::mutex>;
  /// The calling thread ended the task it started last (see task_started).
  void task_ended(lock_t&);

  /// A thread waiting in a pool worker runs tasks queued meanwhile (a task's
  /// own thread: nested on its stack, its CPU lent; a thread the task started:
  /// beside it, since the task may be waiting for that very thread); an actor
  /// host's calls never nest or overlap.
  bool waits_nest() const noexcept { return !actor_host_ && !threaded_; }
  arrivals waiting_mode() const noexcept { return waits_nest() ? arrivals::nest : arrivals::queue; }
  /// The task a wait of the calling thread blocks: the one it runs, or, for a
  /// thread a pool task started, the task innermost on the main thread (under the lock).
  std::uint64_t waiting_task() const noexcept;

  local_node* checked(detail::ref_node* node);
  object_id next_id() { return {id_hi_, ++next_seq_}; }
  local_node* new_node(const object_id& id);
  local_node* counted_node(const object_id& id, bool& fresh);
  void subscribe(lock_t& lock, const std::vector<local_node*>& ns);
  template <class M>
  void send(const M& m) {
    ipc::append(out_.buffer(), m);
  }
  void flush();
  /// Flushes now if another thread sleeps reading the pipe (it would not flush soon).
  void flush_if_reader_sleeps();

  /// Waits until `done()` or `until`, handling what arrives (as `what` says).
  template <class Pred>
  bool await(lock_t& lock, detail::deadline until, Pred done, arrivals what);
  /// As await, for the thread running a pool task: tells the driver the task is
  /// blocked (on `awaited`, `needed` of them), so its CPU is lent and tasks sent
  /// meanwhile run here, nested.
  template <class Pred>
  bool blocked_await(lock_t& lock, std::uint64_t key, detail::deadline until, Pred done,
                     const std::vector<local_node*>& awaited, std::size_t needed);
  /// Waits until `done` as a get or wait does: in a pool worker, with the task
  /// this thread runs (or, for a thread a task started, the task running on the
  /// main thread) blocked, running what arrives meanwhile; with a timeout, or in
  /// an actor host, just waiting.
  template <class Pred>
  bool wait_for_objects(lock_t& lock, detail::deadline until, Pred done,
                        const std::vector<local_node*>& awaited, std::size_t needed);
  /// Takes the reader role for one round: reads the pipe (waiting until `until`
  /// at most), then handles every frame, with the lock held.
  void read_once(lock_t& lock, detail::deadline until);
  void handle(const ipc::frame& f);
  /// A request awaiting its reply (find_actor, resources): sends it and waits.
  template <class Reply, class M>
  Reply request(lock_t& lock, M m, std::unordered_map<std::uint64_t, Reply>& replies);

  worker_config cfg_;
  process_slot& slot_;
  std::uint64_t id_hi_;

  std::once_flag setup_once_;
  std::string setup_error_;  ///< why worker_setup failed (set once, under setup_once_)
  std::mutex mu_;  // everything below
  std::condition_variable changed_;  ///< frames were handled or the reader role is free
  ipc::inbox in_;    ///< read only by the thread holding the reader role
  ipc::outbox out_;
  bool reading_ = false;
  ipc::adaptive_spin spin_;
  std::uint64_t next_seq_ = 0;
  std::uint64_t next_request_ = 0;
  std::unordered_map<object_id, local_node*> table_;
  std::unordered_map<std::uint64_t, std::pair<std::uint64_t, std::string>> alloc_replies_;  ///< offset, why none
  std::unordered_map<std::uint64_t, std::pair<object_id, std::string>> actor_replies_;
  std::unordered_map<std::uint64_t, std::map<std::string, double>> resources_replies_;
  std::unordered_map<std::uint64_t, std::vector<node_info>> nodes_replies_;
  std::deque<std::string> runnable_;  ///< run_task bodies not started yet, in arrival order
  std::chrono::steady_clock::time_point unflushed_since_{};
  std::vector<int> gpu_ids_;
  bool actor_host_ = false;
  int concurrency_ = 1;
  bool threaded_ = false;
  const std::thread::id main_thread_ = std::this_thread::get_id();  ///< runs the worker's loop
  std::vector<std::uint64_t> main_stack_;  ///< tasks the main thread runs, innermost last
  std::uint32_t next_wait_ = 0;  ///< numbers each block and its unblock
};

}  // namespace manta::process

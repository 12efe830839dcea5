// runtime/placement.hpp: which pool worker runs a task. The CPU ledger of the
// pool (a worker running default tasks holds one CPU; other tasks take their
// whole demand), lending a blocked task's CPU so nested tasks run on its worker,
// and pipelining short tasks behind a busy worker so messages batch. Decisions
// depend only on the workers' state, the ledger and task durations the workers
// reported: no I/O, no clock; unit tests drive it directly.
#pragma once

#include <atomic>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include <manta/serialization.hpp>

#include "runtime/directory.hpp"
#include "runtime/resources.hpp"
#include "runtime/task_graph.hpp"

namespace manta::runtime {

/// What placement knows of one pool worker.
struct worker_state {
  int slot = 0;
  /// Alive, and not about to be killed: placement sends it nothing otherwise.
  bool usable = false;
  lane in_flight;  ///< sent and not finished, in the order sent
  int blocked = 0;  ///< in-flight tasks waiting in get/wait
  /// What each wait of a blocked task is for (how many of which objects),
  /// latest last: its tasks nest on one stack, and threads a task started may
  /// wait beside it, each on their own objects.
  struct wait_state {
    std::size_t needed = 1;
    std::vector<object_id> ids;
    std::uint64_t key = 0;   ///< the waiting task
    std::uint32_t wait = 0;  ///< which of its process's waits
  };
  std::vector<wait_state> awaiting;
  bool extra = false;  ///< started beyond the pool's size while its workers wait (scheduler)
  int active_default = 0;  ///< in-flight default tasks (1 CPU) not blocked
  int nondefault = 0;      ///< in-flight tasks with other CPU requests
  /// The expected run time of its in-flight tasks, and how many of them have
  /// none (unknown, or they block): nothing is queued behind those.
  double expected_ns = 0;
  int unbounded = 0;
  /// In-flight tasks expected to run longer than a spin (or for an unknown time).
  int long_tasks = 0;
  bool holds_cpu = false;  ///< the CPU its default tasks share is taken
  /// The origin (task_spec::origin) of the task sent to it last: whose
  /// output it prints, on a node of a cluster.
  std::uint16_t last_origin = 0;
  /// Where to publish what work it has (process::work_*, for waiters deciding
  /// whether to spin), or null.
  std::atomic<std::uint32_t>* assigned = nullptr;
  /// Its process's words for tasks sent ahead (process_slot::ahead, two), or
  /// null: then nothing is sent ahead to it.
  std::atomic<std::uint64_t>* ahead = nullptr;
};

class placement {
 public:
  /// Queue at most about this much expected work on a busy worker (never behind
  /// a task whose run time is unknown or longer: it would hold the queue up).
  static constexpr double pipeline_window_ns = 1e6;
  static constexpr std::size_t max_pipeline = 1024;
  /// A task expected to end sooner is worth a waiter's spin (the default spin budget).
  static constexpr double short_task_ns = 50e3;

  placement(resource_ledger& ledger, directory& dir, task_graph& graph)
      : ledger_(ledger), dir_(dir), graph_(graph) {}

  /// The pool's workers (their states live elsewhere, with their processes).
  void set_workers(std::vector<worker_state*> pool) { pool_ = std::move(pool); }
  const std::vector<worker_state*>& workers() const noexcept { return pool_; }
  /// An extra worker joins the pool (placed after the others: idle ones of the
  /// pool proper are picked first), or leaves it.
  void add_worker(worker_state* w) { pool_.push_back(w); }
  void remove_worker(worker_state* w) { std::erase(pool_, w); }
  /// Workers whose every task waits in get/wait (their CPU is lent) and whose
  /// innermost one cannot go on yet: not one whose awaited objects just came.
  int all_waiting() const;

  /// The worker `t` should be sent to now, or nullptr (it stays queued).
  worker_state* pick(const task_spec& t);
  /// After `pick` found none for `t`: a busy worker to send it ahead to, to
  /// start once its one task ends (no round trip between the two), or nullptr.
  /// Only a default task that can neither wait on others nor be killed for a
  /// timeout, behind one that is not known to wait (it would nest there).
  worker_state* pick_ahead(const task_spec& t) const;
  /// After `pick` found none for the default task `t`: no later default task
  /// can go either, so a scan of the ready queue may stop.
  bool blocks_later(const task_spec& t) const;
  /// After `pick` found none for `t`, a task asking more or less than the
  /// default: whether no task asking the same can go either until something
  /// ends (its demand does not fit in what is free, or no worker is idle or
  /// lending). Sending other tasks only takes more.
  bool none_fits_like(const task_spec& t) const;
  /// `t` was given refs (borrowed, or inside its arguments) reaching an object
  /// not sealed yet, or an actor handle (a queue's, a stream's: its calls may
  /// wait on other tasks): it may wait on other tasks, so it never nests on a
  /// blocked worker nor queues behind a running task.
  bool may_wait_on_others(const task_spec& t) const;
  /// Some argument of `t` lies in the arena (or the spill file): sent, it is
  /// pinned there until `t` ends, so `t` is sent only when it can run soon.
  static bool has_stored_inputs(const task_spec& t);
  /// Every argument of `t` in the arena is pinned already (by tasks that read
  /// it, or the caller): queuing `t` keeps nothing more from being spilled.
  /// Not by the hold of a read-back alone (see held_for_read_back).
  bool stored_inputs_pinned(const task_spec& t) const;
  /// While the scheduler dispatches after reading `entries` back from the
  /// spill file, they are pinned only by that read's hold, which ends after
  /// the dispatch: a task queued behind a busy worker would keep them pinned,
  /// and each read-back would pin one more (the arena filled with the inputs
  /// of queued tasks, and the next read-back failed). Null after.
  void held_for_read_back(const std::vector<object_entry*>* entries) noexcept { read_back_ = entries; }

  /// `t` is sent to `w`: it holds its CPU (and resources) now.
  void sent(worker_state& w, task_spec& t);
  /// `t` finished on `w` (or was lost with it): what it held goes back.
  void finished(worker_state& w, task_spec& t);
  /// A thread of `t` waits in get/wait for `needed` of `ids`: its CPU is lent
  /// while any of its waits lasts.
  void blocked(worker_state& w, task_spec& t, worker_state::wait_state awaited);
  /// The wait `wait` of `t` ended: once none is left, `t` runs again.
  void unblocked(worker_state& w, task_spec& t, std::uint32_t wait);
  /// All of `w`'s tasks wait, and the innermost cannot go on yet: it may run more, nested.
  bool lending(const worker_state& w) const;
  /// Queued producers of what `w`'s innermost waiting task needs (following
  /// producers that wait on their own arguments to theirs), to run on `w`
  /// nested, in order; empty if it is not lending or none fit. Never one that
  /// may wait on others, or has a timeout: those need a worker of their own.
  /// Producers found sent ahead to a worker (not in the ready queue) are
  /// added to `ahead`, if given, for the caller to take back and ask again.
  std::vector<task_spec*> producers_to_lend(const worker_state& w, std::vector<task_spec*>* ahead = nullptr) const;
  /// `w`'s process is gone: every account it held is settled (call after
  /// `finished` for each of its tasks).
  void lost(worker_state& w);

  // ---- what placement learns from finished tasks
  /// Statistics are kept per function, call mode and task name: the Python
  /// front runs every Python function through one registered function, named
  /// by the task (one Python function that waits in get kept every other from
  /// being pipelined or sent ahead, and their run times were averaged together).
  static std::uint64_t stats_key(const task_spec& t) {
    const std::string& name = t.options().name;
    return t.fn->id ^ (static_cast<std::uint64_t>(t.mode) << 62) ^ (name.empty() ? 0 : detail::fnv1a(name) >> 2);
  }
  void record(const task_spec& t, std::uint64_t ns, std::uint64_t result_bytes);
  /// Its tasks wait in get/wait: never queue them behind others (a blocked worker
  /// runs what is in its pipe nested, so queued tasks would nest deeply).
  void note_blocks(const task_spec& t) { stats_[stats_key(t)].blocks = true; }
  /// The size of the result extent to offer `t` when it is sent (its function's
  /// last large result), or 0.
  std::uint64_t result_grant_size(const task_spec& t) const;

 private:
  struct fn_stats {
    double ewma_ns = 0;
    bool known = false;
    std::uint64_t result_bytes = 0;  ///< size of its last single result
    bool blocks = false;
  };
  /// What `t` takes from the ledger while it runs (a default task: its worker's one CPU).
  static const demand& cpu_need(const task_spec& t) { return t.need(); }
  /// The statistics of `t`'s function, or nullptr if none finished yet.
  fn_stats* find_stats(const task_spec& t) const;
  /// How long `t` is expected to run: its function's average, or infinity when
  /// unknown or when it blocks.
  double estimate(const task_spec& t) const;
  void take_cpu(worker_state& w, task_spec& t);
  /// `t` stops waiting altogether: its CPU is taken back.
  void end_block(worker_state& w, task_spec& t);
  /// The waits of `w`'s innermost waiting task (the key of its latest wait).
  template <class F>
  static void for_each_innermost_wait(const worker_state& w, F&& f);
  /// Tells waiters in every process whether `w` computes (see process::core_free).
  static void publish(worker_state& w) noexcept;
  /// `t` was sent expecting more than a spin's worth of work (or an unknown amount).
  static bool runs_long(const task_spec& t) noexcept { return !(t.expected_ns < short_task_ns); }

  resource_ledger& ledger_;
  directory& dir_;
  task_graph& graph_;
  std::vector<worker_state*> pool_;
  std::unordered_map<std::uint64_t, fn_stats> stats_;
  const std::vector<object_entry*>* read_back_ = nullptr;  ///< see held_for_read_back
  mutable std::uint64_t last_key_ = 0;  ///< find_stats's last lookup
  mutable fn_stats* last_stats_ = nullptr;
};

}  // namespace manta::runtime

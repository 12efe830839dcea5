// runtime/task_graph.hpp: the tasks of a node and the edges between them. The
// graph owns every task; it alone links a task to the objects it produces and
// waits on, and to the lane it waits in, and `remove` undoes all of it at once,
// so a finished, failed or cancelled task can never be left in another's list.
// No I/O, no clock, no locks: the scheduler calls it under its mutex, and unit
// tests call it directly.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <boost/unordered/unordered_flat_map.hpp>

#include "ipc/failure.hpp"
#include "runtime/directory.hpp"
#include "runtime/task_spec.hpp"

namespace manta::runtime {

class task_graph {
 public:
  task_graph() = default;
  task_graph(const task_graph&) = delete;
  task_graph& operator=(const task_graph&) = delete;
  ~task_graph() { clear(); }

  /// Takes `t` (its key must be new): it becomes the producer of its returns and
  /// a dependent of each argument not sealed yet. If an argument already failed,
  /// `t` waits on nothing and that failure is returned (the caller fails `t`).
  ipc::failure_ptr add(std::unique_ptr<task_spec> t);
  task_spec* find(std::uint64_t key) const;
  /// The keys of every task (to visit them while some are removed).
  std::vector<std::uint64_t> keys() const;
  std::size_t size() const noexcept { return tasks_.size(); }
  /// Calls `f(const task_spec&)` for every task (reports; nothing may change meanwhile).
  template <class F>
  void for_each(F f) const {
    for (const auto& kv : tasks_) f(static_cast<const task_spec&>(*kv.second));
  }
  /// Deletes `t`, after taking it out of its lane, out of its arguments'
  /// dependents and off its returns as their producer.
  void remove(task_spec* t);
  /// Deletes every task (shutdown): no lane or entry refers to one afterwards.
  void clear();

  // ---- lanes (the ready queue, actor queues, what a worker was sent)
  /// Moves `t` into `l` (at the back, or the front), out of any lane it was in.
  void enter(task_spec* t, lane& l, bool at_front = false);
  /// Takes `t` out of its lane, if it is in one.
  void leave(task_spec* t);
  /// The pool's ready queue: tasks whose arguments are all sealed, in order.
  lane& ready() noexcept { return ready_; }
  /// How many tasks in the ready queue ask `d`, a demand other than the
  /// default task's (a dispatch that found no room for it stops early).
  std::size_t ready_asking(const demand& d) const;

  // ---- edges
  /// The task that will seal `e`, while there is one.
  static task_spec* producer_of(const object_entry* e) noexcept { return e->producer_; }
  /// `e` was sealed: its dependents lose one pending argument. Appends those
  /// left with none to `runnable`, in the order they started waiting.
  void sealed(object_entry* e, std::vector<task_spec*>& runnable);

  /// What `fail` did: the objects that failed (to publish) and the tasks that
  /// failed with them (to finish), `t` first.
  struct failure_spread {
    std::vector<object_entry*> objects;
    std::vector<task_spec*> tasks;
  };
  /// Fails `t`'s pending returns with `why`, and transitively every task
  /// waiting on them (each adding its name to the chain); they all stop waiting
  /// on their arguments. Nothing is removed: the caller finishes the tasks.
  void fail(task_spec* t, ipc::failure_ptr why, failure_spread& out);
  /// `t` waits on its arguments no more (it failed, or was cancelled).
  void stop_waiting(task_spec* t);

  /// Tasks submitted from inside the task `parent` and still here.
  std::vector<task_spec*> children_of(std::uint64_t parent) const;
  /// Whether any task here was submitted from a worker.
  bool has_children() const noexcept { return with_parent_ > 0; }

  /// Checks the graph's invariants against `entries` (every entry a test made):
  /// dependents and producers are live tasks, pending counts match the edges,
  /// lanes hold live tasks that know their lane. Empty if all hold (tests).
  std::string check(std::span<object_entry* const> entries) const;

 private:
  // Open addressing, no allocation per task: one insert, lookup and erase per
  // task are on the hot path (a node-based map cost about 100 instructions more).
  boost::unordered_flat_map<std::uint64_t, std::unique_ptr<task_spec>> tasks_;
  lane ready_;
  /// The ready queue's tasks by demand, but for default tasks (ready_asking).
  std::map<demand, std::size_t> ready_demands_;
  std::size_t with_parent_ = 0;  ///< tasks submitted from a worker: children_of looks only then
};

}  // namespace manta::runtime

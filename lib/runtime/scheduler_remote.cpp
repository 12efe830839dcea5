// runtime/scheduler_remote.cpp: the scheduler's tasks that run on another
// node: sent when the cluster has room, their results sealed here when they
// come back, and their failures (the cluster's, or the task's) told apart.
#include "runtime/scheduler.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include <manta/errors.hpp>

#include "observe/log.hpp"

namespace manta::runtime {

std::size_t scheduler::carried_bytes(const task_spec& t) {
  std::size_t n = t.args.size();
  for (const object_entry* e : t.deps)
    if (!by_reference(*e, t.mode, t.actor ? std::string_view(t.actor->remote_key) : std::string_view())) n += e->size;
  return n;
}

void scheduler::send_waiting_remote() {
  if (sending_remote_) return;  // (a remote actor started below enters its calls: this loop sends them)
  sending_remote_ = true;
  struct done_sending {
    bool& flag;
    ~done_sending() { flag = false; }
  } at_end{sending_remote_};
  if (remote_.empty()) remote_bytes_bound_ = 0;
  while (!remote_waiting_.empty() && remote_.size() < max_remote_in_flight) {
    task_spec* t = remote_waiting_.front();
    const std::size_t bytes = carried_bytes(*t);
    if (!remote_.empty() && remote_bytes_bound_ + bytes > max_remote_bytes) {
      // The bound counts what came back too: counted again, exactly (a sum
      // over every task out, per task sent, was a fifth of a driver's time).
      remote_bytes_bound_ = 0;
      for (const task_spec* r : remote_) remote_bytes_bound_ += carried_bytes(*r);
      if (remote_bytes_bound_ + bytes > max_remote_bytes) break;  // (one goes whatever its size)
    }
    remote_bytes_bound_ += bytes;
    if (auto why = host_.send_remote(*t)) {
      if (t->mode == detail::call_mode::construct) remote_constructor_failed(t, *why);
      else fail_task(t, std::move(*why));  // takes it out of remote_waiting_
      continue;
    }
    graph_.enter(t, remote_);
    if (t->mode == detail::call_mode::construct) {
      // Its calls follow it, in order, on the same way to its node.
      actor_record& a = *t->actor;
      a.pending_ctor = nullptr;
      a.remote_started = true;
      a.st = actor_record::state::alive;
      actor_dispatch(a);
    }
  }
}

void scheduler::remote_constructor_failed(task_spec* ctor, const ipc::error_info& why) {
  actor_record& a = *ctor->actor;
  if (a.pending_ctor == ctor) a.pending_ctor = nullptr;
  actor_dead(a, actor_error(a, "could not be started on the cluster: " + why.remote_type + ": " + why.message));
  finish_task(ctor);
}

namespace {
/// Whether a failure of a task that spilled to the cluster came from the
/// cluster (no node could take it, or its node was lost), not from the task:
/// this node can still run it.
bool cluster_failure(const ipc::error_info& e) {
  return e.kind == ipc::error_kind::node_died || e.kind == ipc::error_kind::usage;
}
}  // namespace

void scheduler::remote_result(std::uint64_t key, std::span<const ipc::value_location> values,
                              std::span<const std::vector<object_id>> inside, const ipc::error_info* error) {
  // Values the caller already put into the arena (offset set) are freed unless sealed.
  auto free_placed = [&] {
    for (const auto& v : values)
      if (v.offset != ipc::no_offset) store_.deallocate(v.offset);
  };
  task_spec* t = graph_.find(key);
  if (!t || t->in_lane != &remote_) return free_placed();  // cancelled (or failed) meanwhile
  if (error || values.size() != t->returns.size()) free_placed();
  if (t->mode == detail::call_mode::construct) {  // a remote actor's start: its handle stands already
    t->actor->answered.store(true, std::memory_order_release);
    dir_.wake_all();  // (a serving loop may wait to hand its handle over: remote_jobs.cpp, awaited)
    if (error) remote_constructor_failed(t, *error);
    else finish_task(t);
    return;
  }
  if (error && t->spilled && cluster_failure(*error)) {
    // It went only because it would have queued here: it runs here after all.
    t->remote = t->spilled = false;
    t->local_only = true;
    graph_.enter(t, graph_.ready(), /*at_front=*/true);
  } else if (error) {
    ipc::error_info e = *error;
    if (e.function.empty()) e.function = t->name();  // (failed here, on arrival: the outcome named none)
    fail_task(t, e);
  } else if (values.size() != t->returns.size()) {
    fail_task(t, ipc::error_info{ipc::error_kind::usage, "manta::usage_error",
                                 "manta: task '" + t->name() + "' came back from the cluster with " +
                                     std::to_string(values.size()) + " results, not " +
                                     std::to_string(t->returns.size()),
                                 t->name(), {}, 0, 0, {}});
  } else {
    // Room for the large results first: if the arena is full, the task fails whole.
    std::vector<ipc::value_location> at(values.begin(), values.end());
    std::size_t placed = 0;
    try {
      for (; placed < at.size(); ++placed) {
        if (at[placed].size <= detail::max_inline_bytes || at[placed].offset != ipc::no_offset) continue;
        at[placed].offset = store_.allocate(at[placed].size);
        std::memcpy(store_.base() + at[placed].offset, at[placed].inline_data, at[placed].size);
      }
    } catch (const std::exception& e) {
      for (std::size_t i = 0; i < at.size(); ++i)  // (those past `placed` the caller placed)
        if (at[i].offset != ipc::no_offset) store_.deallocate(at[i].offset);
      fail_task(t, ipc::error_from_exception(std::current_exception(), t->name(), 0));
      return;
    }
    for (std::size_t i = 0; i < at.size(); ++i) {
      t->returns[i]->made_by = t->fn;
      seal(t->returns[i], at[i], i < inside.size() ? inside[i] : std::vector<object_id>(), nullptr);
    }
    tasks_finished_.fetch_add(1, std::memory_order_relaxed);
    functions_.finished(t->label());
    finish_task(t);
  }
}

void scheduler::fail_remote(const ipc::error_info& why) {
  // Actors living on other nodes are gone with the cluster: their calls fail
  // with actor_died_error (queued ones now, later ones at submission).
  for (auto& a : actors_)
    if (a->remote && a->st != actor_record::state::dead)
      actor_dead(*a, actor_error(*a, "is gone with the cluster: " + why.message));
  for (lane* l : {&remote_, &remote_waiting_})
  while (!l->empty()) {
    task_spec* t = l->front();
    if (t->spilled) {  // this node can run it: it waits here again, first in line
      t->remote = t->spilled = false;
      graph_.enter(t, graph_.ready(), /*at_front=*/true);
      continue;
    }
    if (t->mode == detail::call_mode::construct) {
      remote_constructor_failed(t, why);
      continue;
    }
    if (t->is_call() && t->actor->death) {  // a remote actor's call: its actor is gone (above)
      fail_task(t, *t->actor->death);
      continue;
    }
    ipc::error_info e = why;
    e.function = t->name();
    e.message = "manta: task '" + t->name() + "' was sent to the cluster, and " + why.message;
    fail_task(t, std::move(e));  // takes it out of its lane
  }
  dispatch();
}

}  // namespace manta::runtime

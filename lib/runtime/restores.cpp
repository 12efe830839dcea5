// runtime/restores.cpp: the scheduler's side of stored arguments: pinning them
// while their task runs, and reading spilled ones back off the scheduler's
// lock (the spiller's jobs) before the task is sent, or before a worker that
// waits for one is told where it lies.
#include "runtime/scheduler.hpp"

namespace manta::runtime {

scheduler::pinned scheduler::pin_inputs(task_spec& t, bool may_defer, std::string& why) {
  for (std::size_t i = 0; i < t.deps.size(); ++i) {
    object_entry* e = t.deps[i];
    if (store_.try_pin(e)) continue;
    pinned result = pinned::failed;
    if (auto f = restore_failed_.find(e); f != restore_failed_.end()) {
      why = f->second;
    } else if (may_defer) {
      // Read back off the lock, all of its stored arguments together (one at
      // a time, bringing one back could spill another, for ever); the dispatch
      // after that sends `t`. Unless one already on its way is all it lacks.
      result = pinned::deferred;
      bool on_its_way = true;
      std::vector<object_entry*> stored;
      for (object_entry* d : t.deps) {
        if (!d->large) continue;
        stored.push_back(d);
        if (d->pins.load(std::memory_order_relaxed) < 0 && !restoring_.count(d)) on_its_way = false;
      }
      if (!on_its_way) request_restore(stored);
    } else {
      try {
        store_.pin(e);  // (a constructor sent to its new process: at once, rare)
        continue;
      } catch (const std::exception& x) {
        why = x.what();
      }
    }
    while (i-- > 0) store_.unpin(t.deps[i]);
    return result;
  }
  t.inputs_pinned = true;
  return pinned::all;
}

void scheduler::request_restore(const std::vector<object_entry*>& entries) {
  for (object_entry* e : entries) {
    ++restoring_[e].jobs;
    detail::acquire(e);  // (the spiller's, given back by restored)
  }
  host_.restore(entries);
}

void scheduler::restored(const std::vector<object_entry*>& entries, bool ok, std::size_t failed_at,
                         const std::string& why) {
  std::vector<std::pair<object_entry*, subscriber>> told;
  for (object_entry* e : entries) {
    auto it = restoring_.find(e);
    if (it == restoring_.end()) continue;
    for (const subscriber& s : it->second.subscribers) told.emplace_back(e, s);
    it->second.subscribers.clear();
    if (--it->second.jobs <= 0) restoring_.erase(it);
  }
  if (!ok && failed_at < entries.size()) restore_failed_[entries[failed_at]] = why;
  // While the spiller's pins keep them in the arena, what waited pins them too
  // (a subscriber of one still spilled asks again).
  for (auto& [e, s] : told) notify(s, e);
  for (auto& a : actors_)  // (rare: an actor whose next call reads one waits in its queue)
    if (!a->queue.empty()) actor_dispatch(*a);
  if (ok) place_.held_for_read_back(&entries);
  dispatch();
  place_.held_for_read_back(nullptr);
  restore_failed_.clear();
  for (object_entry* e : entries) {
    if (ok) store_.unpin(e);
    detail::release(e);
  }
}

void scheduler::unpin_inputs(task_spec& t) {
  if (!std::exchange(t.inputs_pinned, false)) return;
  for (auto* e : t.deps) store_.unpin(e);
}

}  // namespace manta::runtime

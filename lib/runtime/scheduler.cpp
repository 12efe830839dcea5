// runtime/scheduler.cpp: turning tasks into run_task messages. A task is ready
// when every argument is sealed; it goes to an idle worker (or one whose tasks
// all wait in get, lending their CPU) when the resource ledger allows, or, for
// short default tasks, is queued behind the work of a busy worker so messages
// batch. Actor calls go to their actor's queue instead (actors.cpp).
// Everything here runs with mu_ held.
#include <signal.h>
#include <sys/epoll.h>

#include <algorithm>
#include <unordered_set>
#include <utility>

#include "observe/log.hpp"
#include "process/args_blob.hpp"
#include "runtime/node_runtime.hpp"

namespace manta::runtime {
namespace {
/// Queue at most about this much work behind a busy worker.
constexpr double pipeline_window_ns = 1e6;
constexpr std::size_t max_pipeline = 1024;

}  // namespace

void node_runtime::register_task(task_spec* t) {
  // A failed argument fails the task before it waits on any other (it must not
  // be left in their dependents once it is gone).
  for (auto* e : t->deps)
    if (e->status() == state_failed) {
      fail_task(t, ipc::chain_failure(e->error, t->name()));
      return;
    }
  for (auto* e : t->deps)
    if (e->status() == state_pending) {
      e->dependents.push_back(t);
      ++t->pending_deps;
    }
  for (auto* e : t->returns) e->producer = t;
  if (t->mode == detail::call_mode::construct) {
    create_actor(t, t->returns.at(0));
  } else if (t->actor && t->actor->st == actor_record::state::dead) {
    fail_task(t, *t->actor->death);
  } else if (t->actor) {
    t->actor->queue.push_back(t);  // in submission order, ready or not
    actor_dispatch(*t->actor);
  } else if (t->pending_deps == 0) {
    enqueue(t);
    dispatch();
  }
}

void node_runtime::enqueue(task_spec* t) {
  t->queued = true;
  ready_.push_back(t);
}

bool node_runtime::lending(const worker_link& w) {
  if (w.blocked != static_cast<int>(w.in_flight.size())) return false;
  // A task nested now would sit on top of the innermost waiting one: if that one
  // can already go on, it would have to wait for the newcomer (and its subtree).
  if (w.awaiting.empty()) return true;
  const auto& top = w.awaiting.back();
  std::size_t done = 0;
  for (const auto& id : top.ids) {
    object_entry* e = dir_.find(id);
    done += !e || e->status() != state_pending;
  }
  return done < top.needed;
}

void node_runtime::lend_for(worker_link& w, const std::vector<object_id>& awaited) {
  // Running what the blocked task waits for keeps nesting shallow: otherwise a
  // blocked worker takes whatever is queued, and fork-join code nests deeply.
  // A producer still waiting on its own arguments leads to theirs: whatever the
  // awaited objects need is safe to nest (none of it can wait on the tasks below).
  if (w.killed_to_cancel) return;  // it is about to die
  std::vector<object_entry*> todo;
  for (auto it = awaited.rbegin(); it != awaited.rend(); ++it)
    if (object_entry* e = dir_.find(*it)) todo.push_back(e);
  std::vector<const task_spec*> seen;
  while (!todo.empty() && seen.size() < 64) {  // bounded: the first producers matter
    if (w.blocked != static_cast<int>(w.in_flight.size())) return;  // it runs one already
    object_entry* e = todo.back();
    todo.pop_back();
    task_spec* t = e->status() == state_pending ? e->producer : nullptr;
    if (!t || std::find(seen.begin(), seen.end(), t) != seen.end()) continue;
    seen.push_back(t);
    if (!t->queued) {
      if (t->pending_deps > 0 && !t->actor)
        for (auto d = t->deps.rbegin(); d != t->deps.rend(); ++d) todo.push_back(*d);
      continue;
    }
    if (!ledger_.fits(t->is_default() ? demand{1.0, 0, {}} : t->need)) return;
    ready_.erase(std::find(ready_.begin(), ready_.end(), t));
    t->queued = false;
    send_task(w, *t);
  }
}

void node_runtime::dispatch() {
  if (!waiting_actors_.empty()) start_waiting_actors();
  // A worker whose tasks all wait runs what its innermost one waits for first.
  for (std::size_t i = 0; i < pool_size_; ++i) {
    worker_link& w = *workers_[i];
    if (w.blocked > 0 && !w.awaiting.empty() && w.st == worker_link::state::alive && lending(w))
      lend_for(w, w.awaiting.back().ids);
  }
  // In order, except that a task waiting for resources (GPUs, custom ones, more
  // CPUs) lets later tasks pass, and so does one that may not nest on a blocked
  // worker. A default task that cannot go otherwise means no later one can
  // either, so the scan stops there.
  for (auto it = ready_.begin(); it != ready_.end();) {
    task_spec* t = *it;
    worker_link* w = pick_worker(*t);
    if (!w) {
      // (It may only nest when a CPU is free: with none, later ones cannot go either.)
      if (t->is_default() && (!ledger_.fits(demand{1.0, 0, {}}) || !may_wait_on_others(*t))) break;
      ++it;
      continue;
    }
    it = ready_.erase(it);
    t->queued = false;
    send_task(*w, *t);
  }
}

bool node_runtime::may_wait_on_others(const task_spec& t) const {
  std::vector<const object_entry*> todo;
  for (auto* e : t.contained) todo.push_back(e);
  for (auto* e : t.deps)
    for (auto* c : e->contained) todo.push_back(static_cast<const object_entry*>(c));
  if (todo.empty()) return false;  // the common case: no refs given at all
  std::unordered_set<const object_entry*> seen;
  while (!todo.empty()) {
    const object_entry* e = todo.back();
    todo.pop_back();
    if (e->status() == state_pending) return true;
    if (!seen.insert(e).second) continue;
    for (auto* c : e->contained) todo.push_back(static_cast<const object_entry*>(c));  // refs in refs
  }
  return false;
}

worker_link* node_runtime::pick_worker(const task_spec& t) {
  // A task nested on a blocked worker, or queued behind a task that may block,
  // runs on top of that worker's stack: if it waited on an object a task below
  // it will make, neither could go on. Only tasks that cannot reach an unsealed
  // object except through their own children go there.
  if (ledger_.fits(t.is_default() ? demand{1.0, 0, {}} : t.need)) {
    worker_link* lending = nullptr;
    for (std::size_t i = 0; i < pool_size_; ++i) {
      auto& w = workers_[i];
      if (w->st != worker_link::state::alive || w->killed_to_cancel) continue;
      if (w->in_flight.empty()) return w.get();
      if (!lending && this->lending(*w)) lending = w.get();
    }
    if (lending && !may_wait_on_others(t)) return lending;
  }
  // Queue short default tasks behind a busy worker's default tasks.
  if (!t.is_default() || may_wait_on_others(t)) return nullptr;
  auto it = stats_.find(stats_key(t));
  if (it == stats_.end() || !it->second.known || it->second.blocks) return nullptr;
  std::size_t depth = static_cast<std::size_t>(
      std::clamp(pipeline_window_ns / std::max(it->second.ewma_ns, 1.0), 1.0,
                 static_cast<double>(max_pipeline)));
  worker_link* best = nullptr;
  for (std::size_t i = 0; i < pool_size_; ++i) {
    auto& w = workers_[i];
    if (w->st != worker_link::state::alive || w->killed_to_cancel || w->blocked || w->nondefault ||
        !w->active_default)
      continue;
    if (w->in_flight.size() >= depth) continue;
    if (!best || w->in_flight.size() < best->in_flight.size()) best = w.get();
  }
  return best;
}

// Default tasks on one worker share one CPU, held while any of them is active;
// other tasks take their whole demand (GPU ids too) while they run. Actor calls
// take nothing: the actor holds its resources for its life.

void node_runtime::take_cpu(worker_link& w, task_spec& t) {
  if (t.actor) return;
  if (t.is_default()) {
    if (w.active_default++ == 0 && !w.holds_cpu) {
      w.holds_cpu = true;
      ledger_.take_cpu(1);
    }
  } else {
    ++w.nondefault;
    t.gpus = ledger_.take(t.need);
    t.charged = true;
  }
}

void node_runtime::return_cpu(worker_link& w, task_spec& t) {
  if (t.actor) return;
  if (t.blocked) reclaim_cpu(w, t);
  if (t.is_default()) {
    if (--w.active_default == 0 && w.holds_cpu) {
      w.holds_cpu = false;
      ledger_.give_cpu(1);
    }
  } else if (t.charged) {
    --w.nondefault;
    ledger_.give(t.need, t.gpus);
    t.gpus.clear();
    t.charged = false;
  }
}

void node_runtime::lend_cpu(worker_link& w, task_spec& t) {
  if (t.blocked) return;
  t.blocked = true;
  ++w.blocked;
  if (!t.is_default()) {
    ledger_.give_cpu(t.need.cpu);  // its GPUs and custom resources stay with it
  } else if (--w.active_default == 0 && w.holds_cpu) {
    w.holds_cpu = false;
    ledger_.give_cpu(1);
  }
}

void node_runtime::reclaim_cpu(worker_link& w, task_spec& t) {
  if (!t.blocked) return;
  t.blocked = false;
  --w.blocked;
  if (!t.is_default()) {
    ledger_.take_cpu(t.need.cpu);  // may oversubscribe for a moment, as a returning thread does
  } else if (w.active_default++ == 0 && !w.holds_cpu) {
    w.holds_cpu = true;
    ledger_.take_cpu(1);
  }
}

std::optional<std::string> node_runtime::pin_inputs(task_spec& t) {
  std::size_t i = 0;
  try {
    for (; i < t.deps.size(); ++i) store_->pin(t.deps[i]);
  } catch (const std::exception& e) {
    while (i-- > 0) store_->unpin(t.deps[i]);
    return e.what();
  }
  t.inputs_pinned = true;
  return std::nullopt;
}

void node_runtime::unpin_inputs(task_spec& t) {
  if (!std::exchange(t.inputs_pinned, false)) return;
  for (auto* e : t.deps) store_->unpin(e);
}

void node_runtime::send_task(worker_link& w, task_spec& t) {
  if (auto why = pin_inputs(t)) {
    // A spilled argument finds no room to come back: the call fails, not the node.
    ipc::error_info err{ipc::error_kind::object_store_full, "manta::object_store_full",
                        "manta: an argument of '" + t.name() + "' could not be read back: " + *why,
                        t.name(), {}, 0, 0};
    if (t.mode == detail::call_mode::construct) {
      actor_record& a = *t.actor;
      tasks_.erase(t.key);
      delete &t;
      on_constructed(a, &err);
    } else {
      fail_task(&t, err);
    }
    return;
  }
  bool was_waiting = w.in_flight.empty() || w.blocked == static_cast<int>(w.in_flight.size());
  take_cpu(w, t);
  t.worker = w.slot;
  w.in_flight.push_back(&t);
  // Offer an extent the size of the function's last large result, so the
  // worker can write its result without asking for room first.
  std::uint64_t grant_size = 0;
  if (t.num_returns == 1) {
    auto it = stats_.find(stats_key(t));
    if (it != stats_.end() && it->second.result_bytes > detail::max_inline_bytes) {
      std::uint64_t off = store_->try_allocate(it->second.result_bytes);  // never spills for it
      if (off != store::no_extent) {
        t.grant = off;
        grant_size = it->second.result_bytes;
        w.extents[off] = grant_size;
      }
    }
  }
  send_args_.clear();
  process::for_each_arg(t.args, t.arg_count, [&](const process::blob_arg& a) {
    if (a.kind == process::arg_kind::value) {
      send_args_.push_back({a.tag, a.size_or_index, ipc::no_offset, reinterpret_cast<const std::byte*>(a.bytes)});
    } else {
      object_entry* e = t.deps[a.size_or_index];  // checked at submission
      send_args_.push_back({e->type_tag, e->size, e->offset,
                            reinterpret_cast<const std::byte*>(e->inline_bytes.data())});
    }
  });
  send_ids_.clear();
  for (auto* e : t.returns) send_ids_.push_back(e->id);
  const std::vector<int>& gpus = t.mode == detail::call_mode::construct ? t.actor->gpus : t.gpus;
  ipc::append(w.out.buffer(),
              ipc::run_task{t.key, t.fn->id, t.mode,
                            static_cast<std::uint16_t>(t.actor ? t.actor->options.max_concurrency : 1),
                            t.options.name, send_ids_, t.grant, grant_size, gpus, send_args_});
  // A worker that is running other tasks sends their results soon; its next
  // tasks can ride with the flush that follows. An idle worker needs them now.
  mark_dirty(w, was_waiting);
}

void node_runtime::mark_dirty(worker_link& w, bool now) {
  if (!w.dirty) {
    w.dirty = true;
    dirty_.push_back(w.slot);
  }
  if (now) flush(w);
}

void node_runtime::flush(worker_link& w) {
  if (w.st != worker_link::state::alive) {
    w.out.buffer().clear();
    return;
  }
  if (!w.out.flush()) return;  // the worker is dying; its death is handled on EOF
  if (!w.out.empty() && !w.write_armed) {
    w.write_armed = true;
    epoll_event ev{EPOLLOUT, {.u64 = (std::uint64_t{4} << 32) | static_cast<std::uint32_t>(w.slot)}};
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, w.out_fd, &ev);
  }
}

void node_runtime::flush_dirty() {
  for (int slot : dirty_) {
    worker_link& w = *workers_[slot];
    w.dirty = false;
    flush(w);
  }
  dirty_.clear();
}

void node_runtime::notify(const subscriber& s, object_entry* e) {
  if (s.slot < 0 || s.slot >= slots_in_use_.load()) return;
  worker_link& w = *workers_[s.slot];
  if (w.generation != s.generation || w.st != worker_link::state::alive) return;
  ipc::object_ready m{e->id};
  if (e->status() == state_ready) {
    // The worker keeps where it lies while it holds the object: pin it for that
    // long. One it no longer holds needs no answer (holding it again, it asks again).
    auto held = w.holds.find(e->id);
    if (held == w.holds.end()) return;
    if (!held->second) {
      try {
        store_->pin(e);
        held->second = true;
      } catch (const std::exception& x) {
        m.ok = false;
        m.error = {ipc::error_kind::object_store_full, "manta::object_store_full", x.what(), {}, {}, 0, 0};
      }
    }
    if (m.ok)
      m.location = {e->type_tag, e->size, e->offset,
                    reinterpret_cast<const std::byte*>(e->inline_bytes.data())};
  } else {
    m.ok = false;
    m.error = e->error->describe();
  }
  ipc::append(w.out.buffer(), m);
  mark_dirty(w, true);
}

void node_runtime::seal(object_entry* e, const ipc::value_location& loc,
                        std::vector<object_id> contained, worker_link* from) {
  e->type_tag = loc.type_tag;
  e->size = loc.size;
  if (loc.offset == ipc::no_offset) {
    e->inline_bytes.assign(reinterpret_cast<const char*>(loc.inline_data), loc.size);
  } else {
    e->offset = loc.offset;
    if (from) from->extents.erase(loc.offset);
    store_->track(e);
  }
  for (const auto& id : contained)
    if (object_entry* c = dir_.acquire(id)) e->contained.push_back(c);
  publish(e, state_ready);
  for (auto* d : e->dependents) {
    if (--d->pending_deps != 0) continue;
    if (d->actor) actor_dispatch(*d->actor);  // it waits in its actor's queue
    else enqueue(d);
  }
  e->dependents.clear();
  for (const auto& s : e->subscribers) notify(s, e);
  e->subscribers.clear();
}

void node_runtime::fail_task(task_spec* first, ipc::failure_ptr first_error, bool in_flight) {
  // Failure flows to every task waiting on the results, each adding its name.
  std::vector<std::pair<task_spec*, ipc::failure_ptr>> work{{first, std::move(first_error)}};
  std::vector<actor_record*> unblocked;  // actors whose queue loses a call not sent yet
  while (!work.empty()) {
    auto [t, err] = std::move(work.back());
    work.pop_back();
    stop_waiting(t);  // one that waited on arguments (cancelled, its actor dead) stops now
    if (t->actor && t->worker < 0 && t->mode != detail::call_mode::construct)
      unblocked.push_back(t->actor);
    for (auto* e : t->returns) {
      if (e->status() != state_pending) continue;
      e->error = err;
      publish(e, state_failed);
      for (auto* d : e->dependents) {
        if (d->pending_deps <= 0) continue;  // already failed through another argument
        stop_waiting(d, e);  // e's list is cleared below
        work.emplace_back(d, ipc::chain_failure(err, d->name()));
      }
      e->dependents.clear();
      for (const auto& s : e->subscribers) notify(s, e);
      e->subscribers.clear();
    }
    if (t != first || !in_flight) finish_task(t);
  }
  // A failed call at the front of its actor's queue no longer holds back the next.
  for (auto* a : unblocked) actor_dispatch(*a);
}

void node_runtime::cancel_task(task_spec* t) {
  if (t->cancelled || t->mode == detail::call_mode::construct) return;
  if (t->actor && t->worker >= 0) return;  // its actor runs it: a method is never interrupted
  const std::uint64_t key = t->key;
  ipc::error_info err{ipc::error_kind::cancelled, "manta::task_cancelled_error",
                      "manta: task '" + t->name() + "' was cancelled", t->name(), {}, 0, 0};
  if (t->worker < 0) {  // not sent: ready, waiting on arguments, or in its actor's queue
    if (t->queued) {
      ready_.erase(std::find(ready_.begin(), ready_.end(), t));
      t->queued = false;
    }
    fail_task(t, err);
  } else {
    // Running, or waiting in its worker's pipe: only ending the process stops it.
    // Its results fail now; what it may still send is ignored (on_task_done).
    t->cancelled = true;
    fail_task(t, err, /*in_flight=*/true);
    worker_link& w = *workers_[t->worker];
    w.killed_to_cancel = true;
    MANTA_DEBUG << "killing worker pid " << w.pid << " to cancel '" << t->name() << "'";
    if (w.pid > 0) ::kill(w.pid, SIGKILL);
  }
  // What it submitted and has not finished goes too (as Ray's recursive cancel).
  if (nested_live_ == 0) return;
  std::vector<std::uint64_t> children;
  for (const auto& [k, c] : tasks_)
    if (c->parent == key) children.push_back(k);
  for (std::uint64_t k : children)
    if (auto it = tasks_.find(k); it != tasks_.end()) cancel_task(it->second);
}

void node_runtime::stop_waiting(task_spec* t, object_entry* except) {
  if (t->pending_deps <= 0) return;
  for (auto* d : t->deps) {
    auto& ds = d->dependents;
    if (d != except) ds.erase(std::remove(ds.begin(), ds.end(), t), ds.end());
  }
  t->pending_deps = 0;
}

void node_runtime::finish_task(task_spec* t) {
  if (t->parent) --nested_live_;
  for (auto* e : t->returns) e->producer = nullptr;
  if (t->actor) {  // a call that failed before it was sent leaves its actor's queue
    auto& q = t->actor->queue;
    q.erase(std::remove(q.begin(), q.end(), t), q.end());
  }
  tasks_.erase(t->key);
  delete t;
}

void node_runtime::drop_grant(worker_link& w, task_spec& t) {
  if (t.grant == ipc::no_offset) return;
  // Unless its result adopted it (seal erased it from extents), give it back.
  if (w.extents.erase(t.grant)) store_->deallocate(t.grant);
  t.grant = ipc::no_offset;
}

void node_runtime::requeue_front(task_spec* t) {
  t->worker = -1;
  t->queued = true;
  ready_.push_front(t);
}

}  // namespace manta::runtime

// runtime/scheduler.cpp: tasks from registration to their end. A task is ready
// when every argument is sealed; placement picks the worker; its results are
// sealed when task_done arrives, or it fails, and everything depending on it
// with it. Actor calls wait in their actor's queue instead (actors.cpp).
#include "runtime/scheduler.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include <manta/errors.hpp>

#include "observe/log.hpp"
#include "process/args_blob.hpp"
#include "ipc/owned_fds.hpp"

namespace manta::runtime {

scheduler::scheduler(config c, directory& dir, object_store& store, resource_ledger ledger,
                     scheduler_host& host)
    : cfg_(c), dir_(dir), store_(store), ledger_(std::move(ledger)), host_(host), place_(ledger_, dir_, graph_) {
  std::vector<worker_state*> pool;
  for (std::size_t i = 0; i < cfg_.max_slots; ++i) {
    auto w = std::make_unique<worker_link>();
    w->slot = w->place.slot = static_cast<int>(i);
    if (cfg_.control) {
      w->place.assigned = &cfg_.control->slots[i].assigned;
      w->place.ahead = cfg_.control->slots[i].ahead;
    }
    if (i < cfg_.pool_size) pool.push_back(&w->place);
    links_.push_back(std::move(w));
  }
  place_.set_workers(std::move(pool));
  slots_in_use_.store(static_cast<int>(cfg_.pool_size));
  if (cfg_.control) cfg_.control->slots_in_use.store(static_cast<std::uint32_t>(cfg_.pool_size));
}

scheduler::~scheduler() { clear(); }

void scheduler::start() {
  for (std::size_t i = 0; i < cfg_.pool_size; ++i) request_spawn(static_cast<int>(i));
}

std::optional<std::string> scheduler::admit(task_spec& t) const {
  if (t.mode == detail::call_mode::method) return std::nullopt;  // takes nothing
  return check_demand(ledger_, t.options(), t.need(), t.mode == detail::call_mode::construct, t.name());
}

void scheduler::submit(std::unique_ptr<task_spec> owned) {
  task_spec* t = owned.get();
  ipc::failure_ptr failed_arg = graph_.add(std::move(owned));
  // Handles find it at once; an actor whose name is taken is dead already, its constructor gone.
  if (t->mode == detail::call_mode::construct && !create_actor(t)) return;
  if (failed_arg) {
    fail_task(t, ipc::chain_failure(failed_arg, t->name()));
    return;
  }
  if (lost_) {
    fail_task(t, *lost_);
    return;
  }
  register_task(t);
}

void scheduler::register_task(task_spec* t) {
  if (t->mode == detail::call_mode::construct) {
    if (t->pending_deps == 0) start_constructed(t);
  } else if (t->actor && t->actor->st == actor_record::state::dead) {
    fail_task(t, *t->actor->death);
  } else if (t->actor) {
    graph_.enter(t, t->actor->queue);  // in submission order, ready or not
    actor_dispatch(*t->actor);
  } else if (t->pending_deps == 0) {
    enqueue(t);
    dispatch();
  }
}

void scheduler::enqueue(task_spec* t) {
  if (!t->remote) {
    graph_.enter(t, graph_.ready());
    return;
  }
  // At most max_remote_in_flight go out at once; the rest wait here, their
  // arguments still in the arena, so a burst of remote work holds no copies.
  graph_.enter(t, remote_waiting_);
  send_waiting_remote();
}

namespace {
/// The bytes a remote task carries: its blob, and its stored arguments sent as
/// values (one sent by reference travels once per node, not with the task).
std::size_t carried_bytes(const task_spec& t) {
  std::size_t n = t.args.size();
  for (const object_entry* e : t.deps)
    if (!by_reference(*e, t.mode, t.actor ? std::string_view(t.actor->remote_key) : std::string_view())) n += e->size;
  return n;
}
}  // namespace

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

namespace {

/// One dispatch's scan of the ready queue: the demands found to have no room
/// (no task asking one can go before something ends), and the tasks passed.
/// A task asking one is passed unasked, and the scan stops once only such
/// tasks are left: before, each dispatch walked the whole queue, and n tasks
/// asking a custom resource took O(n^2) (40,000 ran at 2,300 a second).
/// (Nothing is allocated for a scan that passes no such task: dispatch runs
/// once per task submitted and once per task done.)
class scan_of_ready {
 public:
  /// Whether `t` asks a demand with no room: it is passed.
  bool passes(const task_spec& t) {
    if (unfit_asking_ == 0 || t.is_default()) return false;
    seen* s = find(t.need());
    if (!s || !s->unfit) return false;
    ++s->passed;
    ++unfit_behind_;
    return true;
  }
  /// `t` (not a default task) was passed. The first time its demand is seen,
  /// `no_room()` says whether no task asking it can go in this scan, and
  /// `asking(d)` how many tasks of the ready queue ask it.
  template <typename NoRoom, typename Asking>
  void passed(const task_spec& t, NoRoom&& no_room, Asking&& asking) {
    seen* s = find(t.need());
    if (!s) {
      // (Asked once: a demand with room now may run out of it later in the scan; it is then only passed slowly.)
      seen_.push_back(seen{t.need(), 0, no_room()});
      s = &seen_.back();
      last_ = {&t.need(), seen_.size() - 1};
      if (s->unfit) unfit_asking_ += asking(t.need());
    }
    ++s->passed;
    if (s->unfit) ++unfit_behind_;
  }
  /// Whether the `left` tasks from here on all ask demands with no room.
  bool only_unfit_left(std::size_t left) const { return unfit_asking_ > 0 && unfit_asking_ - unfit_behind_ == left; }

 private:
  struct seen {
    demand need;  // (a copy, so that nothing here depends on which tasks stay queued)
    std::size_t passed;  ///< its tasks passed so far, in the queue before the scan's place
    bool unfit;
  };
  seen* find(const demand& d) {
    // Tasks come in runs submitted with one set of options, sharing one demand
    // (its address is their profile's: a passed task stays queued, and holds it).
    if (&d == last_.first) return &seen_[last_.second];
    for (std::size_t i = 0; i < seen_.size(); ++i)
      if (seen_[i].need == d) {
        last_ = {&d, i};
        return &seen_[i];
      }
    return nullptr;
  }
  std::vector<seen> seen_;
  std::pair<const demand*, std::size_t> last_{nullptr, 0};  ///< the last demand found, and where
  std::size_t unfit_asking_ = 0;  ///< ready tasks asking demands with no room
  std::size_t unfit_behind_ = 0;  ///< of those, the ones before the scan's place
};

}  // namespace

void scheduler::dispatch() {
  if (!waiting_allocs_.empty()) retry_waiting_allocs();  // (a writer may have died)
  // Remote tasks go out as others come back, are cancelled or fail: every one of
  // those ends in a dispatch.
  if (!remote_waiting_.empty()) send_waiting_remote();
  if (!waiting_actors_.empty()) start_waiting_actors();
  if (!extras_.empty()) balance_extra_workers(false);  // (surplus idle ones end)
  // A worker whose tasks all wait runs what its innermost one waits for first.
  // (What it waits for was taken back if it had been sent ahead: on_block;
  // what that waits for in turn, here.)
  for (worker_state* w : place_.workers())
    if (w->blocked > 0) {
      std::vector<task_spec*> ahead_producers;
      auto lend = place_.producers_to_lend(*w, ahead_ > 0 ? &ahead_producers : nullptr);
      if (!ahead_producers.empty()) {
        for (task_spec* t : ahead_producers) take_back(*t);
        lend = place_.producers_to_lend(*w, nullptr);
      }
      for (task_spec* t : lend) send_task(link(w->slot), *t);
    }
  // Tasks sent ahead came before any in the ready queue: idle workers take them first.
  if (ahead_ > 0) steal_for_idle();
  // In order, except that a task waiting for resources (GPUs, custom ones, more
  // CPUs) lets later tasks pass, and so does one that may not nest on a blocked
  // worker. A default task that cannot go otherwise means no later one can
  // either, so the scan stops there.
  lane& ready = graph_.ready();
  scan_of_ready scan;
  bool starved = false;  // a task that fits what is free found no worker
  for (std::size_t i = 0; i < ready.size() && !scan.only_unfit_left(ready.size() - i);) {
    task_spec* t = ready[i];
    if (scan.passes(*t)) {
      ++i;
      continue;
    }
    worker_state* w = place_.pick(*t);
    const bool may_spill = remote_waiting_.empty() && remote_.size() < max_remote_in_flight;
    if (!w && !t->local_only && may_spill && host_.remote_room(*t, remote_.size())) {
      // It would queue here while a node of the cluster has a CPU free: it goes there.
      t->remote = t->spilled = true;
      if (!host_.send_remote(*t)) {
        remote_bytes_bound_ += carried_bytes(*t);
        graph_.enter(t, remote_);  // takes it out of the ready queue
        continue;
      }
      t->remote = t->spilled = false;  // it cannot go (its arguments): it waits here, and never tries again
      t->local_only = true;
    }
    const bool ahead = !w && (w = place_.pick_ahead(*t)) != nullptr;
    if (!w) {
      starved = starved || (t->is_default() ? ledger_.fits_cpu(1) : ledger_.fits(t->need()));
      if (place_.blocks_later(*t)) break;
      if (!t->is_default()) {
        // (Sending others only takes what is free, and more remote room.)
        scan.passed(
            *t,
            [&] { return place_.none_fits_like(*t) && !(may_spill && host_.cluster_room(t->options(), remote_.size())); },
            [&](const demand& d) { return graph_.ready_asking(d); });
      }
      ++i;
      continue;
    }
    if (!send_task(link(w->slot), *t, true, ahead)) ++i;  // (sent, it leaves the ready queue; an argument being read back: it stays)
  }
  if (starved) balance_extra_workers(true);
}

bool scheduler::send_task(worker_link& w, task_spec& t, bool may_defer, bool ahead) {
  MANTA_DEBUG << "dispatch '" << t.name() << "' to pid " << w.pid << " (slot " << w.slot << ")";
  std::string why;
  switch (pin_inputs(t, may_defer, why)) {
    case pinned::all:
      break;
    case pinned::deferred:
      return false;
    case pinned::failed: {
      // A spilled argument finds no room to come back: the call fails, not the node.
      ipc::error_info err{ipc::error_kind::object_store_full, "manta::object_store_full",
                          "manta: an argument of '" + t.name() + "' could not be read back: " + why,
                          t.name(), {}, 0, 0};
      if (t.mode == detail::call_mode::construct) {
        actor_record& a = *t.actor;
        graph_.remove(&t);
        constructed(a, &err);
      } else {
        fail_task(&t, err);
      }
      return true;
    }
  }
  const bool was_waiting = w.place.in_flight.empty() ||
                           w.place.blocked == static_cast<int>(w.place.in_flight.size());
  t.sent_seq = ++sent_seq_;  // (before mark_ahead: the number of this sending)
  if (ahead && !mark_ahead(w, t)) ahead = false;  // (placement saw a free word: never, but then it is only queued)
  t.worker = w.slot;
  place_.sent(w.place, t);
  if (t.options().max_calls > 0 && !t.actor && ++w.limited_calls[t.fn->id] >= t.options().max_calls) {
    w.retiring = true;  // this is the last call it gets: replaced once idle (on_task_done)
    w.place.usable = false;
  }
  if (t.options().timeout_ns) {
    const auto due = std::chrono::steady_clock::now() + std::chrono::nanoseconds(t.options().timeout_ns);
    const bool earliest = timeouts_.empty() || due < timeouts_.top().due;
    timeouts_.push({due, t.key, w.slot, w.generation});
    note_next_timeout();
    if (earliest) host_.wake();  // the I/O thread may sleep with no deadline, or a later one
  }
  // Offer an extent the size of the function's last large result, so the
  // worker can write its result without asking for room first.
  std::uint64_t grant_size = place_.result_grant_size(t);
  if (grant_size) {
    std::uint64_t off = store_.try_allocate(grant_size);  // never spills for it
    if (off != store::no_extent) {
      t.grant = off;
      w.extents[off] = grant_size;
    } else {
      grant_size = 0;
    }
  }
  send_args_.clear();
  process::for_each_arg(t.args, t.arg_count, [&](const process::blob_arg& a) {
    if (a.kind == process::arg_kind::value) {
      send_args_.push_back({a.tag, a.size_or_index, ipc::no_offset, reinterpret_cast<const std::byte*>(a.bytes)});
    } else {
      const object_entry* e = t.deps[a.size_or_index];  // checked at submission
      send_args_.push_back({e->type_tag, e->size, e->offset,
                            reinterpret_cast<const std::byte*>(e->inline_bytes.data())});
    }
  });
  send_ids_.clear();
  for (auto* e : t.returns) send_ids_.push_back(e->id);
  const pool_vector<int>& gpus = t.mode == detail::call_mode::construct ? t.actor->gpus : t.gpus;
  const auto concurrency = static_cast<std::uint16_t>(t.actor ? t.actor->options().max_concurrency : 1);
  // A worker that is running other tasks sends their results soon; its next
  // tasks can ride with the flush that follows. An idle worker needs them now.
  send_to(w,
          ipc::run_task{t.key, t.fn->id, t.mode, concurrency, t.options().name, send_ids_, t.grant, grant_size,
                        ahead, ahead ? t.sent_seq : 0, gpus, send_args_},
          was_waiting || ahead);  // (ahead: it must be there before the running task ends)
  return true;
}

void scheduler::mark_dirty(worker_link& w, bool now) {
  if (!w.dirty) {
    w.dirty = true;
    dirty_.push_back(w.slot);
  }
  if (now) flush(w);
}

void scheduler::flush(worker_link& w) {
  if (w.st != worker_link::state::alive) {
    w.out.buffer().clear();
    return;
  }
  if (!w.out.flush()) {
    // The process is gone (its exit is on its way): nothing more can be written,
    // and a pipe with no reader must not be watched (it is always "writable").
    w.out.buffer().clear();
    if (std::exchange(w.write_armed, false)) host_.watch_writable(w, false);
    return;
  }
  if (!w.out.empty() && !w.write_armed) {
    w.write_armed = true;
    host_.watch_writable(w, true);
  }
}

void scheduler::writable(worker_link& w) {
  if (w.st == worker_link::state::alive) flush(w);
  if ((w.out.empty() || w.st != worker_link::state::alive) && std::exchange(w.write_armed, false))
    host_.watch_writable(w, false);
}

void scheduler::flush_dirty() {
  for (int slot : dirty_) {
    worker_link& w = link(slot);
    w.dirty = false;
    flush(w);
  }
  dirty_.clear();
}

void scheduler::notify(const subscriber& s, object_entry* e) {
  if (s.slot == subscriber::cluster) return host_.object_settled(e);
  if (s.slot < 0 || s.slot >= slots_in_use()) return;
  worker_link& w = link(s.slot);
  if (w.generation != s.generation || w.st != worker_link::state::alive) return;
  ipc::object_ready m{e->id};
  if (e->status() == state_ready) {
    // The worker keeps where it lies while it holds the object: pin it for that
    // long. One it no longer holds needs no answer (holding it again, it asks again).
    auto held = w.holds.find(e->id);
    if (held == w.holds.end()) return;
    if (!held->second) {
      if (store_.try_pin(e)) {
        held->second = true;
      } else if (auto f = restore_failed_.find(e); f != restore_failed_.end()) {
        m.ok = false;
        m.error = {ipc::error_kind::object_store_full, "manta::object_store_full", f->second, {}, {}, 0, 0};
      } else {
        // Spilled: read back off the lock, then told (restored).
        if (!restoring_.count(e)) request_restore({e});
        restoring_[e].subscribers.push_back(s);
        return;
      }
    }
    if (m.ok)
      m.location = {e->type_tag, e->size, e->offset, reinterpret_cast<const std::byte*>(e->inline_bytes.data())};
  } else {
    m.ok = false;
    m.error = e->error->describe();
  }
  send_to(w, m, true);
}

void scheduler::seal(object_entry* e, const ipc::value_location& loc, std::vector<object_id> contained,
                     worker_link* from) {
  e->type_tag = loc.type_tag;
  e->size = loc.size;
  if (loc.offset == ipc::no_offset) {
    e->inline_bytes.assign(reinterpret_cast<const char*>(loc.inline_data), loc.size);
  } else {
    e->offset = loc.offset;
    if (from) from->extents.erase(loc.offset);
    store_.track(e);
  }
  for (const auto& id : contained)
    if (object_entry* c = dir_.acquire(id)) e->contained.push_back(c);
  dir_.publish(e, state_ready);
  std::vector<task_spec*> runnable;
  graph_.sealed(e, runnable);
  for (task_spec* t : runnable) {
    if (t->mode == detail::call_mode::construct) start_constructed(t);
    else if (t->actor) actor_dispatch(*t->actor);  // it waits in its actor's queue (or goes to its node)
    else enqueue(t);
  }
  for (const auto& s : e->take_subscribers()) notify(s, e);
}

void scheduler::fail_task(task_spec* first, ipc::failure_ptr why, bool in_flight) {
  const ipc::failure_ptr cause = why;
  task_graph::failure_spread spread;
  graph_.fail(first, std::move(why), spread);
  for (object_entry* e : spread.objects) {
    dir_.publish(e, state_failed);
    for (const auto& s : e->take_subscribers()) notify(s, e);
  }
  std::vector<actor_record*> unblocked;  // actors whose queue loses a call not sent yet
  tasks_failed_.fetch_add(spread.tasks.size(), std::memory_order_relaxed);
  for (task_spec* t : spread.tasks) {
    functions_.failed(t->label());
    if (t->is_call() && t->worker < 0) unblocked.push_back(t->actor);
    if (t->mode == detail::call_mode::construct && t->actor && t->actor->pending_ctor == t) {
      // The first constructor failed through an argument: the actor never starts.
      actor_record& a = *t->actor;
      a.pending_ctor = nullptr;
      ipc::error_info e = cause->describe();
      actor_dead(a, actor_error(a, "could not be constructed: an argument failed (" + e.remote_type +
                                       (e.remote_type.empty() ? "" : ": ") + e.message + ")"));
    }
    if (t == first && in_flight) continue;
    finish_task(t);
  }
  // A failed call at the front of its actor's queue no longer holds back the next.
  for (auto* a : unblocked) actor_dispatch(*a);
}

void scheduler::finish_task(task_spec* t) { graph_.remove(t); }

void scheduler::cancel(object_entry* e) {
  if (task_spec* t = task_graph::producer_of(e)) cancel_task(t);
  dispatch();
}

void scheduler::cancel_task(task_spec* t, int from) {
  stop_task(t,
            ipc::error_info{ipc::error_kind::cancelled, "manta::task_cancelled_error",
                            "manta: task '" + t->name() + "' was cancelled", t->name(), {}, 0, 0},
            from);
}

void scheduler::stop_task(task_spec* t, const ipc::error_info& err, int from) {
  if (t->cancelled || t->mode == detail::call_mode::construct) return;
  if (t->actor && t->worker >= 0) return;  // its actor runs it: a method is never interrupted
  const std::uint64_t key = t->key;
  take_back(*t);  // sent ahead and not started: it needs no process killed
  if (t->worker < 0) {  // not sent: ready, waiting on arguments, or in its actor's queue; or remote
    if (t->in_lane == &remote_) {
      host_.cancel_remote(t->key);  // its node stops it, or drops it if queued
      // An actor's call on another node: dropped there if its actor was not
      // sent it yet, else it runs (a method is never interrupted, as here).
      // Its outcome says which: failing it now would say it never ran.
      if (t->is_call()) return;
    }
    fail_task(t, err);
  } else {
    // Running, or waiting in its worker's pipe: only ending the process stops it.
    // Its results fail now; what it may still send is ignored (on_task_done).
    t->cancelled = true;
    fail_task(t, err, /*in_flight=*/true);
    worker_link& w = link(t->worker);
    if (t->worker == from) {
      // Asked from its own process (it runs nested there): not interrupted.
      MANTA_DEBUG << "'" << t->name() << "' was cancelled from its own worker pid " << w.pid
                  << "; it runs to its end, its results already failed";
    } else {
      w.killed_to_cancel = true;
      w.place.usable = false;
      MANTA_DEBUG << "killing worker pid " << w.pid << " to stop '" << t->name() << "'";
      host_.kill(w.pid);
    }
  }
  // What it submitted and has not finished goes too (as Ray's recursive cancel).
  // By key: cancelling one child may finish others.
  std::vector<std::uint64_t> children;
  for (task_spec* c : graph_.children_of(key)) children.push_back(c->key);
  for (std::uint64_t k : children)
    if (task_spec* c = graph_.find(k)) cancel_task(c, from);
}

void scheduler::expire_timeouts(std::chrono::steady_clock::time_point now) {
  while (!timeouts_.empty() && timeouts_.top().due <= now) {
    const timeout_entry due = timeouts_.top();
    timeouts_.pop();
    task_spec* t = graph_.find(due.key);
    if (!t || t->worker != due.slot || link(due.slot).generation != due.generation) continue;
    const double seconds = static_cast<double>(t->options().timeout_ns) / 1e9;
    char limit[32];
    std::snprintf(limit, sizeof limit, "%g s", seconds);
    if (t->is_call()) {
      time_out_call(t, link(due.slot), limit);
      continue;
    }
    MANTA_INFO << "'" << t->name() << "' ran past its timeout of " << limit << "; killing worker pid "
               << link(due.slot).pid;
    stop_task(t,
              ipc::error_info{ipc::error_kind::timeout, "manta::timeout_error",
                              "manta: task '" + t->name() + "' ran longer than its timeout of " + limit +
                                  "; its process was killed and replaced",
                              t->name(), {}, link(due.slot).pid, 0},
              -1);
  }
  note_next_timeout();
  dispatch();
}

bool scheduler::kill_for_memory(const std::function<memory_usage()>& read_usage, double threshold) {
  if (!cfg_.control || lost_ || stopping_) return false;
  for (int i = 0; i < slots_in_use(); ++i)
    if (link(i).killed_for_memory && link(i).st == worker_link::state::alive) return false;  // not dead yet
  const memory_usage m = read_usage();
  if (m.fraction() <= threshold) return false;
  worker_link* victim = nullptr;
  task_spec* newest = nullptr;
  bool newest_retriable = false;
  for (int i = 0; i < slots_in_use(); ++i) {
    worker_link& w = link(i);
    if (w.st != worker_link::state::alive || w.actor) continue;  // actors keep state: not restarted for this
    if (w.killed_to_cancel || !w.kill_reason.empty()) continue;  // dying already
    const process::process_slot& slot = cfg_.control->slots[w.slot];
    const std::uint32_t depth = std::min<std::uint32_t>(slot.depth.load(), process::max_depth);
    if (depth == 0) continue;
    task_spec* t = graph_.find(slot.running[depth - 1].load());  // the innermost: the newest there
    if (!t || t->worker != w.slot || t->cancelled) continue;
    const bool retriable = t->options().max_retries < 0 || t->attempts < t->options().max_retries;
    if (!newest || (retriable && !newest_retriable) ||
        (retriable == newest_retriable && t->sent_seq > newest->sent_seq)) {
      victim = &w;
      newest = t;
      newest_retriable = retriable;
    }
  }
  if (!victim) return false;
  char why[256];
  std::snprintf(why, sizeof why,
                "killed by the memory monitor: the machine used %s, above the threshold of %.1f%%; "
                "the task's process held %.0f MiB",
                m.describe().c_str(), 100 * threshold,
                static_cast<double>(resident_bytes_of(victim->pid)) / (1 << 20));
  victim->kill_reason = why;
  victim->killed_for_memory = true;
  victim->place.usable = false;
  MANTA_WARN << "'" << newest->name() << "' in worker pid " << victim->pid << " " << why;
  host_.kill(victim->pid);
  return true;
}

void scheduler::time_out_call(task_spec* t, worker_link& host, const std::string& limit) {
  if (t->cancelled) return;
  const std::string why = "call '" + t->name() + "' ran past its timeout of " + limit;
  MANTA_INFO << why << "; killing actor " << t->actor->label << " (pid " << host.pid << ")";
  t->cancelled = true;  // its result, should it still come, is ignored
  fail_task(t,
            ipc::error_info{ipc::error_kind::timeout, "manta::timeout_error",
                            "manta: " + why + "; its actor's process was killed", t->name(), {}, host.pid, 0},
            /*in_flight=*/true);
  host.killed_to_cancel = true;  // the calls sent with it are retried uncharged
  host.kill_reason = "killed: its " + why;
  host.place.usable = false;
  host_.kill(host.pid);
}

void scheduler::note_next_timeout() noexcept {
  const auto next =
      std::min({timeouts_.empty() ? std::chrono::steady_clock::time_point::max() : timeouts_.top().due,
                alloc_retry_at_, extras_check_at_});
  next_timeout_.store(next.time_since_epoch().count(), std::memory_order_release);
}

void scheduler::drop_grant(worker_link& w, task_spec& t) {
  if (t.grant == ipc::no_offset) return;
  // Unless its result adopted it (seal erased it from extents), give it back.
  if (w.extents.erase(t.grant)) store_.deallocate(t.grant);
  t.grant = ipc::no_offset;
}

std::map<std::string, double> scheduler::resources(bool available_only) const {
  return available_only ? ledger_.available() : ledger_.totals();
}

void scheduler::clear() {
  waiting_allocs_.clear();  // (their workers are gone)
  restoring_.clear();       // (the spiller is stopped: its counts went with its jobs)
  alloc_retry_at_ = std::chrono::steady_clock::time_point::max();
  graph_.clear();
  for (auto& [name, e] : actor_names_) detail::release(e);
  actor_names_.clear();
  waiting_actors_.clear();
  actors_.clear();
  for (auto& w : links_) {
    for (const auto& [id, pinned] : w->holds)
      if (auto* e = dir_.find(id)) detail::release(e);
    w->holds.clear();
    w->extents.clear();
    w->place.in_flight.clear();
    for (int fd : {w->out_fd, w->in_fd})
      if (fd >= 0) {
        ipc::disown_fd(fd);
        ::close(fd);
      }
    w->out_fd = w->in_fd = -1;
    w->out = ipc::outbox();
    w->in = ipc::inbox();
    w->st = worker_link::state::dead;
  }
}

}  // namespace manta::runtime

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

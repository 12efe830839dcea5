// runtime/actors.cpp: actors. Each lives in a process of its own, forked into a
// host slot once its constructor's arguments are sealed and its resources are
// free; its calls wait in its queue and go to that process in submission order
// once their arguments are ready. A host that dies is restarted (constructor
// re-run) up to max_restarts; calls in flight are retried up to
// max_task_retries, otherwise they fail with actor_died_error, as every call
// does once the actor is dead.
#include <algorithm>

#include <manta/errors.hpp>

#include "observe/log.hpp"
#include "runtime/scheduler.hpp"

namespace manta::runtime {

actor_record::~actor_record() {
  for (auto* e : ctor_deps) detail::release(e);
  for (auto* e : ctor_contained) detail::release(e);
}

ipc::error_info scheduler::actor_error(const actor_record& a, const std::string& what) const {
  return {ipc::error_kind::actor_died, "manta::actor_died_error", "manta: actor " + a.label + " " + what,
          a.label, {}, 0, 0};
}

bool scheduler::create_actor(task_spec* ctor) {
  actors_.push_back(std::move(ctor->new_actor));
  actor_record& a = *actors_.back();
  a.entry = ctor->returns.at(0);
  a.class_tag = ctor->fn->class_tag;
  a.name = ctor->options().name;
  const std::string& label = ctor->options().class_label;
  a.class_name = label.empty() ? detail::actor_class_name(a.class_tag) : label;
  a.label = a.class_name + (a.name.empty() ? "" : " '" + a.name + "'");
  a.profile = ctor->profile;
  a.remote = ctor->remote;
  a.pending_ctor = ctor;
  // The entry stands for the actor: handles point to it; it is never read as a value.
  dir_.publish(a.entry, state_ready);
  if (!a.name.empty()) {
    // Reserved at submission from the driver; from a worker, reserved here.
    auto [it, fresh] = actor_names_.emplace(a.name, a.entry);
    if (fresh) {
      detail::acquire(a.entry);  // a named actor lives until kill or shutdown
    } else if (it->second != a.entry) {
      a.name.clear();  // the name belongs to the other actor
      actor_dead(a, actor_error(a, "could not start: the name is taken"));  // (its constructor goes with it)
      return false;
    }
    host_.offer_named(a);  // (a driver of a cluster: its name is known there too)
  }
  return true;
}

void scheduler::start_constructed(task_spec* ctor) {
  actor_record& a = *ctor->actor;
  if (a.remote) {  // it starts on another node: its constructor goes there like a task
    if (a.st == actor_record::state::dead) return;
    a.st = actor_record::state::constructing;
    enqueue(ctor);
    return;
  }
  if (a.awaiting_name) {  // (its name may be taken in the cluster: it waits for the head)
    a.start_deferred = true;
    return;
  }
  a.pending_ctor = nullptr;
  a.ctor = ctor->fn;
  a.ctor_args = std::move(ctor->args);
  a.ctor_arg_count = ctor->arg_count;
  a.ctor_deps = std::move(ctor->deps);  // sealed, so it waits on none of them
  a.ctor_contained = std::move(ctor->contained);
  graph_.remove(ctor);  // its hold on the entry goes; the caller's handle keeps it
  start_actor(a);
}

int scheduler::free_host_slot() {
  for (std::size_t i = cfg_.pool_size; i < cfg_.max_slots; ++i) {
    worker_link& w = *links_[i];
    if (w.st != worker_link::state::dead || w.actor) continue;
    if (static_cast<int>(i) >= slots_in_use()) {
      slots_in_use_.store(static_cast<int>(i) + 1, std::memory_order_release);
      if (cfg_.control) cfg_.control->slots_in_use.store(static_cast<std::uint32_t>(i) + 1);
    }
    return static_cast<int>(i);
  }
  return -1;
}

void scheduler::start_actor(actor_record& a) {
  if (a.st == actor_record::state::dead) return;
  if (lost_) {
    actor_dead(a, *lost_);
    return;
  }
  if (!a.holds_resources) {
    if (!ledger_.fits(a.need())) {  // waits until tasks or actors give some back
      a.st = actor_record::state::waiting;
      if (std::find(waiting_actors_.begin(), waiting_actors_.end(), &a) == waiting_actors_.end())
        waiting_actors_.push_back(&a);
      return;
    }
    ledger_.take(a.need(), a.gpus);
    a.holds_resources = true;
  }
  if (a.host < 0) {
    a.host = free_host_slot();
    if (a.host < 0) {
      actor_dead(a, actor_error(a, "could not start: every process slot is taken (" +
                                       std::to_string(cfg_.max_slots) + ")"));
      return;
    }
    link(a.host).actor = &a;
  }
  a.st = actor_record::state::starting;
  request_spawn(a.host);
}

void scheduler::start_waiting_actors() {
  std::vector<actor_record*> waiting = std::move(waiting_actors_);
  waiting_actors_.clear();
  for (actor_record* a : waiting) start_actor(*a);
}

void scheduler::send_constructor(worker_link& host, actor_record& a) {
  if (a.st == actor_record::state::dead) {  // killed while its process started
    host_.kill(host.pid);
    return;
  }
  auto t = std::make_unique<task_spec>();
  t->key = new_key();
  t->fn = a.ctor;
  t->mode = detail::call_mode::construct;
  t->arg_count = a.ctor_arg_count;
  t->args = a.ctor_args;
  t->profile = a.profile;
  t->actor = &a;
  if (cfg_.timeline && cfg_.timeline->on()) t->submitted_ns = observe::now_ns();  // sent to its new process now
  for (auto* e : a.ctor_deps) {
    detail::acquire(e);
    t->deps.push_back(e);
  }
  object_entry* result = dir_.create(dir_.next_id(), 1);  // the constructor's (unit) result
  dir_.insert(result);
  t->returns.push_back(result);
  task_spec* raw = t.get();
  graph_.add(std::move(t));
  a.st = actor_record::state::constructing;
  send_task(host, *raw, /*may_defer=*/false);  // (its state says constructing: it goes now)
  mark_dirty(host, true);
}

void scheduler::constructed(actor_record& a, const ipc::error_info* error) {
  if (a.st == actor_record::state::dead) return;
  if (error) {
    actor_dead(a, actor_error(a, "could not be constructed: " + error->remote_type + ": " + error->message));
    return;
  }
  a.st = actor_record::state::alive;
  actor_dispatch(a);
}

void scheduler::actor_dispatch(actor_record& a) {
  if (a.st != actor_record::state::alive) return;
  if (a.remote) {
    // To its node through the cluster, in submission order: a call whose
    // arguments are not ready holds back the ones behind it.
    bool any = false;
    while (!a.queue.empty() && a.queue.front()->pending_deps == 0) {
      task_spec* t = a.queue.front();
      t->remote = true;
      graph_.enter(t, remote_waiting_);
      any = true;
    }
    if (any) send_waiting_remote();
    return;
  }
  worker_link& w = link(a.host);
  bool sent = false;
  // In order: a call whose arguments are not ready holds back the ones behind it.
  // A call reading stored objects waits until the actor has room to run it: sent
  // early, its arguments would stay pinned in the arena, unspillable.
  const auto busy = [&] {
    return static_cast<int>(w.place.in_flight.size()) >= std::max(1, a.options().max_concurrency);
  };
  // A call with a timeout is timed from when it is sent: it waits for a free thread.
  const auto waits_for_room = [](const task_spec& t) {
    return t.options().timeout_ns != 0 || placement::has_stored_inputs(t);
  };
  while (!a.queue.empty() && a.queue.front()->pending_deps == 0 && a.st == actor_record::state::alive &&
         !(waits_for_room(*a.queue.front()) && busy())) {
    task_spec& t = *a.queue.front();
    if (!send_task(w, t)) break;  // an argument is being read back (restored() dispatches every actor)
    sent = true;  // at once if the actor was idle, else with its next result's flush
  }
  // With several calls at once, one in flight may wait for one of these: send now.
  if (sent && a.options().max_concurrency > 1) mark_dirty(w, true);
}

void scheduler::actor_host_died(worker_link& w, const std::string& cause) {
  actor_record& a = *w.actor;
  // Which calls had started: a host running one call at a time records it (a
  // threaded one does not: all its calls count as started).
  const std::vector<std::uint64_t> running = running_keys(w);
  auto started = [&](const task_spec* t) {
    return a.options().max_concurrency > 1 || std::find(running.begin(), running.end(), t->key) != running.end();
  };
  std::vector<task_spec*> lost(w.place.in_flight.begin(), w.place.in_flight.end());
  std::vector<task_spec*> calls;
  for (task_spec* t : lost) {
    graph_.leave(t);
    t->worker = -1;
    unpin_inputs(*t);
    t->grant = ipc::no_offset;  // freed with the process's other extents
    if (t->mode == detail::call_mode::construct || t->cancelled) graph_.remove(t);  // a timed-out call failed already
    else calls.push_back(t);
  }
  close_link(w);
  const bool restart = a.st != actor_record::state::dead && !stopping_ && !lost_ &&
                       (a.options().max_restarts < 0 || a.restarts < a.options().max_restarts);
  if (restart) {
    ++a.restarts;
    actor_restarts_.fetch_add(1, std::memory_order_relaxed);
    MANTA_INFO << "actor " << a.label << " died (" << cause << "); restart " << a.restarts;
    // Starting before any call fails: a failed call lets its actor dispatch the
    // ones behind it, which went to the dead process and were lost.
    a.st = actor_record::state::starting;
    for (auto it = calls.rbegin(); it != calls.rend(); ++it) {  // keep their order at the front
      task_spec* t = *it;
      // Killed for another call's timeout, or queued behind the call that
      // crashed: not this one's fault.
      if (w.killed_to_cancel || !started(t)) {
        graph_.enter(t, a.queue, /*at_front=*/true);
      } else if (a.options().max_task_retries < 0 || t->attempts < a.options().max_task_retries) {
        ++t->attempts;
        task_retries_.fetch_add(1, std::memory_order_relaxed);
        MANTA_DEBUG << "retrying call '" << t->name() << "' on the restarted actor " << a.label;
        graph_.enter(t, a.queue, /*at_front=*/true);
      } else {
        fail_task(t, actor_error(a, "died (" + cause + ") while running this call"));
      }
    }
    request_spawn(a.host);
    return;
  }
  ipc::error_info why = a.death ? *a.death
                                : actor_error(a, "died: " + cause +
                                                     (a.restarts ? " (after " + std::to_string(a.restarts) +
                                                                       " restarts)"
                                                                 : ""));
  for (task_spec* t : calls) fail_task(t, why);
  w.actor = nullptr;
  a.host = -1;  // the process is gone: its slot and resources go back
  actor_dead(a, why);
  dispatch();
  forget_actors();
}

void scheduler::actor_dead(actor_record& a, const ipc::error_info& why) {
  a.answered.store(true, std::memory_order_release);  // (nothing waits for its start now)
  if (a.remote) dir_.wake_all();  // (a serving loop may wait to hand its handle over)
  if (a.st != actor_record::state::dead) {
    a.st = actor_record::state::dead;
    a.death = std::make_unique<ipc::error_info>(why);
    if (task_spec* ctor = std::exchange(a.pending_ctor, nullptr)) graph_.remove(ctor);
    while (!a.queue.empty()) fail_task(a.queue.front(), why);  // each leaves the queue
    waiting_actors_.erase(std::remove(waiting_actors_.begin(), waiting_actors_.end(), &a),
                          waiting_actors_.end());
    if (a.remote_started && (!a.borrowed || a.killed))
      host_.end_remote_actor(a.remote_key, a.killed);  // its node ends it too
    else if (!a.remote && !a.remote_key.empty())
      host_.end_remote_actor(a.remote_key, false);  // offered to the cluster: later calls from there fail there
    if (!a.name.empty()) {
      auto it = actor_names_.find(a.name);
      if (it != actor_names_.end() && it->second->actor == &a) {
        object_entry* e = it->second;
        actor_names_.erase(it);
        detail::release(e);  // may retire the actor
      }
    }
  }
  if (a.host >= 0) {
    worker_link& w = link(a.host);
    // Its calls in flight fail when its process is reported gone.
    if (w.st != worker_link::state::dead) {
      host_.kill(w.pid);
      return;
    }
    w.actor = nullptr;  // asked for, never started: the slot is free again
    a.host = -1;
  }
  give_back_resources(a);
}

void scheduler::give_back_resources(actor_record& a) {
  if (!a.holds_resources) return;
  ledger_.give(a.need(), a.gpus);
  a.gpus.clear();
  a.holds_resources = false;
}

void scheduler::retire(actor_record* a) {
  a->entry = nullptr;
  if (a->st != actor_record::state::dead) actor_dead(*a, actor_error(*a, "has no handle left"));
  forget_actors();
}

void scheduler::forget_actors() {
  // A record goes once no handle and no process refer to it.
  actors_.erase(std::remove_if(actors_.begin(), actors_.end(),
                               [](const auto& a) { return !a->entry && a->host < 0 && !a->pending_ctor; }),
                actors_.end());
}

bool scheduler::reserve_name(const std::string& name, object_entry* entry) {
  if (actor_names_.count(name)) return false;
  detail::acquire(entry);
  actor_names_.emplace(name, entry);
  return true;
}

object_entry* scheduler::adopt_remote_actor(const std::string& key, std::uint64_t class_tag, const std::string& name) {
  return adopt_remote_actor(key, class_tag, detail::actor_class_name(class_tag) + " '" + name + "'", dir_.next_id());
}

object_entry* scheduler::adopt_remote_actor(const std::string& key, std::uint64_t class_tag, const std::string& label,
                                            const object_id& id) {
  auto a = std::make_unique<actor_record>();
  object_entry* e = dir_.create(id, 1);  // the caller's handle
  dir_.insert(e);
  e->actor = a.get();
  a->entry = e;
  a->class_tag = class_tag;
  a->label = label;
  a->remote = a->remote_started = a->borrowed = true;
  a->answered.store(true, std::memory_order_relaxed);  // (it came from the cluster: the head knows it)
  a->remote_key = key;
  a->st = actor_record::state::alive;
  dir_.publish(e, state_ready);
  actors_.push_back(std::move(a));
  return e;
}

void scheduler::name_answered(const std::string& key, const std::string& why) {
  for (auto& a : actors_) {
    if (a->remote || !a->awaiting_name || (!key.empty() && a->remote_key != key)) continue;
    a->awaiting_name = false;
    if (a->st == actor_record::state::dead) continue;  // (killed meanwhile)
    if (!why.empty()) {
      actor_dead(*a, actor_error(*a, "could not start: " + why));  // its constructor never ran
    } else if (std::exchange(a->start_deferred, false) && a->pending_ctor) {
      start_constructed(a->pending_ctor);
    }
  }
  dispatch();
}

object_entry* scheduler::offered_actor(const std::string& key) {
  for (auto& a : actors_)
    if (!a->remote && a->remote_key == key && a->entry) return dir_.acquire(a->entry->id);  // (null if going)
  return nullptr;
}

void scheduler::remote_actor_killed(const std::string& key, const std::string& why) {
  for (auto& a : actors_) {
    if (!a->remote && a->remote_key == key && a->st != actor_record::state::dead) {  // one this node offered
      a->killed = true;
      actor_dead(*a, actor_error(*a, !why.empty() ? "could not start: " + why
                                                  : "was killed (manta::kill) elsewhere in the cluster: by another "
                                                    "driver, or a task or actor on a node holding its handle "
                                                    "(the actor itself, maybe)"));
      continue;
    }
    if (!a->remote || a->borrowed || a->remote_key != key || a->st == actor_record::state::dead) continue;
    a->remote_started = false;  // (nothing to tell the head: it forgot it)
    a->killed = true;
    actor_dead(*a, actor_error(*a, "was killed (manta::kill) elsewhere in the cluster: by another driver, or a task "
                                   "on a node holding its handle"));
  }
}

void scheduler::answer_actor_lookup(int slot, std::uint64_t generation, std::uint64_t request, const std::string& key,
                                    std::uint64_t class_tag, const std::string& name, const std::string& error) {
  if (slot < 0 || slot >= slots_in_use()) return;
  worker_link& w = link(slot);
  if (w.generation != generation || w.st != worker_link::state::alive) return;
  object_id id;
  if (!key.empty() && error.empty()) {
    object_entry* e = adopt_remote_actor(key, class_tag, name);  // its count: the worker's hold
    id = e->id;
    w.holds.emplace(id, false);
  }
  send_to(w, ipc::actor_reply{request, id, error}, true);
}

object_entry* scheduler::find_actor(const std::string& name, std::uint64_t class_tag) {
  auto it = actor_names_.find(name);
  if (it == actor_names_.end()) return nullptr;
  const actor_record& a = *it->second->actor;
  if (a.class_tag != class_tag)
    throw usage_error("manta: the actor named '" + name + "' is a " + detail::actor_class_name(a.class_tag) +
                      ", not a " + detail::actor_class_name(class_tag));
  detail::acquire(it->second);
  return it->second;
}

void scheduler::kill_actor(object_entry* e) {
  if (!e->actor) throw usage_error("manta: kill of something that is not an actor");
  e->actor->killed = true;
  actor_dead(*e->actor, actor_error(*e->actor, "was killed by manta::kill"));
}

}  // namespace manta::runtime

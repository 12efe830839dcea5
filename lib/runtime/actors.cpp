// runtime/actors.cpp: actors. Each lives in a process of its own, forked by the
// zygote into a host slot; its calls wait in its queue and go to that process in
// submission order once their arguments are ready. A host that dies is
// restarted (constructor re-run) up to max_restarts; calls in flight are retried
// up to max_task_retries, otherwise they fail with actor_died_error, as every
// call does once the actor is dead. Everything here runs with mu_ held.
#include <signal.h>

#include <algorithm>

#include "observe/log.hpp"
#include "runtime/node_runtime.hpp"

namespace manta::runtime {

actor_record::~actor_record() {
  for (auto* e : ctor_deps) detail::release(e);
  for (auto* e : ctor_contained) detail::release(e);
}

ipc::error_info node_runtime::actor_error(const actor_record& a, const std::string& what) const {
  return {ipc::error_kind::actor_died, "manta::actor_died_error", "manta: actor " + a.label + " " + what,
          a.label, {}, 0, 0};
}

void node_runtime::create_actor(task_spec* ctor, object_entry* entry) {
  actor_record& a = *ctor->actor;
  actors_.emplace_back(&a);
  a.entry = entry;
  a.class_tag = ctor->fn->class_tag;
  a.name = ctor->options.name;
  a.label = detail::actor_class_name(a.class_tag) + (a.name.empty() ? "" : " '" + a.name + "'");
  a.options = ctor->options;
  a.need = ctor->need;
  a.ctor = ctor->fn;
  a.ctor_args = std::move(ctor->args);
  a.ctor_arg_count = ctor->arg_count;
  a.ctor_deps = std::move(ctor->deps);
  a.ctor_contained = std::move(ctor->contained);
  // The entry stands for the actor: handles point to it; it is never read as a value.
  publish(entry, state_ready);
  tasks_.erase(ctor->key);
  delete ctor;  // its hold on the entry goes; the caller's handle keeps it
  if (!a.name.empty()) {
    // Reserved at submission from the driver; from a worker, reserved here.
    auto [it, fresh] = actor_names_.emplace(a.name, entry);
    if (fresh) {
      detail::acquire(entry);  // a named actor lives until kill or shutdown
    } else if (it->second != entry) {
      a.name.clear();  // the name belongs to the other actor
      actor_dead(a, actor_error(a, "could not start: the name is taken"));
      return;
    }
  }
  start_actor(a);
}

int node_runtime::free_host_slot() {
  for (int i = static_cast<int>(pool_size_); i < process::max_slots; ++i) {
    worker_link& w = *workers_[i];
    if (w.st != worker_link::state::dead || w.actor || w.stdout_fd >= 0 || w.stderr_fd >= 0) continue;
    if (i >= slots_in_use_.load()) slots_in_use_.store(i + 1, std::memory_order_release);
    return i;
  }
  return -1;
}

void node_runtime::start_actor(actor_record& a) {
  if (a.st == actor_record::state::dead) return;
  if (!a.holds_resources) {
    if (!ledger_.fits(a.need)) {  // waits until tasks or actors give some back
      a.st = actor_record::state::waiting;
      if (std::find(waiting_actors_.begin(), waiting_actors_.end(), &a) == waiting_actors_.end())
        waiting_actors_.push_back(&a);
      return;
    }
    a.gpus = ledger_.take(a.need);
    a.holds_resources = true;
  }
  if (a.host < 0) {
    a.host = free_host_slot();
    if (a.host < 0) {
      actor_dead(a, actor_error(a, "could not start: every process slot is taken (" +
                                       std::to_string(process::max_slots) + ")"));
      return;
    }
    workers_[a.host]->actor = &a;
  }
  a.st = actor_record::state::starting;
  request_spawn(a.host);
}

void node_runtime::start_waiting_actors() {
  std::vector<actor_record*> waiting = std::move(waiting_actors_);
  waiting_actors_.clear();
  for (actor_record* a : waiting) start_actor(*a);
}

void node_runtime::send_constructor(worker_link& host, actor_record& a) {
  if (a.st == actor_record::state::dead) {  // killed while its process started
    ::kill(host.pid, SIGKILL);
    return;
  }
  auto* t = new task_spec();
  t->key = ++next_key_;
  t->fn = a.ctor;
  t->mode = detail::call_mode::construct;
  t->arg_count = a.ctor_arg_count;
  t->args = a.ctor_args;
  t->options = a.options;
  t->actor = &a;
  for (auto* e : a.ctor_deps) {
    detail::acquire(e);
    t->deps.push_back(e);
  }
  object_entry* result = new_entry(next_object_id(), 1);  // the constructor's (unit) result
  dir_.insert(result);
  t->returns.push_back(result);
  tasks_.emplace(t->key, t);
  a.st = actor_record::state::constructing;
  send_task(host, *t);
  mark_dirty(host, true);
}

void node_runtime::on_constructed(actor_record& a, const ipc::error_info* error) {
  if (a.st == actor_record::state::dead) return;
  if (error) {
    actor_dead(a, actor_error(a, "could not be constructed: " + error->remote_type + ": " +
                                     error->message));
    return;
  }
  a.st = actor_record::state::alive;
  actor_dispatch(a);
}

void node_runtime::actor_dispatch(actor_record& a) {
  if (a.st != actor_record::state::alive) return;
  worker_link& w = *workers_[a.host];
  bool sent = false;
  // In order: a call whose arguments are not ready holds back the ones behind it.
  while (!a.queue.empty() && a.queue.front()->pending_deps == 0) {
    task_spec* t = a.queue.front();
    a.queue.pop_front();
    send_task(w, *t);  // sent at once if the actor was idle, else with its next result's flush
    sent = true;
  }
  // With several calls at once, one in flight may wait for one of these: send now.
  if (sent && a.options.max_concurrency > 1) mark_dirty(w, true);
}

void node_runtime::actor_host_died(worker_link& w, const std::string& cause) {
  actor_record& a = *w.actor;
  std::vector<task_spec*> lost(w.in_flight.begin(), w.in_flight.end());
  w.in_flight.clear();
  close_link(w);

  std::vector<task_spec*> calls;
  for (task_spec* t : lost) {
    t->worker = -1;
    unpin_inputs(*t);
    if (t->mode == detail::call_mode::construct) {
      tasks_.erase(t->key);
      delete t;
    } else {
      calls.push_back(t);
    }
  }
  const bool restart = a.st != actor_record::state::dead && !stopping_.load() &&
                       (a.options.max_restarts < 0 || a.restarts < a.options.max_restarts);
  if (restart) {
    ++a.restarts;
    actor_restarts_.fetch_add(1, std::memory_order_relaxed);
    MANTA_INFO << "actor " << a.label << " died (" << cause << "); restart " << a.restarts;
    for (auto it = calls.rbegin(); it != calls.rend(); ++it) {  // keep their order at the front
      task_spec* t = *it;
      if (a.options.max_task_retries < 0 || t->attempts < a.options.max_task_retries) {
        ++t->attempts;
        task_retries_.fetch_add(1, std::memory_order_relaxed);
        a.queue.push_front(t);
      } else {
        fail_task(t, actor_error(a, "died (" + cause + ") while running this call"));
      }
    }
    a.st = actor_record::state::starting;
    request_spawn(a.host);
    return;
  }
  ipc::error_info why = a.death ? *a.death
                                : actor_error(a, "died: " + cause +
                                                     (a.restarts ? " (after " + std::to_string(a.restarts) +
                                                                       " restarts)"
                                                                 : ""));
  for (task_spec* t : calls) fail_task(t, why);
  actor_dead(a, why);
  // The process is gone: its slot and resources go back.
  w.actor = nullptr;
  a.host = -1;
  if (a.holds_resources) {
    ledger_.give(a.need, a.gpus);
    a.gpus.clear();
    a.holds_resources = false;
  }
  dispatch();
  retire_actors();
}

void node_runtime::actor_dead(actor_record& a, const ipc::error_info& why) {
  if (a.st != actor_record::state::dead) {
    a.st = actor_record::state::dead;
    a.death = std::make_unique<ipc::error_info>(why);
    std::deque<task_spec*> queued = std::move(a.queue);
    a.queue.clear();
    for (task_spec* t : queued) {
      t->actor = nullptr;  // already out of the queue
      fail_task(t, why);
    }
    waiting_actors_.erase(std::remove(waiting_actors_.begin(), waiting_actors_.end(), &a),
                          waiting_actors_.end());
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
    worker_link& w = *workers_[a.host];
    // Its calls in flight fail when the zygote reports the process gone.
    if (w.st == worker_link::state::alive && w.pid > 0) ::kill(w.pid, SIGKILL);
    return;
  }
  if (a.holds_resources) {
    ledger_.give(a.need, a.gpus);
    a.gpus.clear();
    a.holds_resources = false;
  }
}

void node_runtime::retire_actors() {
  for (actor_record* a = nullptr; retired_.try_pop(a);) {
    a->entry = nullptr;
    if (a->st != actor_record::state::dead) actor_dead(*a, actor_error(*a, "has no handle left"));
  }
  // A record goes once no handle and no process refer to it.
  actors_.erase(std::remove_if(actors_.begin(), actors_.end(),
                               [](const auto& a) { return !a->entry && a->host < 0; }),
                actors_.end());
}

detail::ref_node* node_runtime::find_actor(const std::string& name, std::uint64_t class_tag) {
  call_guard guard(*this);
  scheduler_lock lock(*this);
  return find_actor_locked(name, class_tag);
}

detail::ref_node* node_runtime::find_actor_locked(const std::string& name, std::uint64_t class_tag) {
  auto it = actor_names_.find(name);
  if (it == actor_names_.end()) return nullptr;
  const actor_record& a = *it->second->actor;
  if (a.class_tag != class_tag)
    throw usage_error("manta: the actor named '" + name + "' is a " + detail::actor_class_name(a.class_tag) +
                      ", not a " + detail::actor_class_name(class_tag));
  detail::acquire(it->second);
  return it->second;
}

void node_runtime::kill_actor(detail::ref_node* node) {
  call_guard guard(*this);
  object_entry* e = checked(node);
  scheduler_lock lock(*this);
  if (!e->actor) throw usage_error("manta: kill of something that is not an actor");
  e->actor->killed = true;
  actor_dead(*e->actor, actor_error(*e->actor, "was killed by manta::kill"));
}

std::map<std::string, double> node_runtime::resources(bool available_only) {
  call_guard guard(*this);
  scheduler_lock lock(*this);
  return available_only ? ledger_.available() : ledger_.totals();
}

}  // namespace manta::runtime

// runtime/processes.cpp: the scheduler's side of process lifecycles: asking for
// a process, taking its pipes when it starts, and settling everything it held
// when it dies (its tasks retried or failed, its extents and refs given back),
// or when the node loses every process at once.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "observe/log.hpp"
#include "ipc/owned_fds.hpp"
#include "runtime/scheduler.hpp"

namespace manta::runtime {

std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* abbrev = sigabbrev_np(sig);
    return "signal " + std::to_string(sig) + " (SIG" + (abbrev ? abbrev : "?") + ": " + strsignal(sig) + ")";
  }
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  return "unknown status " + std::to_string(status);
}

void scheduler::request_spawn(int slot) {
  worker_link& w = link(slot);
  w.st = worker_link::state::starting;
  ++w.generation;
  if (cfg_.control) {
    cfg_.control->slots[slot].depth.store(0, std::memory_order_relaxed);
    cfg_.control->slots[slot].spinning.store(0, std::memory_order_relaxed);
  }
  host_.spawn(slot, ++next_process_number_);
}

void scheduler::balance_extra_workers(bool starved) {
  if (stopping_ || lost_) return;
  using clock = std::chrono::steady_clock;
  const auto now = clock::now();
  const std::size_t waiting = static_cast<std::size_t>(place_.all_waiting());
  auto check_at = clock::time_point::max();
  for (std::size_t i = 0; i < extras_.size();) {
    worker_link& w = link(extras_[i]);
    if (w.st.load(std::memory_order_relaxed) != worker_link::state::alive || !w.place.in_flight.empty()) {
      w.idle_since = {};
      ++i;
      continue;
    }
    if (w.idle_since == clock::time_point{}) w.idle_since = now;
    // A surplus one ends once idle for a while: a loop whose every round waits
    // would otherwise fork and kill one per round.
    if (extras_.size() <= waiting || now - w.idle_since < extra_idle_limit) {
      if (extras_.size() > waiting) check_at = std::min(check_at, w.idle_since + extra_idle_limit);
      ++i;
      continue;
    }
    MANTA_DEBUG << "extra worker pid " << w.pid << " ends: fewer workers wait";
    w.retiring = true;
    w.place.usable = false;
    host_.kill(w.pid);
    extras_.erase(extras_.begin() + static_cast<std::ptrdiff_t>(i));
  }
  const auto before = std::exchange(extras_check_at_, check_at);
  note_next_timeout();
  if (check_at < before) host_.wake();  // the I/O thread may sleep with no deadline
  // Half of the slots above the pool stay for actors.
  const std::size_t cap = std::min(cfg_.max_extra_workers, (cfg_.max_slots - cfg_.pool_size) / 2);
  if (!starved || extras_.size() >= waiting || extras_.size() >= cap || now < extra_spawn_after_) return;
  const int slot = free_host_slot();
  if (slot < 0) return;  // every slot holds a process: the pool stays as it is
  worker_link& w = link(slot);
  w.place.extra = true;
  place_.add_worker(&w.place);
  extras_.push_back(slot);
  extras_started_.fetch_add(1, std::memory_order_relaxed);
  MANTA_DEBUG << "starting an extra worker in slot " << slot << ": " << waiting << " workers wait";
  request_spawn(slot);
}

void scheduler::spawned(int slot, pid_t pid, int to_process, int from_process) {
  if (slot < 0 || slot >= slots_in_use() || link(slot).st != worker_link::state::starting || lost_) {
    ::close(to_process);
    ::close(from_process);
    host_.kill(pid);  // nobody asked for it (any more)
    return;
  }
  worker_link& w = link(slot);
  w.pid = pid;
  MANTA_DEBUG << (static_cast<std::size_t>(slot) >= cfg_.pool_size ? "process" : "pool worker") << " pid " << pid << " started in slot " << slot;
  w.out_fd = to_process;
  w.in_fd = from_process;
  ipc::own_fd(to_process);
  ipc::own_fd(from_process);
  ipc::set_nonblocking(w.out_fd, true);
  ipc::set_nonblocking(w.in_fd, true);
  if (cfg_.control) {
    w.out = ipc::outbox(w.out_fd, {&cfg_.control->slots[slot].inbox_seq});
    w.seen_seq = cfg_.control->slots[slot].outbox_seq.load(std::memory_order_acquire);
  } else {
    w.out = ipc::outbox(w.out_fd, {});
  }
  w.in = ipc::inbox(w.in_fd);
  w.input_closed = w.dirty = w.write_armed = w.killed_to_cancel = w.retiring = w.killed_for_memory = false;
  w.kill_reason.clear();
  w.limited_calls.clear();
  w.place.in_flight.clear();
  w.place.blocked = w.place.active_default = w.place.nondefault = w.place.unbounded = w.place.long_tasks = 0;
  w.place.expected_ns = 0;
  w.place.awaiting.clear();
  w.place.holds_cpu = false;
  w.place.last_origin = 0;  // (a new process: nothing of the last one's tasks)
  if (w.place.ahead)
    for (int i = 0; i < 2; ++i) w.place.ahead[i].store(0, std::memory_order_relaxed);  // (keys of the process before)
  w.place.usable = !w.actor;
  w.st.store(worker_link::state::alive, std::memory_order_release);
  if (cfg_.timeline && cfg_.timeline->on())
    cfg_.timeline->name_process(pid, w.actor ? "actor " + w.actor->label : "worker " + std::to_string(slot));
  if (w.actor) send_constructor(w, *w.actor);
  dispatch();
}

void scheduler::spawn_failed(int slot, const std::string& why) {
  if (slot < 0 || slot >= slots_in_use()) return;
  worker_link& w = link(slot);
  if (w.st != worker_link::state::starting) return;
  w.st = worker_link::state::dead;
  last_spawn_failure_ = why;
  MANTA_ERROR << "could not start a process: " << why;
  if (actor_record* a = w.actor) {
    w.actor = nullptr;
    a->host = -1;
    actor_dead(*a, actor_error(*a, "could not start: " + why));
    forget_actors();
    dispatch();
    return;
  }
  if (w.place.extra) {  // not needed to run the pool's size: asked again when a task needs it, not at once
    forget_extra(w);
    extra_spawn_after_ = std::chrono::steady_clock::now() + extra_idle_limit;
    return;
  }
  // A pool worker: the pool runs one short until a process can be started
  // (node_runtime asks again as processes exit); if none is left, what waits
  // for the pool fails rather than waiting forever.
  const bool any = std::any_of(place_.workers().begin(), place_.workers().end(), [&](worker_state* p) {
    return link(p->slot).st != worker_link::state::dead;
  });
  if (!any && !stopping_) lose_node("no worker process could be started: " + why);
}

void scheduler::respawn_missing() {
  if (stopping_ || lost_) return;
  for (worker_state* p : place_.workers())
    if (!p->extra && link(p->slot).st == worker_link::state::dead) request_spawn(p->slot);
}

void scheduler::forget_extra(worker_link& w) {
  w.place.extra = false;
  w.idle_since = {};
  place_.remove_worker(&w.place);
  std::erase(extras_, w.slot);
  if (extras_.empty()) {  // (no surplus left to end: the I/O thread must not wake for it)
    extras_check_at_ = std::chrono::steady_clock::time_point::max();
    note_next_timeout();
  }
}

void scheduler::malformed(worker_link& w, const std::string& why) {
  // Its death (reported by the zygote) retries its tasks; nothing more is read from it.
  MANTA_ERROR << "worker pid " << w.pid << " sent a malformed message (" << why << "); replacing it";
  w.place.usable = false;
  host_.kill(w.pid);
  w.input_closed = true;
}

void scheduler::close_link(worker_link& w) {
  for (auto& [off, size] : w.extents) store_.deallocate(off);
  w.extents.clear();
  w.blocked_keys.clear();
  w.awaiting_room = false;
  for (const auto& [id, pinned] : w.holds)
    if (object_entry* e = dir_.find(id)) {
      if (pinned) store_.unpin(e);
      detail::release(e);
    }
  w.holds.clear();
  if (std::exchange(w.write_armed, false)) host_.watch_writable(w, false);
  for (int* fd : {&w.out_fd, &w.in_fd})
    if (*fd >= 0) {
      ipc::disown_fd(*fd);
      ::close(std::exchange(*fd, -1));
    }
  w.out = ipc::outbox();
  w.in = ipc::inbox();
  w.dirty = false;
  w.place.usable = false;
  w.st = worker_link::state::dead;
}

void scheduler::exited(worker_link& w, int status, std::string crash_stack) {
  if (w.st == worker_link::state::dead) return;
  w.crash_stack = std::move(crash_stack);
  const std::string cause = w.kill_reason.empty() ? describe_exit(status) : w.kill_reason;
  MANTA_DEBUG << "worker pid " << w.pid << " ended: " << cause;
  if (!stopping_ && !w.retiring) {
    processes_lost_.fetch_add(1, std::memory_order_relaxed);
    if (cfg_.timeline && cfg_.timeline->on()) cfg_.timeline->instant("process died", w.pid, cause);
  }
  if (w.actor)
    actor_host_died(w, w.crash_stack.empty() ? cause : cause + "; stack of the crashing thread:\n" + w.crash_stack);
  else pool_worker_died(w, status);
  if (cfg_.control) {  // a dead process computes and spins no more (core_free)
    cfg_.control->slots[w.slot].depth.store(0, std::memory_order_relaxed);
    cfg_.control->slots[w.slot].spinning.store(0, std::memory_order_relaxed);
  }
}

std::vector<std::uint64_t> scheduler::running_keys(const worker_link& w) const {
  std::vector<std::uint64_t> running;
  if (cfg_.control) {
    const process::process_slot& slot = cfg_.control->slots[w.slot];
    std::uint32_t depth = std::min<std::uint32_t>(slot.depth.load(), process::max_depth);
    for (std::uint32_t i = 0; i < depth; ++i) running.push_back(slot.running[i].load());
  }
  return running;
}

void scheduler::cancel_orphans(const std::vector<std::uint64_t>& parents, pid_t pid, const std::string& cause) {
  if (parents.empty() || !graph_.has_children()) return;
  const std::unordered_set<std::uint64_t> dead(parents.begin(), parents.end());
  std::vector<std::uint64_t> children;
  graph_.for_each([&](const task_spec& t) {
    if (t.parent && dead.count(t.parent)) children.push_back(t.key);
  });
  // Latest first: a child's dependents (its siblings, submitted after it) hold
  // its results until they go.
  std::sort(children.begin(), children.end(), std::greater<>());
  for (std::uint64_t key : children) {
    task_spec* t = graph_.find(key);
    if (!t || t->cancelled || t->is_call()) continue;
    const bool held = std::any_of(t->returns.begin(), t->returns.end(), [](const object_entry* r) {
      return r->count.load(std::memory_order_acquire) > 1;  // more than the task's own count
    });
    if (held) continue;
    MANTA_DEBUG << "cancelling '" << t->name() << "': the process that submitted it died and nothing holds its results";
    // Running in a process with other tasks (nested above or below them), it
    // is not killed with them: its results fail now, and it runs to its end
    // (killing the process retried the others, and cancelled what they had
    // submitted in turn: one crash could end most of the pool).
    const bool shares_its_process =
        t->worker >= 0 && std::count_if(link(t->worker).place.in_flight.begin(), link(t->worker).place.in_flight.end(),
                                        [&](const task_spec* o) { return !not_started_ahead(*o); }) > 1;
    stop_task(t,
              ipc::error_info{ipc::error_kind::cancelled, "manta::task_cancelled_error",
                              "manta: task '" + t->name() + "' was cancelled: worker pid " + std::to_string(pid) +
                                  ", which submitted it, died from " + cause + ", and nothing else held its results",
                              t->name(), {}, 0, 0},
              shares_its_process ? t->worker : -1);
  }
}

void scheduler::pool_worker_died(worker_link& w, int status) {
  const std::string cause = w.kill_reason.empty() ? describe_exit(status) : w.kill_reason;
  // Which tasks were executing (not merely queued) when it died.
  const std::vector<std::uint64_t> running = running_keys(w);
  auto was_running = [&](std::uint64_t key) {
    return std::find(running.begin(), running.end(), key) != running.end();
  };
  std::vector<task_spec*> lost(w.place.in_flight.begin(), w.place.in_flight.end());
  std::vector<std::uint64_t> lost_keys;
  for (task_spec* t : lost) lost_keys.push_back(t->key);
  // A task nested under one that died with it was submitted there: it is
  // retried uncharged if anything else holds its results, else cancelled below.
  auto submitted_here = [&](const task_spec* t) {
    return t->parent && std::find(lost_keys.begin(), lost_keys.end(), t->parent) != lost_keys.end();
  };
  std::vector<std::pair<task_spec*, ipc::error_info>> failed;
  for (auto it = lost.rbegin(); it != lost.rend(); ++it) {  // keep their order at the queue front
    task_spec* t = *it;
    place_.finished(w.place, *t);
    not_ahead(*t);  // (not running: queued, as its key still in the ahead words says)
    unpin_inputs(*t);
    t->worker = -1;
    t->grant = ipc::no_offset;  // freed with the worker's other extents below
    if (t->cancelled) {  // its results failed when it was cancelled
      finish_task(t);
      continue;
    }
    // Killed to cancel another task, the process did not fail the ones it ran.
    if (was_running(t->key) && !w.killed_to_cancel && !submitted_here(t)) {
      ++t->attempts;
      if (t->options().max_retries >= 0 && t->attempts > t->options().max_retries) {
        int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        const std::string tried = " (tried " + std::to_string(t->attempts) + " times)";
        if (w.killed_for_memory)
          failed.emplace_back(t, ipc::error_info{ipc::error_kind::out_of_memory, "manta::out_of_memory_error",
                                                 "manta: task '" + t->name() + "' in worker pid " +
                                                     std::to_string(w.pid) + " was " + cause + tried,
                                                 t->name(), {}, w.pid, sig});
        else
          failed.emplace_back(t, ipc::error_info{ipc::error_kind::worker_crashed, "",
                                                 "manta: worker pid " + std::to_string(w.pid) + " running '" +
                                                     t->name() + "' died from " + cause + tried,
                                                 t->name(), {}, w.pid, sig, w.crash_stack});
        continue;
      }
    }
    if (!submitted_here(t)) {  // (most are cancelled below)
      task_retries_.fetch_add(1, std::memory_order_relaxed);
      MANTA_DEBUG << "retrying '" << t->name() << "' (worker pid " << w.pid << " died: " << cause << ")";
    }
    graph_.enter(t, graph_.ready(), /*at_front=*/true);
  }
  place_.lost(w.place);
  close_link(w);  // (its refs go: what only it held is held by nobody now)
  for (auto& [t, err] : failed) fail_task(t, err);
  // As when an owner dies in Ray: what its tasks submitted that nobody else
  // holds would run for nothing (a crash deep in a nested chain retried every
  // level, and each retry submitted its child again).
  if (!stopping_ && !lost_) cancel_orphans(lost_keys, w.pid, cause);
  if (w.place.extra) forget_extra(w);  // (started again only if a task needs it)
  else if (!stopping_ && !lost_) request_spawn(w.slot);
  dispatch();
}

void scheduler::lose_node(const std::string& why) {
  if (lost_) return;
  MANTA_ERROR << why << "; every task and actor of this runtime fails (shutdown and init to start again)";
  lost_ = ipc::error_info{ipc::error_kind::node_died, "manta::node_died_error", "manta: " + why, {}, {}, 0, 0};
  // Its processes die with it (or already did) and nobody reports them: what
  // they ran fails, not retried, since nothing can run any more.
  for (int i = 0; i < slots_in_use(); ++i) {
    worker_link& w = link(i);
    if (w.st == worker_link::state::dead) continue;
    std::vector<task_spec*> lost(w.place.in_flight.begin(), w.place.in_flight.end());
    for (task_spec* t : lost) {
      place_.finished(w.place, *t);
      not_ahead(*t);
      unpin_inputs(*t);
      t->worker = -1;
      t->grant = ipc::no_offset;
    }
    place_.lost(w.place);
    close_link(w);
    if (w.place.extra) forget_extra(w);
    if (actor_record* a = std::exchange(w.actor, nullptr)) a->host = -1;
  }
  for (auto& a : actors_) actor_dead(*a, *lost_);
  // Everything left: in flight (just settled), ready, or waiting on arguments.
  for (std::uint64_t key : graph_.keys())
    if (task_spec* t = graph_.find(key)) fail_task(t, *lost_);
  forget_actors();
}

std::uint16_t scheduler::origin_of_process(pid_t pid) const {
  for (const auto& w : links_)
    if (w && w->pid == pid) {
      // The task it runs (the first sent of those it has), else the last it ran.
      for (const task_spec* t : w->place.in_flight) return t->origin;
      return w->place.last_origin;
    }
  return 0;
}

}  // namespace manta::runtime

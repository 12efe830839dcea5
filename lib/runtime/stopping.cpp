// runtime/stopping.cpp: tasks the scheduler stops before they finish:
// cancelled, past their timeout, or killed by the memory monitor.
#include "runtime/scheduler.hpp"

#include <algorithm>
#include <cstdio>
#include <utility>

#include <manta/errors.hpp>

#include "observe/log.hpp"

namespace manta::runtime {

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

}  // namespace manta::runtime

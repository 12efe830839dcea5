// runtime/look_ahead.cpp: tasks sent ahead. A worker that finishes a task and
// finds the next in its pipe starts it at once; waiting for the driver to hear
// of the end and send the next cost a round trip per task (~20 µs here, 8% of
// a 0.25 ms task). A task sent ahead can be taken back while it has not
// started, so a worker that falls idle never waits behind a busy one: both
// sides swap the sending's number out of the process's ahead words
// (process/control.hpp), and whoever does owns it.
#include "runtime/scheduler.hpp"

#include "observe/log.hpp"

namespace manta::runtime {

bool scheduler::mark_ahead(worker_link& w, task_spec& t) {
  if (!w.place.ahead) return false;
  for (int i = 0; i < 2; ++i) {
    auto& word = w.place.ahead[i];
    if (word.load(std::memory_order_relaxed) != 0) continue;  // (only the driver fills a word)
    word.store(t.sent_seq, std::memory_order_release);  // before the message: the process looks when it reads it
    t.ahead = true;
    ++ahead_;
    sent_ahead_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  return false;
}

bool scheduler::not_started_ahead(const task_spec& t) const noexcept {
  if (!t.ahead || t.worker < 0) return false;
  const worker_link& w = *links_[static_cast<std::size_t>(t.worker)];
  return w.place.ahead[0].load(std::memory_order_relaxed) == t.sent_seq ||
         w.place.ahead[1].load(std::memory_order_relaxed) == t.sent_seq;
}

void scheduler::not_ahead(task_spec& t) noexcept {
  if (!std::exchange(t.ahead, false)) return;
  --ahead_;
}

bool scheduler::take_back(task_spec& t) {
  if (!t.ahead || t.worker < 0) return false;
  worker_link& w = link(t.worker);
  bool taken = false;
  for (int i = 0; i < 2 && !taken; ++i) {
    std::uint64_t seq = t.sent_seq;
    taken = w.place.ahead[i].compare_exchange_strong(seq, 0, std::memory_order_acq_rel);
  }
  not_ahead(t);  // taken back, or started
  if (!taken) return false;
  taken_back_.fetch_add(1, std::memory_order_relaxed);
  MANTA_DEBUG << "took '" << t.name() << "' back from pid " << w.pid << " before it started";
  place_.finished(w.place, t);
  unpin_inputs(t);
  drop_grant(w, t);  // (the process will never write to it)
  t.worker = -1;
  graph_.enter(&t, graph_.ready(), /*at_front=*/true);
  return true;
}

bool scheduler::take_back_from(worker_link& w) {
  if (ahead_ == 0) return false;
  std::vector<task_spec*> sent_ahead;
  for (task_spec* t : w.place.in_flight)
    if (t->ahead) sent_ahead.push_back(t);
  bool took = false;
  for (auto it = sent_ahead.rbegin(); it != sent_ahead.rend(); ++it) took |= take_back(**it);  // (their order at the front)
  return took;
}

void scheduler::take_back_pinning() {
  if (ahead_ == 0) return;
  std::vector<task_spec*> pinning;
  for (worker_state* w : place_.workers())
    for (task_spec* t : w->in_flight)
      if (t->ahead && t->inputs_pinned && placement::has_stored_inputs(*t)) pinning.push_back(t);
  for (auto it = pinning.rbegin(); it != pinning.rend(); ++it) take_back(**it);
}

void scheduler::take_back_awaited(std::span<const object_id> ids) {
  if (ahead_ == 0) return;
  for (const object_id& id : ids)
    if (object_entry* e = dir_.find(id); e && e->status() == state_pending)
      if (task_spec* t = task_graph::producer_of(e); t && t->ahead) take_back(*t);
}

void scheduler::steal_for_idle() {
  for (worker_state* idle : place_.workers()) {
    if (ahead_ == 0) return;
    if (!idle->usable || !idle->in_flight.empty() || !idle->ahead) continue;
    // Its worker keeps the CPU its running task holds: the idle one needs
    // another (the ledger may be full with workers idle: CPU resources below
    // the pool's size, actors holding CPUs, tasks asking several).
    if (!ledger_.fits_cpu(1)) return;
    // The oldest task sent ahead: the one that has waited longest behind its
    // worker. One that started meanwhile is no longer ahead: the next is tried.
    for (;;) {
      task_spec* oldest = nullptr;
      for (worker_state* busy : place_.workers())
        for (task_spec* t : busy->in_flight)
          if (t->ahead && (!oldest || t->sent_seq < oldest->sent_seq)) oldest = t;
      if (!oldest) return;
      if (!take_back(*oldest)) continue;
      send_task(link(idle->slot), *oldest);
      break;
    }
  }
}

}  // namespace manta::runtime

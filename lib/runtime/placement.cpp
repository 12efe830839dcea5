// runtime/placement.cpp: choosing workers, and the CPU accounts of the pool.
#include "runtime/placement.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_set>

#include "process/control.hpp"

namespace manta::runtime {

bool placement::may_wait_on_others(const task_spec& t) const {
  std::vector<const object_entry*> todo;
  for (auto* e : t.contained) todo.push_back(e);
  for (auto* e : t.deps)
    for (auto* c : e->contained) todo.push_back(static_cast<const object_entry*>(c));
  if (todo.empty()) return false;  // the common case: no refs given at all
  std::unordered_set<const object_entry*> seen;
  while (!todo.empty()) {
    const object_entry* e = todo.back();
    todo.pop_back();
    // An actor handle: its calls may wait on other tasks (a queue's get on a put).
    if (e->status() == state_pending || e->actor) return true;
    if (!seen.insert(e).second) continue;
    for (auto* c : e->contained) todo.push_back(static_cast<const object_entry*>(c));  // refs in refs
  }
  return false;
}

bool placement::has_stored_inputs(const task_spec& t) {
  for (const object_entry* e : t.deps)
    if (e->large) return true;
  return false;
}

bool placement::stored_inputs_pinned(const task_spec& t) const {
  for (object_entry* e : t.deps) {
    if (!e->large) continue;
    const std::int32_t pins = e->pins.load(std::memory_order_relaxed);
    if (pins <= 0) return false;
    if (pins == 1 && read_back_ && std::find(read_back_->begin(), read_back_->end(), e) != read_back_->end())
      return false;
  }
  return true;
}

int placement::all_waiting() const {
  int n = 0;
  for (const worker_state* w : pool_) n += !w->in_flight.empty() && lending(*w);
  return n;
}

template <class F>
void placement::for_each_innermost_wait(const worker_state& w, F&& f) {
  if (w.awaiting.empty()) return;
  const std::uint64_t key = w.awaiting.back().key;
  for (auto it = w.awaiting.rbegin(); it != w.awaiting.rend(); ++it)
    if (it->key == key) f(*it);
}

bool placement::lending(const worker_state& w) const {
  if (!w.usable || w.blocked != static_cast<int>(w.in_flight.size())) return false;
  // A task nested now would sit on top of the innermost waiting one: if that one
  // can already go on, it would have to wait for the newcomer (and its subtree).
  // (Its threads may wait too: it lends while any of its waits cannot end yet.)
  if (w.awaiting.empty()) return true;
  bool open = false;
  for_each_innermost_wait(w, [&](const worker_state::wait_state& ws) {
    if (open) return;
    std::size_t done = 0;
    for (const auto& id : ws.ids) {
      object_entry* e = dir_.find(id);
      done += !e || e->status() != state_pending;
    }
    open = done < ws.needed;
  });
  return open;
}

worker_state* placement::pick(const task_spec& t) {
  // A task nested on a blocked worker, or queued behind a task that may block,
  // runs on top of that worker's stack: if it waited on an object a task below
  // it will make, neither could go on. Only tasks that cannot reach an unsealed
  // object except through their own children go there.
  if (t.is_default() ? ledger_.fits_cpu(1) : ledger_.fits(cpu_need(t))) {
    worker_state* lender = nullptr;
    for (worker_state* w : pool_) {
      if (!w->usable) continue;
      if (w->in_flight.empty()) return w;
      if (!lender && lending(*w)) lender = w;
    }
    // A task with a timeout never nests: killing it would kill the stack below it.
    if (lender && !t.options().timeout_ns && !may_wait_on_others(t)) return lender;
  }
  // Queue short default tasks behind a busy worker's default tasks, so frames
  // batch. Not tasks with a timeout: queued, their time would run while they
  // wait. Nor tasks reading stored objects nothing pins yet: queued, they would
  // keep them from being spilled (a matrix that running tasks read is pinned anyway).
  if (!t.is_default() || t.options().timeout_ns || !stored_inputs_pinned(t)) return nullptr;
  const double expected = estimate(t);
  if (!std::isfinite(expected) || may_wait_on_others(t)) return nullptr;
  worker_state* best = nullptr;
  for (worker_state* w : pool_) {
    if (!w->usable || w->blocked || w->nondefault || !w->active_default || w->unbounded) continue;
    if (w->expected_ns + expected > pipeline_window_ns || w->in_flight.size() >= max_pipeline) continue;
    if (!best || w->expected_ns < best->expected_ns) best = w;
  }
  return best;
}

worker_state* placement::pick_ahead(const task_spec& t) const {
  if (!t.is_default() || t.options().timeout_ns || t.options().max_calls > 0 || !stored_inputs_pinned(t))
    return nullptr;
  if (const fn_stats* s = find_stats(t); (s && s->blocks) || may_wait_on_others(t)) return nullptr;
  // A process waits for it (a task in get, lending its CPU): not behind another.
  for (const object_entry* r : t.returns)
    if (r->has_subscribers()) return nullptr;
  // Behind the task expected to end first (one whose time is unknown last).
  worker_state* best = nullptr;
  for (worker_state* w : pool_) {
    if (!w->ahead || !w->usable || w->blocked || w->nondefault || w->in_flight.size() != 1) continue;
    const task_spec& running = *w->in_flight.front();
    if (running.options().timeout_ns) continue;  // (killed at its timeout, with what waits behind it)
    if (const fn_stats* s = find_stats(running); s && s->blocks) continue;
    // (With one task in flight, at most one word is taken: a task taken back
    // or started left its word free.)
    if (w->ahead[0].load(std::memory_order_relaxed) != 0 && w->ahead[1].load(std::memory_order_relaxed) != 0)
      continue;
    if (!best || (best->unbounded && !w->unbounded) ||
        (best->unbounded == w->unbounded && w->expected_ns < best->expected_ns))
      best = w;
  }
  return best;
}

placement::fn_stats* placement::find_stats(const task_spec& t) const {
  // Tasks come in runs of one function: the last lookup is kept (elements of an
  // unordered_map stay where they are; none is ever erased).
  const std::uint64_t key = stats_key(t);
  if (key != last_key_ || !last_stats_) {
    auto it = stats_.find(key);
    if (it == stats_.end()) return nullptr;
    last_key_ = key;
    last_stats_ = const_cast<fn_stats*>(&it->second);
  }
  return last_stats_;
}

double placement::estimate(const task_spec& t) const {
  const fn_stats* s = find_stats(t);
  if (!s || !s->known || s->blocks) return std::numeric_limits<double>::infinity();
  return s->ewma_ns;
}

bool placement::blocks_later(const task_spec& t) const {
  // (It may only nest when a CPU is free: with none, later ones cannot go either.)
  return t.is_default() && (!ledger_.fits_cpu(1) || !may_wait_on_others(t));
}

bool placement::none_fits_like(const task_spec& t) const {
  if (t.is_default()) return false;
  if (!ledger_.fits(cpu_need(t))) return true;
  return std::none_of(pool_.begin(), pool_.end(),
                      [&](const worker_state* w) { return w->usable && (w->in_flight.empty() || lending(*w)); });
}

std::vector<task_spec*> placement::producers_to_lend(const worker_state& w, std::vector<task_spec*>* ahead) const {
  // Running what the blocked task waits for keeps nesting shallow: otherwise a
  // blocked worker takes whatever is queued, and fork-join code nests deeply.
  // A producer still waiting on its own arguments leads to theirs: whatever the
  // awaited objects need is safe to nest (none of it can wait on the tasks below).
  if (w.awaiting.empty() || !lending(w)) return {};
  std::vector<object_entry*> todo;
  for_each_innermost_wait(w, [&](const worker_state::wait_state& ws) {  // latest first
    for (const auto& id : ws.ids)
      if (object_entry* e = dir_.find(id)) todo.push_back(e);
  });
  std::reverse(todo.begin(), todo.end());  // taken from the back: the latest wait's first id first
  std::vector<const task_spec*> seen;
  while (!todo.empty() && seen.size() < 64) {  // bounded: the first producers matter
    object_entry* e = todo.back();
    todo.pop_back();
    task_spec* t = e->status() == state_pending ? task_graph::producer_of(e) : nullptr;
    if (!t || std::find(seen.begin(), seen.end(), t) != seen.end()) continue;
    seen.push_back(t);
    if (ahead && t->ahead) {
      ahead->push_back(t);
      continue;
    }
    if (t->in_lane != &graph_.ready()) {
      if (t->pending_deps > 0 && !t->actor)
        for (auto d = t->deps.rbegin(); d != t->deps.rend(); ++d) todo.push_back(*d);
      continue;
    }
    // One that may wait on others (given a queue, or refs to unsealed objects)
    // could wait for the very task below it; one with a timeout could not be
    // killed alone. They go to a worker of their own (an extra one, if need be).
    if (t->options().timeout_ns || may_wait_on_others(*t)) continue;
    if (!ledger_.fits(cpu_need(*t))) return {};
    return {t};  // once it runs, the worker is no longer all waiting
  }
  return {};
}

// Default tasks on one worker share one CPU, held while any of them is active;
// other tasks take their whole demand (GPU ids too) while they run. Actor calls
// and constructors take nothing: the actor holds its resources for its life.

void placement::take_cpu(worker_state& w, task_spec& t) {
  if (t.actor) return;
  if (t.is_default()) {
    if (w.active_default++ == 0 && !w.holds_cpu) {
      w.holds_cpu = true;
      ledger_.take_cpu(1);
    }
  } else {
    ++w.nondefault;
    ledger_.take(t.need(), t.gpus);
    t.charged = true;
  }
}

void placement::sent(worker_state& w, task_spec& t) {
  graph_.enter(&t, w.in_flight);
  w.last_origin = t.origin;
  take_cpu(w, t);
  if (t.actor) return;  // an actor's calls queue on it whatever they take
  // Nothing queues behind a task that may be killed for its timeout.
  t.expected_ns = t.options().timeout_ns ? std::numeric_limits<double>::infinity() : estimate(t);
  if (std::isfinite(t.expected_ns))
    w.expected_ns += t.expected_ns;
  else
    ++w.unbounded;
  w.long_tasks += runs_long(t);
  publish(w);
}

void placement::publish(worker_state& w) noexcept {
  if (!w.assigned) return;
  const std::uint32_t work = w.active_default + w.nondefault == 0 ? process::work_idle
                             : w.long_tasks > 0                   ? process::work_long
                                                                  : process::work_short;
  w.assigned->store(work, std::memory_order_relaxed);
}

void placement::finished(worker_state& w, task_spec& t) {
  if (t.in_lane == &w.in_flight) {
    graph_.leave(&t);
    if (!std::isfinite(t.expected_ns))
      --w.unbounded;
    else
      w.expected_ns = w.in_flight.empty() ? 0 : w.expected_ns - t.expected_ns;  // no drift
    if (!t.actor) w.long_tasks -= runs_long(t);
  }
  if (t.actor) return;
  if (t.blocked) end_block(w, t);
  if (t.is_default()) {
    if (--w.active_default == 0 && w.holds_cpu) {
      w.holds_cpu = false;
      ledger_.give_cpu(1);
    }
  } else if (t.charged) {
    --w.nondefault;
    ledger_.give(t.need(), t.gpus);
    t.gpus.clear();
    t.charged = false;
  }
  publish(w);
}

void placement::blocked(worker_state& w, task_spec& t, worker_state::wait_state awaited) {
  if (t.actor) return;
  awaited.key = t.key;
  w.awaiting.push_back(std::move(awaited));
  if (t.blocked) return;  // another thread of it waits already: its CPU is lent
  t.blocked = true;
  ++w.blocked;
  if (!t.is_default()) {
    ledger_.give_cpu(t.need().cpu);  // its GPUs and custom resources stay with it
  } else if (--w.active_default == 0 && w.holds_cpu) {
    w.holds_cpu = false;
    ledger_.give_cpu(1);
  }
  publish(w);
}

void placement::unblocked(worker_state& w, task_spec& t, std::uint32_t wait) {
  if (t.actor || !t.blocked) return;
  auto it = std::find_if(w.awaiting.begin(), w.awaiting.end(),
                         [&](const worker_state::wait_state& ws) { return ws.key == t.key && ws.wait == wait; });
  if (it != w.awaiting.end()) w.awaiting.erase(it);
  if (std::any_of(w.awaiting.begin(), w.awaiting.end(),
                  [&](const worker_state::wait_state& ws) { return ws.key == t.key; }))
    return;  // another thread of it still waits
  end_block(w, t);
}

void placement::end_block(worker_state& w, task_spec& t) {
  std::erase_if(w.awaiting, [&](const worker_state::wait_state& ws) { return ws.key == t.key; });
  t.blocked = false;
  --w.blocked;
  if (!t.is_default()) {
    ledger_.take_cpu(t.need().cpu);  // may oversubscribe for a moment, as a returning thread does
  } else if (w.active_default++ == 0 && !w.holds_cpu) {
    w.holds_cpu = true;
    ledger_.take_cpu(1);
  }
  publish(w);
}

void placement::lost(worker_state& w) {
  w.blocked = w.active_default = w.nondefault = w.unbounded = w.long_tasks = 0;
  w.expected_ns = 0;
  w.awaiting.clear();
  if (w.holds_cpu) ledger_.give_cpu(1);
  w.holds_cpu = false;
  w.usable = false;
  publish(w);
}

void placement::record(const task_spec& t, std::uint64_t ns, std::uint64_t result_bytes) {
  fn_stats* found = find_stats(t);
  fn_stats& s = found ? *found : stats_[stats_key(t)];
  s.ewma_ns = s.known ? (s.ewma_ns * 7 + static_cast<double>(ns)) / 8 : static_cast<double>(ns);
  s.known = true;
  if (t.num_returns == 1) s.result_bytes = result_bytes;
}

std::uint64_t placement::result_grant_size(const task_spec& t) const {
  if (t.num_returns != 1) return 0;
  const fn_stats* s = find_stats(t);
  return s && s->result_bytes > detail::max_inline_bytes ? s->result_bytes : 0;
}

}  // namespace manta::runtime

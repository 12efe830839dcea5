// runtime/scheduler.cpp: turning tasks into run_task messages. A task is ready
// when every argument is sealed; it goes to an idle worker (or one whose tasks
// all wait in get, lending their CPU) when the CPU ledger allows, or, for short
// default tasks, is queued behind the work of a busy worker so messages batch.
// Everything here runs with mu_ held.
#include <sys/epoll.h>

#include <algorithm>

#include "observe/log.hpp"
#include "process/args_blob.hpp"
#include "runtime/node_runtime.hpp"

namespace manta::runtime {
namespace {
constexpr double cpu_epsilon = 1e-9;
/// Queue at most about this much work behind a busy worker.
constexpr double pipeline_window_ns = 1e6;
constexpr std::size_t max_pipeline = 1024;

}  // namespace

void node_runtime::register_task(task_spec* t) {
  object_entry* failed_dep = nullptr;
  for (auto* e : t->deps) {
    std::uint32_t s = e->status();
    if (s == state_pending) {
      e->dependents.push_back(t);
      ++t->pending_deps;
    } else if (s == state_failed && !failed_dep) {
      failed_dep = e;
    }
  }
  if (failed_dep) {
    fail_task(t, ipc::chained(*failed_dep->error, t->name()));
    return;
  }
  for (auto* e : t->returns) e->producer = t;
  if (t->pending_deps == 0) {
    enqueue(t);
    dispatch();
  }
}

void node_runtime::enqueue(task_spec* t) {
  t->queued = true;
  ready_.push_back(t);
}

void node_runtime::lend_for(worker_link& w, const std::vector<object_id>& awaited) {
  // Running what the blocked task waits for keeps nesting shallow: otherwise a
  // blocked worker takes whatever is queued, and fork-join code nests deeply.
  for (const auto& id : awaited) {
    if (w.blocked != static_cast<int>(w.in_flight.size())) return;  // no longer lending
    object_entry* e = dir_.find(id);
    task_spec* t = e ? e->producer : nullptr;
    if (!t || !t->queued) continue;
    const double need = t->is_default() ? 1.0 : t->options.num_cpus;
    if (cpu_used_ + need > cpu_total_ + cpu_epsilon) return;
    ready_.erase(std::find(ready_.begin(), ready_.end(), t));
    t->queued = false;
    send_task(w, *t);
  }
}

void node_runtime::dispatch() {
  while (!ready_.empty()) {
    task_spec* t = ready_.front();
    worker_link* w = pick_worker(*t);
    if (!w) break;
    ready_.pop_front();
    t->queued = false;
    send_task(*w, *t);
  }
}

worker_link* node_runtime::pick_worker(const task_spec& t) {
  const double need = t.is_default() ? (1.0) : t.options.num_cpus;
  if (cpu_used_ + need <= cpu_total_ + cpu_epsilon) {
    worker_link* lending = nullptr;
    for (auto& w : workers_) {
      if (w->st != worker_link::state::alive) continue;
      if (w->in_flight.empty()) return w.get();
      if (!lending && w->blocked == static_cast<int>(w->in_flight.size())) lending = w.get();
    }
    if (lending) return lending;
  }
  // Queue short default tasks behind a busy worker's default tasks.
  if (!t.is_default()) return nullptr;
  auto it = stats_.find(stats_key(t));
  if (it == stats_.end() || !it->second.known) return nullptr;
  std::size_t depth = static_cast<std::size_t>(
      std::clamp(pipeline_window_ns / std::max(it->second.ewma_ns, 1.0), 1.0,
                 static_cast<double>(max_pipeline)));
  worker_link* best = nullptr;
  for (auto& w : workers_) {
    if (w->st != worker_link::state::alive || w->blocked || w->nondefault || !w->active_default)
      continue;
    if (w->in_flight.size() >= depth) continue;
    if (!best || w->in_flight.size() < best->in_flight.size()) best = w.get();
  }
  return best;
}

void node_runtime::take_cpu(worker_link& w, task_spec& t) {
  if (t.is_default()) {
    if (w.active_default++ == 0 && !w.holds_cpu) {
      w.holds_cpu = true;
      cpu_used_ += 1;
    }
  } else {
    ++w.nondefault;
    t.charge = t.options.num_cpus;
    cpu_used_ += t.charge;
  }
}

void node_runtime::return_cpu(worker_link& w, task_spec& t) {
  if (t.blocked) {  // its CPU was returned when it blocked
    t.blocked = false;
    --w.blocked;
    if (!t.is_default()) --w.nondefault;
    return;
  }
  if (t.is_default()) {
    if (--w.active_default == 0 && w.holds_cpu) {
      w.holds_cpu = false;
      cpu_used_ -= 1;
    }
  } else {
    --w.nondefault;
    cpu_used_ -= t.charge;
    t.charge = 0;
  }
}

void node_runtime::send_task(worker_link& w, task_spec& t) {
  bool was_waiting = w.in_flight.empty() || w.blocked == static_cast<int>(w.in_flight.size());
  take_cpu(w, t);
  t.worker = w.slot;
  w.in_flight.push_back(&t);
  {
    ipc::frame_writer f(w.out.buffer(), static_cast<std::uint16_t>(ipc::msg::run_task));
    f.put(t.key);
    f.put(t.fn->id);
    f.put(static_cast<std::uint8_t>(t.mode));
    f.put(t.num_returns);
    f.put(t.arg_count);
    f.string(t.options.name);
    for (auto* e : t.returns) f.put(e->id);
    // Offer an extent the size of the function's last large result, so the
    // worker can write its result without asking for room first.
    std::uint64_t grant_size = 0;
    if (t.num_returns == 1) {
      auto it = stats_.find(stats_key(t));
      if (it != stats_.end() && it->second.result_bytes > detail::max_inline_bytes) {
        std::uint64_t off = arena_->allocate(it->second.result_bytes);
        if (off != store::no_extent) {
          t.grant = off;
          grant_size = it->second.result_bytes;
          w.extents[off] = grant_size;
        }
      }
    }
    f.put(t.grant);
    f.put(grant_size);
    process::for_each_arg(t.args, t.arg_count, [&](const process::blob_arg& a) {
      if (a.kind == process::arg_kind::value) {
        ipc::write_location(f, a.tag, a.size_or_index, ipc::no_offset, a.bytes);
      } else {
        object_entry* e = t.deps.at(a.size_or_index);
        ipc::write_location(f, e->type_tag, e->size, e->offset, e->inline_bytes.data());
      }
    });
  }
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
  if (s.slot < 0 || s.slot >= static_cast<int>(workers_.size())) return;
  worker_link& w = *workers_[s.slot];
  if (w.generation != s.generation || w.st != worker_link::state::alive) return;
  {
    ipc::frame_writer f(w.out.buffer(), static_cast<std::uint16_t>(ipc::msg::object_ready));
    f.put(e->id);
    if (e->status() == state_ready) {
      f.put(std::uint8_t{1});
      ipc::write_location(f, e->type_tag, e->size, e->offset, e->inline_bytes.data());
    } else {
      f.put(std::uint8_t{2});
      ipc::write_error(f, *e->error);
    }
  }
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
  }
  for (const auto& id : contained)
    if (object_entry* c = dir_.acquire(id)) e->contained.push_back(c);
  publish(e, state_ready);
  for (auto* d : e->dependents)
    if (--d->pending_deps == 0) enqueue(d);
  e->dependents.clear();
  for (const auto& s : e->subscribers) notify(s, e);
  e->subscribers.clear();
}

void node_runtime::fail_task(task_spec* first, const ipc::error_info& first_error) {
  // Failure flows to every task waiting on the results, each chaining its name.
  std::vector<std::pair<task_spec*, ipc::error_info>> work{{first, first_error}};
  while (!work.empty()) {
    auto [t, err] = std::move(work.back());
    work.pop_back();
    for (auto* e : t->returns) {
      if (e->status() != state_pending) continue;
      e->error = std::make_unique<ipc::error_info>(err);
      publish(e, state_failed);
      for (auto* d : e->dependents) {
        if (d->pending_deps <= 0) continue;  // already failed through another argument
        d->pending_deps = 0;
        for (auto* other : d->deps) {  // stop waiting on its other arguments
          auto& ds = other->dependents;
          if (other != e) ds.erase(std::remove(ds.begin(), ds.end(), d), ds.end());
        }
        work.emplace_back(d, ipc::chained(err, d->name()));
      }
      e->dependents.clear();
      for (const auto& s : e->subscribers) notify(s, e);
      e->subscribers.clear();
    }
    finish_task(t);
  }
}

void node_runtime::finish_task(task_spec* t) {
  for (auto* e : t->returns) e->producer = nullptr;
  tasks_.erase(t->key);
  delete t;
}

void node_runtime::drop_grant(worker_link& w, task_spec& t) {
  if (t.grant == ipc::no_offset) return;
  // Unless its result adopted it (seal erased it from extents), give it back.
  if (w.extents.erase(t.grant)) arena_->deallocate(t.grant);
  t.grant = ipc::no_offset;
}

void node_runtime::requeue_front(task_spec* t) {
  t->worker = -1;
  t->queued = true;
  ready_.push_front(t);
}

}  // namespace manta::runtime

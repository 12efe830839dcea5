// runtime/handlers.cpp: every message a worker sends the driver, one handler
// each. A worker is not trusted: whatever it names (tasks, objects, extents,
// functions, actors) is checked before anything changes, and a message that
// cannot be right throws protocol_error, after which the worker is replaced.
#include <algorithm>
#include <cstring>

#include <manta/errors.hpp>

#include "observe/log.hpp"
#include "process/args_blob.hpp"
#include "runtime/scheduler.hpp"

namespace manta::runtime {

void scheduler::handle(worker_link& w, const ipc::frame& f) {
  handle_message(w, f);
  // A value sealed, an extent given back, a writer that now waits: room may come.
  if (!waiting_allocs_.empty()) retry_waiting_allocs();
}

void scheduler::handle_message(worker_link& w, const ipc::frame& f) {
  auto r = f.reader();
  switch (static_cast<ipc::msg>(f.type)) {
    case ipc::msg::task_done:
      on_task_done(w, ipc::task_done::read(r));
      break;
    case ipc::msg::submit:
      on_submit(w, ipc::submit::read(r));
      break;
    case ipc::msg::put:
      on_put(w, ipc::put::read(r));
      break;
    case ipc::msg::add_ref:
      for (const auto& id : ipc::add_ref::read(r).ids)
        if (w.holds.emplace(id, false).second && !dir_.acquire(id)) w.holds.erase(id);
      break;
    case ipc::msg::release:
      for (const auto& id : ipc::release::read(r).ids) {
        auto held = w.holds.find(id);
        if (held == w.holds.end()) continue;
        if (object_entry* e = dir_.find(id)) {
          if (held->second) store_.unpin(e);
          detail::release(e);
        }
        w.holds.erase(held);
      }
      break;
    case ipc::msg::subscribe:
      for (const auto& id : ipc::subscribe::read(r).ids) {
        object_entry* e = dir_.find(id);
        if (!e) {  // never held (a ref from another runtime): the worker must not wait for it
          ipc::object_ready m{id};
          m.ok = false;
          m.error = {ipc::error_kind::usage, "manta::usage_error",
                     "manta: an object_ref from another runtime (or from before a shutdown) was read", {}, {}, 0, 0};
          send_to(w, m, true);
          continue;
        }
        subscriber s{w.slot, w.generation};
        if (e->status() == state_pending) e->subscribe(s);
        else notify(s, e);
      }
      break;
    case ipc::msg::alloc_request:
      on_alloc(w, ipc::alloc_request::read(r));
      break;
    case ipc::msg::free_alloc: {
      auto off = ipc::free_alloc::read(r).offset;
      if (w.extents.erase(off)) store_.deallocate(off);
      break;
    }
    case ipc::msg::block:
      on_block(w, ipc::block::read(r));
      break;
    case ipc::msg::unblock:
      on_unblock(w, ipc::unblock::read(r));
      break;
    case ipc::msg::find_actor:
      on_find_actor(w, ipc::find_actor::read(r));
      break;
    case ipc::msg::cancel:
      for (const auto& id : ipc::cancel::read(r).ids)
        if (object_entry* e = dir_.find(id))
          if (task_spec* t = task_graph::producer_of(e)) cancel_task(t, w.slot);
      dispatch();
      break;
    case ipc::msg::kill_actor:
      for (const auto& id : ipc::kill_actor::read(r).ids)
        if (object_entry* e = dir_.find(id); e && e->actor) kill_actor(e);
      break;
    case ipc::msg::resources_request: {
      auto m = ipc::resources_request::read(r);
      send_to(w, ipc::resources_reply{m.request, resources(m.available)}, true);
      break;
    }
    case ipc::msg::nodes_request: {
      ipc::nodes_reply reply{ipc::nodes_request::read(r).request, {}};
      for (auto& n : host_.cluster_nodes())
        reply.nodes.push_back({std::move(n.id), std::move(n.address), std::move(n.resources), n.alive});
      send_to(w, reply, true);
      break;
    }
    default:
      throw ipc::protocol_error("manta: unknown message type " + std::to_string(f.type));
  }
}

std::vector<object_id> scheduler::read_contained(worker_link& w, const ipc::id_list& l,
                                                 const ipc::value_location& loc) {
  if (loc.offset != ipc::no_offset) {
    auto x = w.extents.find(loc.offset);
    if (x == w.extents.end() || loc.size > x->second)
      throw ipc::protocol_error("manta: a value in an extent never granted to this worker");
  }
  if (l.offset == ipc::no_offset) return {l.ids.begin(), l.ids.end()};
  // A long list of refs lies in an extent of its own, which goes back once read.
  auto x = w.extents.find(l.offset);
  if (x == w.extents.end() || l.offset == loc.offset || l.count > x->second / sizeof(object_id))
    throw ipc::protocol_error("manta: a list of refs in an extent never granted to this worker");
  std::vector<object_id> ids(l.count);
  if (l.count) std::memcpy(ids.data(), store_.base() + l.offset, l.count * sizeof(object_id));
  w.extents.erase(x);
  store_.deallocate(l.offset);
  return ids;
}

void scheduler::on_task_done(worker_link& w, const ipc::task_done& m) {
  task_spec* t = graph_.find(m.key);
  if (!t || t->worker != w.slot) throw ipc::protocol_error("manta: result for a task this worker was not running");
  if (m.ok && m.results.size() != t->returns.size())
    throw ipc::protocol_error("manta: a task sent the wrong number of results");
  // Checked before anything changes: a bad value must not leave a half-done task.
  boost::container::small_vector<std::vector<object_id>, 1> contained(m.ok ? m.results.size() : 0);
  for (std::size_t i = 0; i < contained.size(); ++i)
    contained[i] = read_contained(w, m.results[i].contained, m.results[i].location);
  if (cfg_.timeline && cfg_.timeline->on()) record(w, *t, m);
  place_.finished(w.place, *t);
  not_ahead(*t);
  functions_.ran(t->label(), m.ns);
  unpin_inputs(*t);
  t->worker = -1;
  if (w.retiring && w.place.in_flight.empty()) {
    MANTA_DEBUG << "worker pid " << w.pid << " ran its max_calls; replacing it";
    host_.kill(w.pid);
  }
  // An offered extent a buffer took stays the worker's until sealed or freed.
  if (m.grant_used) t->grant = ipc::no_offset;
  drop_grant(w, *t);
  if (t->cancelled) {  // finished before its process was killed: its results failed already
    finish_task(t);
    return;
  }
  if (t->mode == detail::call_mode::construct) {  // an actor's constructor
    if (m.ok) functions_.finished(t->label());
    else functions_.failed(t->label());
    actor_record& a = *t->actor;
    finish_task(t);
    constructed(a, m.ok ? nullptr : &m.error);
    return;
  }
  actor_record* actor = t->is_call() ? t->actor : nullptr;
  if (m.ok) {
    for (std::size_t i = 0; i < t->returns.size(); ++i) {
      t->returns[i]->made_by = t->fn;
      t->returns[i]->owner = w.pid;
      seal(t->returns[i], m.results[i].location, std::move(contained[i]), &w);
    }
    place_.record(*t, m.ns, t->returns[0]->size);
    tasks_finished_.fetch_add(1, std::memory_order_relaxed);
    functions_.finished(t->label());
    finish_task(t);
    if (actor) actor_dispatch(*actor);  // a call held back for room may go now
  } else {
    bool retry = t->options().retry_exceptions && m.error.kind == ipc::error_kind::task_exception &&
                 (t->options().max_retries < 0 || t->attempts < t->options().max_retries);
    if (retry) {
      MANTA_DEBUG << "retrying '" << t->name() << "' after its exception (attempt " << t->attempts + 2 << "): "
                  << m.error.message;
      ++t->attempts;
      task_retries_.fetch_add(1, std::memory_order_relaxed);
      enqueue(t);
    } else {
      fail_task(t, m.error);
    }
  }
  dispatch();
}

void scheduler::record(const worker_link& w, const task_spec& t, const ipc::task_done& m) {
  observe::timeline::task_event e;
  e.name = t.label();
  e.actor_call = t.actor != nullptr;
  e.pid = w.pid;
  e.thread = m.thread;
  e.submitted_ns = t.submitted_ns;
  e.started_ns = m.started_ns;
  e.duration_ns = m.ns;
  e.arg_bytes = t.args.size();
  for (const object_entry* d : t.deps) e.arg_bytes += d->size;
  for (const auto& r : m.results) e.result_bytes += r.location.size;
  e.ok = m.ok;
  cfg_.timeline->task(std::move(e));
}

void scheduler::on_submit(worker_link& w, const ipc::submit& m) {
  const detail::function_info* fn = detail::function_by_id(m.function);
  if (!fn) throw ipc::protocol_error("manta: nested task names an unknown function");
  if (m.returns.empty() || m.returns.size() > 0xffff)
    throw ipc::protocol_error("manta: nested task with a bad number of results");
  if (m.args.size() > detail::max_inline_args + (std::size_t{1} << 20))
    throw ipc::protocol_error("manta: nested task with an oversized argument blob");
  if (m.mode == detail::call_mode::construct && (m.returns.size() != 1 || fn->kind != detail::callable_kind::constructor))
    throw ipc::protocol_error("manta: a bad actor constructor");
  // Every ref argument must name one of its dependencies: send_task relies on it.
  process::for_each_arg(m.args, m.arg_count, [&](const process::blob_arg& a) {
    if (a.kind == process::arg_kind::ref && a.size_or_index >= m.deps.size())
      throw ipc::protocol_error("manta: nested task argument names no dependency");
  });
  object_entry* actor_entry = nullptr;
  if (!m.actor.empty()) {
    object_entry* e = dir_.find(m.actor);
    if (!e || !e->actor) throw ipc::protocol_error("manta: a method call on an unknown actor");
    actor_entry = e;
  }
  for (std::size_t i = 0; i < m.returns.size(); ++i) {
    const object_id& id = m.returns[i];
    if ((id.hi >> 32) != dir_.epoch() || dir_.find(id) ||
        std::find(m.returns.begin(), m.returns.begin() + static_cast<std::ptrdiff_t>(i), id) !=
            m.returns.begin() + static_cast<std::ptrdiff_t>(i))
      throw ipc::protocol_error("manta: nested task with a foreign or reused id");
  }
  pool_vector<object_entry*> deps;
  for (const auto& id : m.deps) {
    object_entry* e = dir_.acquire(id);
    if (!e) {
      for (auto* d : deps) detail::release(d);
      throw ipc::protocol_error("manta: nested task depends on an unknown object");
    }
    deps.push_back(e);
  }
  // From here on nothing throws: the task is built and registered.
  for (const auto& id : m.returns) note_worker_id(id);
  auto t = std::make_unique<task_spec>();
  t->fn = fn;
  t->parent = m.mode == detail::call_mode::construct ? 0 : m.parent;  // an actor outlives its creator
  if (m.parent)
    if (const task_spec* p = graph_.find(m.parent)) t->origin = p->origin;  // (a cluster's node: whose program)
  t->mode = m.mode;
  t->num_returns = static_cast<std::uint16_t>(m.returns.size());
  t->arg_count = m.arg_count;
  t->profile = profile_of(detail::task_options(m.options), m.mode);
  t->deps = std::move(deps);
  if (actor_entry) {
    detail::acquire(actor_entry);
    t->actor_entry = actor_entry;
    t->actor = actor_entry->actor;
  }
  for (const auto& id : m.returns) {
    object_entry* e = dir_.create(id, 2);  // the worker's ref and the task's hold
    w.holds.emplace(id, false);
    dir_.insert(e);
    t->returns.push_back(e);
  }
  if (t->mode == detail::call_mode::construct) {
    t->new_actor = std::make_unique<actor_record>();
    t->actor = t->new_actor.get();
    t->actor->class_tag = fn->class_tag;
    t->returns[0]->actor = t->actor;
  }
  for (const auto& id : m.contained)
    if (object_entry* e = dir_.acquire(id)) t->contained.push_back(e);
  t->args = m.args;
  t->key = new_key();
  if (cfg_.timeline && cfg_.timeline->on()) t->submitted_ns = observe::now_ns();
  const bool named_for_cluster =
      m.mode == detail::call_mode::construct && !t->options().name.empty() && host_.names_in_cluster();
  if (auto why = admit(*t); (why || named_for_cluster) && host_.cluster_can_run(*t)) {
    // Another node of the cluster has what it asks; or a node's named actor,
    // placed by the head (here too, maybe) so that its name is the cluster's.
    t->remote = true;
  } else if (why) {  // the nested caller gets the error from get
    task_spec* raw = t.get();
    graph_.add(std::move(t));
    if (raw->mode == detail::call_mode::construct && !create_actor(raw)) return;  // (dead: its name is taken)
    fail_task(raw, ipc::error_info{ipc::error_kind::usage, "manta::usage_error", *why, raw->name(), {}, 0, 0});
    return;
  }
  submit(std::move(t));
}

void scheduler::on_put(worker_link& w, const ipc::put& m) {
  if ((m.id.hi >> 32) != dir_.epoch() || dir_.find(m.id))
    throw ipc::protocol_error("manta: put with a foreign or reused id");
  std::vector<object_id> contained = read_contained(w, m.contained, m.location);
  object_entry* e = dir_.create(m.id, 1);  // the worker's ref
  e->owner = w.pid;
  note_worker_id(m.id);
  // The worker knows where the bytes lie while it holds them: pinned before
  // the store tracks it (else the spiller could take it in between).
  if (m.location.offset != ipc::no_offset) e->pins.store(1, std::memory_order_relaxed);
  seal(e, m.location, std::move(contained), &w);
  w.holds.emplace(m.id, true);
  dir_.insert(e);
}

void scheduler::on_alloc(worker_link& w, const ipc::alloc_request& m) {
  const std::uint64_t off = store_.try_allocate(m.size);  // (spilling is the spiller's, off the lock)
  if (off != store::no_extent) {
    w.extents[off] = m.size;
    send_to(w, ipc::alloc_reply{m.request, off}, true);
    return;
  }
  w.awaiting_room = true;
  const auto now = std::chrono::steady_clock::now();
  find_room({w.slot, w.generation, m.request, m.size, now}, now, {});
}

void scheduler::find_room(waiting_alloc a, std::chrono::steady_clock::time_point now,
                          const std::string& spill_failure) {
  worker_link& w = link(a.slot);
  // A spill that failed is tried again a few times, while spilling could
  // still make room: what it found pinned may have been let go since.
  if (now - a.since < alloc_writers_wait && a.spills_failed < max_spill_tries && store_.could_make_room(a.size)) {
    a.spilling = true;
    waiting_allocs_.push_back(a);
    host_.make_room(a.slot, a.generation, a.request, a.size);
    return;
  }
  // Values other workers are writing cannot be spilled until they are sealed,
  // which is soon: two large results at once must not fail for that.
  // And a reader (the driver copying a value out, a task reading its
  // argument) holds what could be spilled only for a moment, mostly.
  take_back_pinning();  // (before the look: what they pin may be spilled then)
  if (waits_for_room(a, now)) {
    a.spilling = false;
    waiting_allocs_.push_back(a);
    schedule_alloc_retry();
    return;
  }
  const std::string why = spill_failure.empty() ? store_.no_room(a.size) : spill_failure;
  MANTA_DEBUG << why;  // the worker's task fails with object_store_full, saying why
  w.awaiting_room = false;
  send_to(w, ipc::alloc_reply{a.request, ipc::no_offset, why}, true);
}

void scheduler::room_made(int slot, std::uint64_t generation, std::uint64_t request, std::uint64_t offset,
                          const std::string& why, bool disk_failed) {
  auto it = std::find_if(waiting_allocs_.begin(), waiting_allocs_.end(), [&](const waiting_alloc& a) {
    return a.spilling && a.slot == slot && a.generation == generation && a.request == request;
  });
  worker_link* w = slot >= 0 && slot < slots_in_use() ? &link(slot) : nullptr;
  if (it == waiting_allocs_.end() || !w || w->generation != generation ||
      w->st.load(std::memory_order_relaxed) != worker_link::state::alive) {
    if (offset != ipc::no_offset) store_.deallocate(offset);  // its worker is gone
    if (it != waiting_allocs_.end()) waiting_allocs_.erase(it);
    return;
  }
  waiting_alloc a = *it;
  waiting_allocs_.erase(it);
  if (offset != ipc::no_offset) {
    w->extents[offset] = a.size;
    w->awaiting_room = false;
    send_to(*w, ipc::alloc_reply{a.request, offset}, true);
  } else {
    // Nothing could be spilled (a reader held it): tried again while spilling
    // could make room; the disk failed: not again.
    a.spills_failed = disk_failed ? max_spill_tries : a.spills_failed + 1;
    find_room(a, std::chrono::steady_clock::now(), why.empty() ? store_.no_room(a.size) : why);
  }
  schedule_alloc_retry();
}

bool scheduler::waits_for_room(waiting_alloc& a, std::chrono::steady_clock::time_point now) {
  if (now - a.since >= alloc_writers_wait) return false;  // (a writer that computes for long holds a grant)
  if (others_writing(a.slot)) return true;
  if (!store_.fits_once_readers_let_go(a.size, a.spills_failed < max_spill_tries)) return false;
  if (a.readers_until == std::chrono::steady_clock::time_point::max()) a.readers_until = now + alloc_unpin_wait;
  return now < a.readers_until;
}

void scheduler::schedule_alloc_retry() {
  // Readers unpin without a message: those waiting for them look every few
  // ms; the others when a worker's message comes, or at their bound.
  auto next = std::chrono::steady_clock::time_point::max();
  const auto soon = std::chrono::steady_clock::now() + alloc_retry_every;
  for (const auto& a : waiting_allocs_)
    if (!a.spilling)
      next = std::min(next, a.readers_until != std::chrono::steady_clock::time_point::max() ? soon
                                                                                           : a.since + alloc_writers_wait);
  const auto before = std::exchange(alloc_retry_at_, next);
  note_next_timeout();
  if (next < before) host_.wake();  // the I/O thread may sleep with no deadline
}

bool scheduler::others_writing(int slot) const {
  // One the spiller makes room for now writes next (room_made), waiting for nobody.
  for (const waiting_alloc& a : waiting_allocs_)
    if (a.spilling && a.slot != slot) return true;
  for (int i = 0; i < slots_in_use(); ++i) {
    const worker_link* l = links_[static_cast<std::size_t>(i)].get();
    if (l->slot == slot || l->extents.empty() || l->st.load(std::memory_order_relaxed) != worker_link::state::alive)
      continue;
    // Not one waiting for room itself, nor one whose task waits in get: it may
    // wait for the asker, and waiting for it would never end.
    if (!l->awaiting_room && l->blocked_keys.empty() && l->place.blocked == 0) return true;
  }
  return false;
}

void scheduler::retry_waiting_allocs() {
  auto waiting = std::move(waiting_allocs_);
  waiting_allocs_.clear();
  const auto now = std::chrono::steady_clock::now();
  for (auto& a : waiting) {
    worker_link& w = link(a.slot);
    if (a.spilling) {  // the spiller answers (room_made), even for a worker gone: its extent goes back then
      waiting_allocs_.push_back(a);
      continue;
    }
    if (w.generation != a.generation || w.st.load(std::memory_order_relaxed) != worker_link::state::alive) continue;
    const std::uint64_t off = store_.try_allocate(a.size);
    if (off == store::no_extent) {
      find_room(a, now, {});  // (what was sealed meanwhile may be spilled for it)
      continue;
    }
    w.extents[off] = a.size;
    w.awaiting_room = false;
    send_to(w, ipc::alloc_reply{a.request, off}, true);
  }
  schedule_alloc_retry();
}

void scheduler::on_block(worker_link& w, const ipc::block& m) {
  // (Its process never runs them nested: they go to a free worker, or wait their turn.)
  const bool took_back = take_back_from(w);
  task_spec* t = graph_.find(m.key);
  if (t && t->worker == w.slot) w.blocked_keys.push_back(m.key);
  if (!t || t->worker != w.slot || t->actor) {  // an actor's calls wait in line; it keeps what it holds
    if (took_back) dispatch();
    return;
  }
  place_.note_blocks(*t);
  place_.blocked(w.place, *t, {m.needed, {m.ids.begin(), m.ids.end()}, m.key, m.wait});
  take_back_awaited(m.ids);
  dispatch();
}

void scheduler::on_unblock(worker_link& w, const ipc::unblock& m) {
  // (Even for a task gone meanwhile: cancelled, or a call that timed out.)
  if (auto k = std::find(w.blocked_keys.begin(), w.blocked_keys.end(), m.key); k != w.blocked_keys.end())
    w.blocked_keys.erase(k);
  task_spec* t = graph_.find(m.key);
  if (!t || t->worker != w.slot || t->actor) return;
  place_.unblocked(w.place, *t, m.wait);
  dispatch();
}

void scheduler::on_find_actor(worker_link& w, const ipc::find_actor& m) {
  object_id id;
  std::string error;
  try {
    if (object_entry* e = find_actor(std::string(m.name), m.class_tag)) {
      id = e->id;
      // The worker's hold: one per process, however many handles it makes.
      if (!w.holds.emplace(id, false).second) detail::release(e);
    } else if (host_.find_actor_later(w.slot, w.generation, m.request, std::string(m.name), m.class_tag, error)) {
      return;  // another driver's, or one a driver started on a node: the head answers
    }
  } catch (const usage_error& e) {
    error = e.what();
  }
  send_to(w, ipc::actor_reply{m.request, id, error}, true);
}

}  // namespace manta::runtime

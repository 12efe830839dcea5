// runtime/node_runtime_objects.cpp: node_runtime's objects: puts, extents
// sealed in place, waits (spinning first, then on the directory's seal
// futex), reads that pin, and the refs' counts.
#include "runtime/node_runtime.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include <manta/errors.hpp>

#include "ipc/futex.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MANTA_CPU_PAUSE() _mm_pause()
#else
#define MANTA_CPU_PAUSE() ((void)0)
#endif

namespace manta::runtime {

object_entry* node_runtime::checked(detail::ref_node* n) {
  if (n->epoch != epoch_)
    throw usage_error("manta: an object_ref from another runtime (or from before a shutdown) was used");
  return static_cast<object_entry*>(n);
}

std::vector<object_entry*> node_runtime::checked_all(std::span<detail::ref_node* const> nodes) {
  std::vector<object_entry*> es;
  es.reserve(nodes.size());
  for (auto* n : nodes) es.push_back(checked(n));
  return es;
}

detail::extent node_runtime::allocate_extent(std::size_t bytes) {
  call_guard guard(*this);
  std::uint64_t off = store_->allocate(bytes);  // spills cold objects if it must
  return {off, arena_->base() + off, bytes, epoch_};
}

void node_runtime::free_extent(const detail::extent& x) noexcept {
  if (x.epoch == epoch_) store_->deallocate(x.offset);
}

detail::ref_node* node_runtime::put_extent(std::uint64_t tag, const detail::extent& x, std::size_t size) {
  call_guard guard(*this);
  if (x.epoch != epoch_ || size > x.size)
    throw usage_error("manta: a buffer from another runtime, or larger than its extent, was put");
  return seal_extent(dir_->next_id(), tag, x, size);
}

detail::ref_node* node_runtime::import_extent(const object_id& id, std::uint64_t tag, const detail::extent& x,
                                             std::span<const object_id> contained) {
  try {
    call_guard guard(*this);
    if (object_entry* e = dir_->acquire(id)) {  // still here: a worker kept a ref to it
      free_extent(x);
      return e;
    }
    accept_import(id);
    return seal_extent(id, tag, x, x.size, contained);
  } catch (...) {
    free_extent(x);
    throw;
  }
}

std::optional<detail::extent> node_runtime::landing_room(std::size_t bytes) {
  call_guard guard(*this);
  store::arena& arena = store_->arena();
  if (arena.free_bytes() < bytes + arena.capacity() / 4) return std::nullopt;
  const std::uint64_t off = store_->try_allocate(bytes);
  if (off == store::no_extent) return std::nullopt;
  return detail::extent{off, arena_->base() + off, bytes, epoch_};
}

detail::ref_node* node_runtime::seal_extent(const object_id& id, std::uint64_t tag, const detail::extent& x,
                                            std::size_t size, std::span<const object_id> contained) {
  std::vector<object_entry*> held;  // (counted before the entry exists: a missing one fails it whole)
  for (const object_id& c : contained) {
    object_entry* inner = dir_->acquire(c);
    if (!inner) {
      for (object_entry* h : held) detail::release(h);
      throw usage_error("manta: a value holding an object_ref that no longer exists was kept");
    }
    held.push_back(inner);
  }
  object_entry* e = dir_->create(id, 1);
  for (object_entry* h : held) e->contained.push_back(h);
  e->owner = pid_;
  e->type_tag = tag;
  e->size = size;
  e->offset = x.offset;
  store_->track(e);
  e->state.store(state_ready, std::memory_order_release);
  dir_->insert(e);
  return e;
}

detail::ref_node* node_runtime::put(const detail::encoded_value& v) { return put_as(dir_->next_id(), v); }

detail::ref_node* node_runtime::put_as(const object_id& id, const detail::encoded_value& v) {
  call_guard guard(*this);
  std::unique_ptr<object_entry> e(dir_->create(id, 1));
  e->owner = pid_;
  e->type_tag = v.type_tag;
  e->size = v.size;
  if (v.size <= detail::max_inline_bytes) {
    e->inline_bytes.assign(static_cast<const char*>(v.data()), v.size);
  } else {
    e->offset = store_->allocate(v.size);  // spills cold objects if it must
    std::memcpy(arena_->base() + e->offset, v.data(), v.size);
  }
  for (const auto& id : v.contained) {
    object_entry* c = dir_->acquire(id);
    if (!c) throw usage_error("manta: put of a value holding an object_ref that no longer exists");
    e->contained.push_back(c);
  }
  if (e->offset != ipc::no_offset) store_->track(e.get());
  e->state.store(state_ready, std::memory_order_release);
  dir_->insert(e.get());
  return e.release();
}

template <class Done>
bool node_runtime::wait_until(Done done, std::span<object_entry* const> watch, detail::deadline until) {
  if (done()) return true;
  // Spin first, polling the processes ourselves when nobody else does: the
  // result is usually microseconds away, and waking a sleeping thread costs ~30 µs.
  // Only while a core is free: on a full machine the spin would take it from a
  // worker computing what this thread waits for.
  auto now = std::chrono::steady_clock::now();
  auto spin_end = std::min(until, now + std::chrono::nanoseconds(ipc::spin_budget_ns()));
  if (!process::core_free(*control_, -1)) spin_end = now;
  std::optional<process::spinning_mark> mark;
  if (now < spin_end) mark.emplace(control_->driver_spinners);
  while (now < spin_end) {
    if (poll_mu_.try_lock()) {
      std::uint32_t idle_word;
      bool borrowed = begin_borrowed_poll(idle_word);
      while (!done() && std::chrono::steady_clock::now() < spin_end) {
        std::uint32_t seen = control_->driver_seq.load(std::memory_order_acquire);
        if (poll_events(0) > 0) continue;
        while (!done() && control_->driver_seq.load(std::memory_order_acquire) == seen &&
               std::chrono::steady_clock::now() < spin_end) {
          for (int i = 0; i < 32; ++i) MANTA_CPU_PAUSE();
          std::this_thread::yield();
        }
      }
      if (borrowed) end_borrowed_poll(idle_word);
      poll_mu_.unlock();
    } else {
      for (int i = 0; i < 32; ++i) MANTA_CPU_PAUSE();
      std::this_thread::yield();
    }
    if (done()) return true;
    if (stopping_.load(std::memory_order_acquire)) call_guard::stopped(*this, "manta: the runtime was shut down");
    now = std::chrono::steady_clock::now();
  }
  mark.reset();
  auto& word = dir_->seal_word();
  for (;;) {
    std::uint32_t seq = word.load(std::memory_order_acquire);
    for (auto* e : watch) e->state.fetch_or(state_waiters, std::memory_order_acq_rel);
    if (done()) return true;
    if (stopping_.load(std::memory_order_acquire)) call_guard::stopped(*this, "manta: the runtime was shut down");
    if (std::chrono::steady_clock::now() >= until) return false;
    ipc::futex_wait(word, seq, until);
  }
}

detail::object_data node_runtime::fetch(detail::ref_node* n, detail::deadline until) {
  call_guard guard(*this);
  object_entry* e = checked(n);
  if (e->status() == state_pending) {
    object_entry* watch[1] = {e};
    if (!wait_until([e] { return e->status() != state_pending; }, watch, until))
      throw timeout_error("manta: get timed out before the object was ready");
  }
  if (e->status() == state_failed) ipc::throw_error(e->error->describe());
  pin_for_reader(e, until);
  if (e->large) user_pins_.fetch_add(1, std::memory_order_relaxed);
  return {e->type_tag, e->data(), e->size};
}

void node_runtime::pin_for_reader(object_entry* e, detail::deadline until) {
  // Bringing it back from the spill file needs room, which values workers are
  // writing now take only until they are sealed (then they can be spilled),
  // and readers hold mostly for a moment: wait for those, within the get's
  // deadline and at most as long as a worker's request for room waits.
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  bool looked = false;  // the last failure came after a look found no writer
  for (;;) {
    const std::uint32_t seen = dir_->seal_word().load(std::memory_order_acquire);
    try {
      store_->pin(e);
      return;
    } catch (const object_store_full&) {
      const auto now = clock::now();
      if (now >= until) throw;
      bool writing = false;
      {
        scheduler_lock lock(*this);
        writing = sched_->values_being_written();
      }
      if (!writing && !std::exchange(looked, true)) continue;  // (one sealed just before the look: spillable now)
      if (writing) looked = false;
      const bool wait = writing ? now - start < scheduler::alloc_writers_wait
                                : now - start < scheduler::alloc_unpin_wait && store_->fits_once_readers_let_go(e->size, true);
      if (!wait) throw;
      if (stopping_.load(std::memory_order_acquire)) call_guard::stopped(*this, "manta: the runtime was shut down");
      ipc::futex_wait(dir_->seal_word(), seen, std::min(until, now + scheduler::alloc_retry_every));
    }
  }
}

void node_runtime::repin(detail::ref_node* n) noexcept {
  auto* e = static_cast<object_entry*>(n);
  store_->repin(e);
  if (e->large) user_pins_.fetch_add(1, std::memory_order_relaxed);
}

void node_runtime::sent(detail::ref_node* n) noexcept {
  store_->unpin(static_cast<object_entry*>(n));
  detail::release(n);
}

void node_runtime::unpin(detail::ref_node* n) noexcept {
  auto* e = static_cast<object_entry*>(n);
  store_->unpin(e);
  if (e->large) user_pins_.fetch_sub(1, std::memory_order_relaxed);
}

void node_runtime::wait(std::span<detail::ref_node* const> nodes, std::size_t num, detail::deadline until,
                        std::vector<bool>& ready) {
  call_guard guard(*this);
  const std::vector<object_entry*> es = checked_all(nodes);
  auto count = [&] {
    std::size_t k = 0;
    for (auto* e : es) k += e->status() != state_pending;
    return k;
  };
  wait_until([&] { return count() >= num; }, es, until);
  ready.assign(es.size(), false);
  for (std::size_t i = 0; i < es.size(); ++i) ready[i] = es[i]->status() != state_pending;
}

std::uint32_t node_runtime::seals_seen() const noexcept {
  return dir_->seal_word().load(std::memory_order_acquire);
}

void node_runtime::watch_seal(detail::ref_node* n) noexcept {
  // (On a sealed entry the bit is harmless, as wait_until's: status() masks it.)
  static_cast<object_entry*>(n)->state.fetch_or(state_waiters, std::memory_order_acq_rel);
}

void node_runtime::wait_sealed(std::uint32_t seen, const std::function<bool()>& interrupted) {
  call_guard guard(*this);
  const auto& word = dir_->seal_word();
  wait_until([&] { return interrupted() || word.load(std::memory_order_acquire) != seen; }, {},
             detail::deadline::max());
}

detail::ref_node* node_runtime::ref_from_id(const object_id& id) {
  if ((id.hi >> 32) != epoch_ && !control_->holds_imports.load(std::memory_order_acquire))
    throw usage_error("manta: an object_ref from another runtime (or from before a shutdown) was read");
  object_entry* e = dir_->acquire(id);
  if (!e) throw usage_error("manta: a serialised object_ref names an object that no longer exists");
  return e;
}

void node_runtime::release(detail::ref_node* n) noexcept {
  auto* e = static_cast<object_entry*>(n);
  if (!dir_->erase_if_unused(e)) return;
  if (e->on_nodes) {  // nodes may hold copies: the head tells them (from under the scheduler's lock)
    freed_remote_.push(e->id);
    wake_io();
  }
  if (e->actor) {
    // The last handle is gone: the actor stops once the scheduler gets to it
    // (this may run on any thread, with or without the scheduler mutex, so the
    // I/O thread is woken to do it).
    retired_.push(e->actor);
    wake_io();
  }
  free_entry(e);
}

}  // namespace manta::runtime

// runtime/object_store.cpp: spilling and restoring. A pin is a lock-free count
// on the entry; the store takes an object out of the arena only by swapping a
// count of zero for spilled_mark, so an object somebody reads never moves.
#include "runtime/object_store.hpp"

#include <unistd.h>

#include <algorithm>
#include <functional>
#include <system_error>
#include <utility>
#include <vector>

#include <manta/errors.hpp>

#include "runtime/directory.hpp"

namespace manta::runtime {

object_store::object_store(store::arena& arena, std::string spill_dir)
    : arena_(arena), file_(std::move(spill_dir)) {}

std::uint64_t object_store::allocate(std::size_t size) {
  std::uint64_t off = arena_.allocate(size);
  if (off != store::no_extent) return off;
  std::lock_guard lock(mu_);
  return allocate_locked(size);
}

std::uint64_t object_store::allocate_locked(std::size_t size) {
  std::uint64_t off = arena_.allocate(size);
  if (off != store::no_extent) return off;
  std::string spill_failure;
  if (size <= arena_.capacity()) {
    // Least recently used (oldest) first, among the objects nobody reads now. A
    // reader may stamp one after `now` was read: its age is negative, the newest.
    const std::uint32_t now = clock_.load(std::memory_order_relaxed);
    std::vector<std::pair<std::int32_t, object_entry*>> cold;
    for (object_entry* e : resident_)
      if (e->pins.load(std::memory_order_relaxed) == 0)
        cold.emplace_back(static_cast<std::int32_t>(now - e->last_use.load(std::memory_order_relaxed)), e);
    std::sort(cold.begin(), cold.end(), std::greater<>());
    for (auto& [age, e] : cold) {
      std::int32_t unpinned = 0;
      if (!e->pins.compare_exchange_strong(unpinned, object_entry::spilled_mark,
                                           std::memory_order_acq_rel))
        continue;  // pinned meanwhile
      try {
        e->spill_at = file_.write(arena_.base() + e->offset, e->size);
      } catch (const std::system_error& x) {
        // A full disk fails this allocation now rather than retrying.
        e->pins.store(0, std::memory_order_release);
        spill_failure = x.what();
        break;
      }
      arena_.deallocate(std::exchange(e->offset, ipc::no_offset));
      resident_.erase(e);
      on_disk_.insert(e);
      if (timeline_ && timeline_->on())
        timeline_->instant("spill", ::getpid(), std::to_string(e->size) + " bytes to the spill file");
      ++spilled_;
      ++spilled_now_;
      off = arena_.allocate(size);
      if (off != store::no_extent) return off;
    }
  }
  std::uint64_t pinned = 0;
  for (object_entry* e : resident_)
    if (e->pins.load(std::memory_order_relaxed) > 0) pinned += e->size;
  std::string msg = "manta: " + std::to_string(size) + " bytes do not fit in the object store (" +
                    std::to_string(arena_.free_bytes()) + " of " +
                    std::to_string(arena_.capacity()) + " bytes free, " + std::to_string(pinned) +
                    " bytes held by readers)";
  msg += spill_failure.empty() ? " and nothing more can be spilled"
                               : "; spilling failed: " + spill_failure;
  throw object_store_full(msg);
}

bool object_store::fits_once_unpinned(std::size_t size) {
  std::lock_guard lock(mu_);
  std::uint64_t room = arena_.free_bytes();
  for (object_entry* e : resident_)
    if (e->pins.load(std::memory_order_relaxed) > 0) room += e->size;
  return room >= size;
}

void object_store::stamp(object_entry* e) {
  const std::uint32_t now = clock_.fetch_add(1, std::memory_order_relaxed) + 1;
  e->last_use.store(now, std::memory_order_relaxed);
  if (now % age_cap == 0) cap_ages(now);
}

void object_store::cap_ages(std::uint32_t now) {
  std::lock_guard lock(mu_);
  for (object_entry* e : resident_) {
    std::uint32_t s = e->last_use.load(std::memory_order_relaxed);
    const auto age = static_cast<std::int32_t>(now - s);
    // (A reader that stamps it meanwhile wins: the exchange fails.)
    if (age > static_cast<std::int32_t>(age_cap))
      e->last_use.compare_exchange_strong(s, now - age_cap, std::memory_order_relaxed);
  }
}

void object_store::track(object_entry* e) {
  e->large = true;
  stamp(e);
  std::lock_guard lock(mu_);
  resident_.insert(e);
}

void object_store::forget(object_entry* e) noexcept {
  if (!e->large) {
    // An extent never sealed (a put that failed part way) goes straight back.
    if (e->offset != ipc::no_offset) arena_.deallocate(e->offset);
    return;
  }
  std::lock_guard lock(mu_);
  if (e->pins.load(std::memory_order_acquire) == object_entry::spilled_mark) {
    file_.release(e->spill_at, e->size);
    on_disk_.erase(e);
    --spilled_now_;
  } else {
    resident_.erase(e);
    arena_.deallocate(e->offset);
  }
}

void object_store::pin(object_entry* e) {
  if (!e->large) return;
  stamp(e);
  std::int32_t p = e->pins.load(std::memory_order_acquire);
  while (p >= 0)
    if (e->pins.compare_exchange_weak(p, p + 1, std::memory_order_acq_rel)) return;
  restore(e);
}

void object_store::restore(object_entry* e) {
  std::lock_guard lock(mu_);
  std::int32_t p = e->pins.load(std::memory_order_acquire);
  while (p >= 0)  // another reader brought it back meanwhile
    if (e->pins.compare_exchange_weak(p, p + 1, std::memory_order_acq_rel)) return;
  std::uint64_t off = allocate_locked(e->size);
  try {
    file_.read(e->spill_at, arena_.base() + off, e->size);
  } catch (const std::system_error& x) {
    arena_.deallocate(off);
    throw error(std::string("manta: a spilled object could not be restored: ") + x.what());
  }
  file_.release(e->spill_at, e->size);
  on_disk_.erase(e);
  --spilled_now_;
  ++restored_;
  e->offset = off;
  resident_.insert(e);
  e->pins.store(1, std::memory_order_release);
}

void object_store::repin(object_entry* e) noexcept {
  if (e->large) e->pins.fetch_add(1, std::memory_order_acq_rel);
}

void object_store::unpin(object_entry* e) noexcept {
  if (e->large) e->pins.fetch_sub(1, std::memory_order_acq_rel);
}

detail::spill_counters object_store::stats() const {
  std::lock_guard lock(mu_);
  return {spilled_, restored_, spilled_now_, file_.disk_bytes()};
}

}  // namespace manta::runtime

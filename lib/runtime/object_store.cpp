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

std::uint64_t object_store::allocate(std::size_t size) { return allocate(size, false); }

std::uint64_t object_store::allocate(std::size_t size, std::string& spill_failure) {
  std::uint64_t off = store::no_extent;
  spill_failure = make_room(size, false, off);
  return off == store::no_extent ? ipc::no_offset : off;
}

std::uint64_t object_store::allocate(std::size_t size, bool for_reader) {
  std::uint64_t off = store::no_extent;
  const std::string spill_failure = make_room(size, for_reader, off);
  if (off == store::no_extent) throw object_store_full(no_room(size, spill_failure));
  return off;
}

std::string object_store::make_room(std::size_t size, bool for_reader, std::uint64_t& off) {
  off = store::no_extent;
  if (for_reader) {
    // Taken and counted as held by a reader at once: a writer waiting for room
    // then waits for this reader, never for one that has no room yet.
    std::lock_guard lock(mu_);
    off = arena_.allocate(size);
    if (off != store::no_extent) restoring_bytes_ += size;
  } else {
    off = arena_.allocate(size);
  }
  if (off != store::no_extent) return {};
  // Who gets the room a spill makes is decided one at a time, as before the
  // disk's work left the store's lock (readers and writers waiting for room
  // rely on it); nothing else waits for this lock.
  std::unique_lock serial(alloc_mu_, std::defer_lock);
  if (!alloc_held_here) serial.lock();
  std::string spill_failure;
  if (size <= arena_.capacity()) {
    for (;;) {
      // A batch of the coldest objects nobody reads, about enough to make room,
      // taken under the lock; written with it released; then given up and the
      // room taken at once (a reader waiting for one of them must not take it).
      std::vector<victim> batch = take_victims(size);
      if (batch.empty()) {
        std::lock_guard lock(mu_);
        off = arena_.allocate(size);  // (another thread's spill may have made room)
        if (off == store::no_extent) break;
        if (for_reader) restoring_bytes_ += size;
        return {};
      }
      spill_failure = write_out(batch, size, for_reader, off);
      if (off != store::no_extent) return {};
      if (!spill_failure.empty()) break;  // a full disk fails this allocation now rather than retrying
    }
  }
  return spill_failure;
}

std::string object_store::no_room(std::size_t size, const std::string& spill_failure) const {
  std::lock_guard lock(mu_);
  std::uint64_t pinned = restoring_bytes_;
  for (object_entry* e : resident_)
    if (e->pins.load(std::memory_order_relaxed) > 0) pinned += e->size;
  std::string msg = "manta: " + std::to_string(size) + " bytes do not fit in the object store (" +
                    std::to_string(arena_.free_bytes()) + " of " +
                    std::to_string(arena_.capacity()) + " bytes free, " + std::to_string(pinned) +
                    " bytes held by readers)";
  msg += spill_failure.empty() ? " and nothing more can be spilled"
                               : "; spilling failed: " + spill_failure;
  return msg;
}

bool object_store::could_make_room(std::size_t size) const {
  if (size > arena_.capacity()) return false;
  std::lock_guard lock(mu_);
  std::uint64_t room = arena_.free_bytes();
  for (object_entry* e : resident_)
    if (e->pins.load(std::memory_order_relaxed) == 0 && !busy_.count(e)) room += e->size;
  return room >= size || writing_ > 0;  // (what is being written out frees its room soon)
}

std::vector<object_store::victim> object_store::take_victims(std::size_t size) {
  std::unique_lock lock(mu_);
  for (;;) {
    std::vector<victim> batch = take_victims_locked(size);
    // Another thread is writing objects out: once they are gone there may be
    // room, or they may be all there was to spill. Wait for them, then look again.
    if (!batch.empty() || writing_ == 0) return batch;
    const std::uint64_t seen = written_;
    settled_.wait(lock, [&] { return written_ != seen; });
    if (arena_.free_bytes() >= size) return batch;  // (empty: the caller tries the arena again)
  }
}

std::vector<object_store::victim> object_store::take_victims_locked(std::size_t size) {
  // Least recently used (oldest) first, among the objects nobody reads now. A
  // reader may stamp one after `now` was read: its age is negative, the newest.
  const std::uint32_t now = clock_.load(std::memory_order_relaxed);
  std::vector<std::pair<std::int32_t, object_entry*>> cold;
  for (object_entry* e : resident_)
    if (e->pins.load(std::memory_order_relaxed) == 0 && !busy_.count(e))
      cold.emplace_back(static_cast<std::int32_t>(now - e->last_use.load(std::memory_order_relaxed)), e);
  std::sort(cold.begin(), cold.end(), std::greater<>());
  std::vector<victim> batch;
  std::uint64_t freed = arena_.free_bytes();
  for (auto& [age, e] : cold) {
    if (freed >= size && !batch.empty()) break;  // (free bytes may be scattered: the caller asks again)
    std::int32_t unpinned = 0;
    // Marked spilled from now on: a reader that wants it waits until it is
    // written, then reads it back (restore).
    if (!e->pins.compare_exchange_strong(unpinned, object_entry::spilled_mark, std::memory_order_acq_rel))
      continue;  // pinned meanwhile
    busy_.insert(e);
    batch.push_back({e, e->offset, e->size});
    freed += e->size;
  }
  writing_ += batch.size();
  return batch;
}

std::string object_store::write_out(const std::vector<victim>& batch, std::size_t size, bool for_reader,
                                    std::uint64_t& off) {
  std::string failure;
  std::vector<std::uint64_t> at(batch.size(), 0);
  std::size_t written = 0;
  {
    std::lock_guard io(io_mu_);  // the file's, not the store's: readers and sealers go on meanwhile
    take_releases();
    for (; written < batch.size(); ++written) {
      try {
        // (Not through the entry: it may be freed meanwhile, see forget.)
        at[written] = file_.write(arena_.base() + batch[written].offset, batch[written].size);
      } catch (const std::system_error& x) {
        failure = x.what();
        break;
      }
    }
  }
  std::lock_guard lock(mu_);
  writing_ -= batch.size();
  ++written_;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    object_entry* e = batch[i].entry;
    busy_.erase(e);
    if (dropped_.erase(e)) {  // freed while it was written: its room and its range go, the entry is gone
      if (i < written) release_range(at[i], batch[i].size);
      arena_.deallocate(batch[i].offset);
      continue;
    }
    if (i >= written) {  // not written: it stays
      e->pins.store(0, std::memory_order_release);
      continue;
    }
    e->spill_at = at[i];
    arena_.deallocate(std::exchange(e->offset, ipc::no_offset));
    resident_.erase(e);
    on_disk_.insert(e);
    if (timeline_ && timeline_->on())
      timeline_->instant("spill", ::getpid(), std::to_string(e->size) + " bytes to the spill file");
    ++spilled_;
    ++spilled_now_;
  }
  off = arena_.allocate(size);
  if (for_reader && off != store::no_extent) restoring_bytes_ += size;
  settled_.notify_all();
  return failure;
}

void object_store::take_releases() {
  std::vector<std::pair<std::uint64_t, std::size_t>> taken;
  {
    std::lock_guard l(releases_mu_);
    taken.swap(releases_);
  }
  for (auto [at, size] : taken) file_.release(at, size);
}

bool object_store::fits_once_readers_let_go(std::size_t size, bool may_spill) {
  // With spilling, unpinned objects count too: one a reader let go between the
  // caller's look at could_make_room and this one is spillable on its retry
  // (counting only pinned ones, the asker was refused in that gap).
  std::lock_guard lock(mu_);
  std::uint64_t room = arena_.free_bytes() + restoring_bytes_;  // (a reader reading one back holds it next)
  for (object_entry* e : resident_)
    if (may_spill || e->pins.load(std::memory_order_relaxed) > 0) room += e->size;
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
  std::unique_lock lock(mu_);
  if (busy_.count(e) && e->pins.load(std::memory_order_acquire) == object_entry::spilled_mark &&
      e->offset != ipc::no_offset) {
    // Being written out: the writer frees its room and range when done (the
    // entry is not touched again). Waiting here held whoever freed it (the
    // scheduler, under its lock) for the length of the write.
    dropped_.insert(e);
    resident_.erase(e);
    return;
  }
  settled_.wait(lock, [&] { return !busy_.count(e); });  // (being read back: its reader holds it, so never)
  if (e->pins.load(std::memory_order_acquire) == object_entry::spilled_mark) {
    release_range(e->spill_at, e->size);
    on_disk_.erase(e);
    --spilled_now_;
  } else {
    resident_.erase(e);
    arena_.deallocate(e->offset);
  }
}

void object_store::pin(object_entry* e) {
  if (!try_pin(e)) restore(e);
}

bool object_store::try_pin(object_entry* e) noexcept {
  if (!e->large) return true;
  stamp(e);
  std::int32_t p = e->pins.load(std::memory_order_acquire);
  while (p >= 0)
    if (e->pins.compare_exchange_weak(p, p + 1, std::memory_order_acq_rel)) return true;
  return false;
}

thread_local bool object_store::alloc_held_here = false;

void object_store::restore(object_entry* e) {
  std::lock_guard serial(alloc_mu_);  // (see allocate)
  alloc_held_here = true;
  struct unmark {
    ~unmark() { alloc_held_here = false; }
  } unmark_on_exit;
  {
    std::unique_lock lock(mu_);
    for (;;) {
      std::int32_t p = e->pins.load(std::memory_order_acquire);
      while (p >= 0)  // another reader brought it back meanwhile (or its spill failed)
        if (e->pins.compare_exchange_weak(p, p + 1, std::memory_order_acq_rel)) return;
      if (!busy_.count(e)) break;
      settled_.wait(lock);  // being written out, or read back by another reader
    }
    busy_.insert(e);
  }
  // The I/O goes on with the store's lock released (room first: that may spill others).
  auto done = [&](std::uint64_t off, bool had_room) {
    std::lock_guard lock(mu_);
    busy_.erase(e);
    if (had_room) restoring_bytes_ -= e->size;
    if (off != ipc::no_offset) {
      release_range(e->spill_at, e->size);
      on_disk_.erase(e);
      --spilled_now_;
      ++restored_;
      e->offset = off;
      resident_.insert(e);
      e->pins.store(1, std::memory_order_release);
    }
    settled_.notify_all();
  };
  std::uint64_t off;
  try {
    off = allocate(e->size, /*for_reader=*/true);
  } catch (...) {
    done(ipc::no_offset, false);
    throw;
  }
  try {
    std::lock_guard io(io_mu_);
    file_.read(e->spill_at, arena_.base() + off, e->size);
  } catch (const std::system_error& x) {
    arena_.deallocate(off);
    done(ipc::no_offset, true);
    throw error(std::string("manta: a spilled object could not be restored: ") + x.what());
  }
  done(off, true);
}

void object_store::release_range(std::uint64_t at, std::size_t size) {
  // Under mu_: the file is io_mu_'s, and a write may hold it for seconds. The
  // range is punched by the next spill, or now if the file is free.
  {
    std::lock_guard l(releases_mu_);  // (a spill's write takes them under io_mu_ alone)
    releases_.emplace_back(at, size);
  }
  std::unique_lock io(io_mu_, std::try_to_lock);
  if (io.owns_lock()) take_releases();
}

void object_store::repin(object_entry* e) noexcept {
  if (e->large) e->pins.fetch_add(1, std::memory_order_acq_rel);
}

void object_store::unpin(object_entry* e) noexcept {
  if (e->large) e->pins.fetch_sub(1, std::memory_order_acq_rel);
}

detail::spill_counters object_store::stats() const {
  detail::spill_counters s;
  {
    std::lock_guard lock(mu_);
    s = {spilled_, restored_, spilled_now_, 0};
  }
  s.disk_bytes = file_.disk_bytes();  // (fstat: never waits for a write)
  return s;
}

}  // namespace manta::runtime

// runtime/object_store.hpp: the arena seen as a store of objects that may leave
// it. When an allocation does not fit, objects nobody is reading are written to
// the spill file (least recently used first) and their extents freed; pinning an
// object brings it back. An object is pinned while something reads it in place:
// a driver get or view, a task sent with it as an argument, a worker that was
// told where it lies and still holds it.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_set>

#include <manta/detail/introspect.hpp>

#include "observe/timeline.hpp"
#include "store/arena.hpp"
#include "store/spill_file.hpp"

namespace manta::runtime {

struct object_entry;

class object_store {
 public:
  object_store(store::arena& arena, std::string spill_dir);

  std::byte* base() const noexcept { return arena_.base(); }
  store::arena& arena() noexcept { return arena_; }

  /// An extent of `size` bytes, spilling unpinned objects to make room.
  /// @throws object_store_full naming the sizes involved, or why spilling failed.
  std::uint64_t allocate(std::size_t size);
  /// An extent only if one fits without spilling (optional grants), else no_extent.
  std::uint64_t try_allocate(std::size_t size) { return arena_.allocate(size); }
  /// Whether `size` bytes would fit once readers let go of what they pin now.
  bool fits_once_unpinned(std::size_t size);
  void deallocate(std::uint64_t offset) noexcept { arena_.deallocate(offset); }

  /// `e` was just sealed in the arena: it may be spilled while nobody pins it.
  void track(object_entry* e);
  /// `e` is being deleted: its extent, or its range of the spill file, goes.
  void forget(object_entry* e) noexcept;
  /// Keeps `e`'s bytes in the arena until `unpin`, reading them back from the
  /// spill file first if they are there. Nothing for inline values.
  /// @throws object_store_full if there is no room to bring them back; error if
  /// the spill file cannot be read.
  void pin(object_entry* e);
  /// Another pin of an object this caller already pinned: never reads the disk.
  void repin(object_entry* e) noexcept;
  void unpin(object_entry* e) noexcept;

  detail::spill_counters stats() const;
  /// Calls `f(const object_entry&, bool spilled)` for every object in the arena
  /// or the spill file, holding the store's lock (no entry is freed meanwhile).
  template <class F>
  void for_each(F f) const {
    std::lock_guard lock(mu_);
    for (const object_entry* e : resident_) f(*e, false);
    for (const object_entry* e : on_disk_) f(*e, true);
  }
  /// Where spills are recorded while it records (or null).
  void set_timeline(observe::timeline* t) noexcept { timeline_ = t; }

 private:
  std::uint64_t allocate_locked(std::size_t size);
  void restore(object_entry* e);
  /// Marks `e` used now (its 32-bit stamp of clock_).
  void stamp(object_entry* e);
  /// Every `age_cap` uses: no resident object's age stays above age_cap, so
  /// ages (now - stamp, at most twice that) never wrap a signed 32 bits.
  void cap_ages(std::uint32_t now);
  static constexpr std::uint32_t age_cap = 1u << 29;

  store::arena& arena_;
  mutable std::mutex mu_;  // spilling and restoring; below the scheduler's mutex
  store::spill_file file_;
  std::unordered_set<object_entry*> resident_;  ///< tracked objects in the arena
  std::unordered_set<object_entry*> on_disk_;   ///< tracked objects in the spill file
  observe::timeline* timeline_ = nullptr;
  std::atomic<std::uint32_t> clock_{0};         ///< stamps uses, for least-recently-used order
  std::uint64_t spilled_ = 0, restored_ = 0, spilled_now_ = 0;
};

}  // namespace manta::runtime

// runtime/object_store.hpp: the arena seen as a store of objects that may leave
// it. When an allocation does not fit, objects nobody is reading are written to
// the spill file (least recently used first) and their extents freed; pinning an
// object brings it back. An object is pinned while something reads it in place:
// a driver get or view, a task sent with it as an argument, a worker that was
// told where it lies and still holds it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>
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

  /// An extent of `size` bytes, spilling unpinned objects to make room (the
  /// disk's work done with the store's lock released; still, never call it
  /// under the scheduler's: the spiller does, for the scheduler).
  /// @throws object_store_full naming the sizes involved, or why spilling failed.
  std::uint64_t allocate(std::size_t size);
  /// As allocate, but no_offset (and, if writing to the spill file failed,
  /// why in `spill_failure`) instead of throwing.
  std::uint64_t allocate(std::size_t size, std::string& spill_failure);
  /// Whether spilling might make room for `size` bytes: what is free plus what
  /// nobody reads covers it (or objects are being written out now).
  bool could_make_room(std::size_t size) const;
  /// Why `size` bytes do not fit ("manta: ... bytes do not fit ..."), with why
  /// spilling failed, if it did.
  std::string no_room(std::size_t size, const std::string& spill_failure = {}) const;
  /// An extent only if one fits without spilling (optional grants), else no_extent.
  std::uint64_t try_allocate(std::size_t size) { return arena_.allocate(size); }
  /// Whether `size` bytes would fit once readers let go of what they pin now
  /// (and, if `may_spill`, what nobody pins is spilled).
  bool fits_once_readers_let_go(std::size_t size, bool may_spill);
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
  /// Pins `e` if its bytes are in the arena (no disk work): false if they are
  /// spilled, or being written out (then `pin`, off the scheduler's lock).
  bool try_pin(object_entry* e) noexcept;
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
  /// Marks the coldest objects nobody reads as spilled, about `size` bytes of
  /// them (busy until written out).
  /// An object to write out, and where it lies (read under mu_: the entry may
  /// be freed while it is written).
  struct victim {
    object_entry* entry;
    std::uint64_t offset;
    std::size_t size;
  };
  std::vector<victim> take_victims(std::size_t size);
  std::vector<victim> take_victims_locked(std::size_t size);
  /// Writes `batch` to the spill file with only the file's lock held, then
  /// frees their extents (those it could not write stay) and, under the same
  /// hold of the lock, allocates `size` bytes into `off` (or no_extent).
  /// @returns why not all were written, or "".
  std::string write_out(const std::vector<victim>& batch, std::size_t size, bool for_reader, std::uint64_t& off);
  /// allocate, for a reader reading an object back (`for_reader`): its room
  /// counts as held by readers from the moment it is taken.
  std::uint64_t allocate(std::size_t size, bool for_reader);
  /// Takes `size` bytes into `off` (no_extent: no room), spilling for them.
  /// @returns why writing to the spill file failed, or ""
  std::string make_room(std::size_t size, bool for_reader, std::uint64_t& off);
  void restore(object_entry* e);
  /// A range of the spill file is no longer needed (under mu_).
  void release_range(std::uint64_t at, std::size_t size);
  /// Punches the released ranges (under io_mu_).
  void take_releases();
  /// Marks `e` used now (its 32-bit stamp of clock_).
  void stamp(object_entry* e);
  /// Every `age_cap` uses: no resident object's age stays above age_cap, so
  /// ages (now - stamp, at most twice that) never wrap a signed 32 bits.
  void cap_ages(std::uint32_t now);
  static constexpr std::uint32_t age_cap = 1u << 29;

  // Two locks, never held together: the store's bookkeeping (mu_), below the
  // scheduler's mutex, and the spill file (io_mu_), held for the length of a
  // write or read. A sealer, a reader or the scheduler never waits for the disk
  // (a multi-gigabyte spill stalled every one of them).
  store::arena& arena_;
  mutable std::mutex mu_;
  mutable std::mutex io_mu_;
  /// Held by whoever spills to make room or reads an object back, for the
  /// whole of it (above mu_ and io_mu_): room goes to one asker at a time.
  std::mutex alloc_mu_;
  static thread_local bool alloc_held_here;  ///< this thread holds alloc_mu_ (a restore allocating)
  store::spill_file file_;  ///< io_mu_'s
  std::mutex releases_mu_;  ///< (below mu_ and io_mu_)
  std::vector<std::pair<std::uint64_t, std::size_t>> releases_;  ///< ranges to punch (releases_mu_'s)
  /// Objects being written out or read back (mu_'s): a reader of one waits.
  std::unordered_set<object_entry*> busy_;
  std::condition_variable settled_;  ///< an object left busy_
  std::size_t writing_ = 0;    ///< of busy_, those being written out (mu_'s)
  /// Of those, entries freed meanwhile (forget): the writer cleans up (mu_'s).
  std::unordered_set<object_entry*> dropped_;
  std::uint64_t written_ = 0;  ///< batches written out so far (mu_'s)
  /// Bytes of objects being read back: held by readers (mu_'s).
  std::uint64_t restoring_bytes_ = 0;
  std::unordered_set<object_entry*> resident_;  ///< tracked objects in the arena
  std::unordered_set<object_entry*> on_disk_;   ///< tracked objects in the spill file
  observe::timeline* timeline_ = nullptr;
  std::atomic<std::uint32_t> clock_{0};         ///< stamps uses, for least-recently-used order
  std::uint64_t spilled_ = 0, restored_ = 0, spilled_now_ = 0;
};

}  // namespace manta::runtime

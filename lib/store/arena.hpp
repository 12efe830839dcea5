// store/arena.hpp: the shared-memory object arena. One anonymous shared mapping
// (a memfd), managed by Boost.Interprocess's allocator, mapped before the zygote
// is forked so every manta process inherits it at the same address. It has no
// name anywhere: nothing is left behind, even if every process is killed.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace manta::store {

inline constexpr std::uint64_t no_extent = ~std::uint64_t{0};

/// Only the driver allocates (under its own mutex); other processes read and
/// write extents the driver granted them, so no process can die holding the
/// allocator's lock.
class arena {
 public:
  /// @throws std::runtime_error if the segment cannot be created.
  explicit arena(std::size_t bytes);
  ~arena();
  arena(const arena&) = delete;
  arena& operator=(const arena&) = delete;

  std::byte* base() const noexcept { return base_; }
  std::size_t capacity() const noexcept { return capacity_; }

  /// A 64-byte aligned extent of `size` bytes, or no_extent when full. Thread-safe.
  std::uint64_t allocate(std::size_t size);
  /// Thread-safe.
  void deallocate(std::uint64_t offset) noexcept;
  /// Bytes handed out and not yet freed. Thread-safe.
  std::size_t used_bytes() const;
  /// The largest request that could currently succeed is at most this.
  std::size_t free_bytes() const;

  /// The default size: 30% of RAM (or of the cgroup's memory limit).
  static std::size_t default_size();

  /// Faults pages in ahead of the frontier (the end of the highest extent ever
  /// handed out: the allocator fills from the bottom, and the holes below the
  /// frontier it prefers are warm), on a thread of its own at the lowest
  /// priority, so a new object is written at memory speed instead of the
  /// page-fault rate. It keeps as many bytes warm ahead as lie below the
  /// frontier, at most `reserve`: a program that stores little costs little.
  /// Before each step it asks `may_warm(bytes)` (a core is idle, memory is not
  /// short); if no, it asks again later. Call after every fork the arena must
  /// survive (the zygote's); a `reserve` of 0 warms nothing.
  void start_warming(std::size_t reserve, std::function<bool(std::size_t)> may_warm = {});
  /// Joins the warming thread. Idempotent.
  void stop_warming() noexcept;
  /// How far from the base pages are warm: faulted in, or handed out before.
  std::size_t warm_bytes() const;

  /// The default reserve: 256 MB, at most an eighth of the arena;
  /// MANTA_ARENA_WARM_MB overrides it (0: off).
  std::size_t default_warm_reserve() const;

 private:
  // Under mu_: how far warming aims, and whether the warmer should wake.
  std::size_t warm_target() const noexcept;
  bool needs_warming() const noexcept;
  void warm_loop();

  struct segment;
  std::unique_ptr<segment> segment_;
  std::byte* base_ = nullptr;
  std::size_t capacity_ = 0;
  std::size_t used_ = 0;
  std::size_t frontier_ = 0;   ///< offset past the highest extent handed out
  std::size_t warm_end_ = 0;   ///< offset up to which the warmer faulted pages in
  std::size_t reserve_ = 0;    ///< 0: not warming (or stopping)
  std::function<bool(std::size_t)> may_warm_;
  mutable std::mutex mu_;
  std::condition_variable warm_cv_;
  std::thread warmer_;
};

}  // namespace manta::store

// store/arena.hpp: the shared-memory object arena. One anonymous shared mapping
// (a memfd), managed by Boost.Interprocess's allocator, mapped before the zygote
// is forked so every manta process inherits it at the same address. It has no
// name anywhere: nothing is left behind, even if every process is killed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

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

 private:
  struct segment;
  std::unique_ptr<segment> segment_;
  std::byte* base_ = nullptr;
  std::size_t capacity_ = 0;
  std::size_t used_ = 0;
  mutable std::mutex mu_;
};

}  // namespace manta::store

// store/spill_file.hpp: where objects go when the arena is full. One file in the
// spill directory, unlinked as soon as it is open: the kernel frees its blocks
// when the driver exits, however it exits, so nothing is ever left on disk.
// Each object's range is punched out of the file when it is read back or freed.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace manta::store {

/// Not thread-safe: the object store calls it under its own mutex.
class spill_file {
 public:
  /// Nothing is created until the first write.
  explicit spill_file(std::string dir) : dir_(std::move(dir)) {}
  ~spill_file();
  spill_file(const spill_file&) = delete;
  spill_file& operator=(const spill_file&) = delete;

  /// Appends `size` bytes; returns where they lie in the file.
  /// @throws std::system_error (ENOSPC, EFBIG, ...) after undoing the partial write.
  std::uint64_t write(const void* data, std::size_t size);
  /// @throws std::system_error if the bytes cannot be read back whole.
  void read(std::uint64_t at, void* data, std::size_t size) const;
  /// The range is no longer needed: its blocks go back to the filesystem.
  void release(std::uint64_t at, std::size_t size) noexcept;

  const std::string& dir() const noexcept { return dir_; }
  /// Bytes the file occupies on disk now. Thread-safe (the rest is not).
  std::uint64_t disk_bytes() const noexcept;

 private:
  void open();
  void punch(std::uint64_t at, std::size_t size) noexcept;

  std::string dir_;
  std::atomic<int> fd_{-1};  ///< (atomic: disk_bytes reads it while a write runs)
  std::uint64_t end_ = 0;    ///< where the next write goes
  std::uint64_t ranges_ = 0; ///< ranges written and not yet released
};

}  // namespace manta::store

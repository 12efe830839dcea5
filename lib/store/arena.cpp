// store/arena.cpp: the arena on a Boost.Interprocess managed segment.
#include "store/arena.hpp"

#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>

#include <boost/interprocess/indexes/null_index.hpp>
#include <boost/interprocess/managed_external_buffer.hpp>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <boost/interprocess/mem_algo/rbtree_best_fit.hpp>
#include <boost/interprocess/sync/mutex_family.hpp>

namespace manta::store {
namespace bip = boost::interprocess;

// No interprocess mutex: only the driver allocates, guarded by arena::mu_.
using managed = bip::basic_managed_external_buffer<
    char, bip::rbtree_best_fit<bip::null_mutex_family, bip::offset_ptr<void>, 64>, bip::null_index>;

// The segment is sized with ftruncate, not Boost's truncate: that one calls
// posix_fallocate, which would commit the whole arena in /dev/shm up front.
struct arena::segment {
  bip::mapped_region region;
  managed memory;
};

namespace {
std::string unique_name() {
  static std::atomic<unsigned> counter{0};
  return "manta-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}
}  // namespace

arena::arena(std::size_t bytes) {
  bytes = std::max<std::size_t>(bytes, 1 << 20);
  std::string name = unique_name();
  bip::shared_memory_object::remove(name.c_str());
  try {
    bip::shared_memory_object shm(bip::create_only, name.c_str(), bip::read_write);
    if (::ftruncate(shm.get_mapping_handle().handle, static_cast<off_t>(bytes)) != 0)
      throw std::runtime_error("ftruncate failed");
    segment_ = std::make_unique<segment>();
    segment_->region = bip::mapped_region(shm, bip::read_write);
    segment_->memory = managed(bip::create_only, segment_->region.get_address(), bytes);
  } catch (const std::exception& e) {
    bip::shared_memory_object::remove(name.c_str());
    throw std::runtime_error("manta: cannot create the object arena (" + std::to_string(bytes) +
                             " bytes): " + e.what());
  }
  // Every manta process inherits the mapping through fork, so the name can go now.
  bip::shared_memory_object::remove(name.c_str());
  base_ = static_cast<std::byte*>(segment_->memory.get_address());
  capacity_ = segment_->memory.get_size();
  ::madvise(base_, capacity_, MADV_HUGEPAGE);  // fewer faults for large objects, where allowed
}

arena::~arena() = default;

std::uint64_t arena::allocate(std::size_t size) {
  std::lock_guard lock(mu_);
  void* p = segment_->memory.allocate_aligned(std::max<std::size_t>(size, 1), 64, std::nothrow);
  if (!p) return no_extent;
  used_ += segment_->memory.get_segment_manager()->size(p);
  return static_cast<std::uint64_t>(static_cast<std::byte*>(p) - base_);
}

void arena::deallocate(std::uint64_t offset) noexcept {
  std::lock_guard lock(mu_);
  void* p = base_ + offset;
  used_ -= segment_->memory.get_segment_manager()->size(p);
  segment_->memory.deallocate(p);
}

std::size_t arena::used_bytes() const {
  std::lock_guard lock(mu_);
  return used_;
}

std::size_t arena::free_bytes() const {
  std::lock_guard lock(mu_);
  return segment_->memory.get_free_memory();
}

std::size_t arena::default_size() {
  long pages = ::sysconf(_SC_PHYS_PAGES);
  long page = ::sysconf(_SC_PAGE_SIZE);
  std::size_t want = static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) / 10 * 3;
  struct statvfs s{};
  if (::statvfs("/dev/shm", &s) == 0) {
    std::size_t shm_free = static_cast<std::size_t>(s.f_bavail) * s.f_frsize;
    want = std::min(want, shm_free / 10 * 9);
  }
  return std::max<std::size_t>(want, 64 << 20);
}

}  // namespace manta::store

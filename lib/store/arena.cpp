// store/arena.cpp: the arena: a memfd mapping managed by Boost.Interprocess.
#include "store/arena.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include <boost/interprocess/indexes/null_index.hpp>
#include <boost/interprocess/managed_external_buffer.hpp>
#include <boost/interprocess/mem_algo/rbtree_best_fit.hpp>
#include <boost/interprocess/sync/mutex_family.hpp>

namespace manta::store {
namespace bip = boost::interprocess;

// No interprocess mutex: only the driver allocates, guarded by arena::mu_.
using managed = bip::basic_managed_external_buffer<
    char, bip::rbtree_best_fit<bip::null_mutex_family, bip::offset_ptr<void>, 64>, bip::null_index>;

// The segment is an anonymous memfd sized with ftruncate (sparse: a page is
// taken when first written), mapped shared before the zygote is forked so every
// process inherits it. It is not in /dev/shm: a small or shared /dev/shm (a
// container's 64 MB, two drivers at once) cannot make a write die of SIGBUS,
// and nothing has a name that could be left behind.
struct arena::segment {
  void* base = nullptr;
  std::size_t size = 0;
  managed memory;
  ~segment() {
    if (base) ::munmap(base, size);
  }
};

arena::arena(std::size_t bytes) {
  bytes = std::max<std::size_t>(bytes, 1 << 20);
  int fd = ::memfd_create("manta-arena", MFD_CLOEXEC);
  if (fd < 0) throw std::runtime_error(std::string("manta: cannot create the object arena: ") + std::strerror(errno));
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int e = errno;
    ::close(fd);
    throw std::runtime_error("manta: cannot size the object arena (" + std::to_string(bytes) +
                             " bytes): " + std::strerror(e));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  ::close(fd);  // the mapping keeps the memory; nothing else needs the descriptor
  if (p == MAP_FAILED)
    throw std::runtime_error("manta: cannot map the object arena (" + std::to_string(bytes) +
                             " bytes): " + std::strerror(e));
  segment_ = std::make_unique<segment>();
  segment_->base = p;
  segment_->size = bytes;
  segment_->memory = managed(bip::create_only, p, bytes);
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
  std::size_t memory = static_cast<std::size_t>(pages) * static_cast<std::size_t>(page);
  // In a container, the cgroup's limit is what the arena's pages count against.
  if (FILE* f = std::fopen("/sys/fs/cgroup/memory.max", "r")) {
    unsigned long long limit = 0;
    if (std::fscanf(f, "%llu", &limit) == 1 && limit > 0 && limit < memory) memory = limit;
    std::fclose(f);
  }
  return std::max<std::size_t>(memory / 10 * 3, 64 << 20);
}

}  // namespace manta::store

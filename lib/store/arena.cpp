// store/arena.cpp: the arena: a memfd mapping managed by Boost.Interprocess.
#include "store/arena.hpp"
#include "observe/thread_name.hpp"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>

#include <boost/interprocess/indexes/null_index.hpp>
#include <boost/interprocess/managed_external_buffer.hpp>
#include <boost/interprocess/mem_algo/rbtree_best_fit.hpp>
#include <boost/interprocess/sync/mutex_family.hpp>

#include "observe/log.hpp"

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

arena::~arena() { stop_warming(); }

std::uint64_t arena::allocate(std::size_t size) {
  std::lock_guard lock(mu_);
  void* p = segment_->memory.allocate_aligned(std::max<std::size_t>(size, 1), 64, std::nothrow);
  if (!p) return no_extent;
  const std::size_t bytes = segment_->memory.get_segment_manager()->size(p);
  used_ += bytes;
  const auto offset = static_cast<std::uint64_t>(static_cast<std::byte*>(p) - base_);
  if (offset + bytes > frontier_) {
    frontier_ = offset + bytes;
    if (needs_warming()) warm_cv_.notify_one();
  }
  return offset;
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

// Warming: the frontier only grows; so does warm_end_. The pages between them
// are faulted in by a locked add of zero to one word of each: no byte changes,
// so it is safe on extents any process writes at the same moment. Page by page
// rather than madvise(MADV_POPULATE_WRITE), which holds the address space's
// lock across the whole range: a low-priority thread preempted there would
// stall every mmap of the driver. Under ThreadSanitizer, which would take a
// memcpy into a page being touched for a race, the kernel populates instead.

namespace {
void fault_in(std::byte* from, std::byte* to, std::size_t page) noexcept {
#if defined(__SANITIZE_THREAD__)
  (void)page;
  ::madvise(from, static_cast<std::size_t>(to - from), MADV_POPULATE_WRITE);
#else
  for (std::byte* p = from; p < to; p += page)
    std::atomic_ref<std::uint32_t>(*reinterpret_cast<std::uint32_t*>(p)).fetch_add(0, std::memory_order_relaxed);
#endif
}
}  // namespace

std::size_t arena::warm_target() const noexcept {
  return std::min(capacity_, frontier_ + std::min(reserve_, frontier_));
}

bool arena::needs_warming() const noexcept {
  // Once half of what is kept ahead is used up: not on every extent.
  return reserve_ != 0 && warm_end_ + std::min(reserve_, frontier_) / 2 < warm_target();
}

void arena::start_warming(std::size_t reserve, std::function<bool(std::size_t)> may_warm) {
  if (reserve == 0 || warmer_.joinable()) return;
  std::lock_guard lock(mu_);
  reserve_ = reserve;
  may_warm_ = std::move(may_warm);
  try {
    warmer_ = std::thread([this] {
      observe::name_runtime_thread("manta-warmer");  // (names what top -H and perf show)
      warm_loop();
    });
  } catch (const std::system_error& e) {  // out of threads (a pids limit): warming is optional
    reserve_ = 0;
    MANTA_DEBUG << "arena warming off: " << e.what();
  }
}

void arena::stop_warming() noexcept {
  {
    std::lock_guard lock(mu_);
    reserve_ = 0;
  }
  warm_cv_.notify_all();
  if (warmer_.joinable()) warmer_.join();
}

std::size_t arena::warm_bytes() const {
  std::lock_guard lock(mu_);
  return std::max(warm_end_, frontier_);
}

std::size_t arena::default_warm_reserve() const {
  if (const char* v = std::getenv("MANTA_ARENA_WARM_MB")) {
    const long long mb = std::atoll(v);
    return mb <= 0 ? 0 : std::min(capacity_, static_cast<std::size_t>(mb) << 20);
  }
  return std::min<std::size_t>(capacity_ / 8, std::size_t{256} << 20);
}

void arena::warm_loop() {
  // The lowest priority short of SCHED_IDLE: it still gets a turn on a busy
  // machine, so it never holds a fault's lock for long.
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);
  constexpr std::size_t chunk = 1 << 20;  // between two questions to may_warm_
  constexpr auto retry = std::chrono::milliseconds(20);
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGE_SIZE));
  std::unique_lock lock(mu_);
  for (;;) {
    warm_cv_.wait(lock, [&] { return reserve_ == 0 || needs_warming(); });
    while (reserve_ != 0 && warm_end_ < warm_target()) {
      const std::size_t from = std::max(warm_end_, frontier_) / page * page;
      const std::size_t to = std::min(warm_target(), from + chunk);
      lock.unlock();
      const bool go = !may_warm_ || may_warm_(to - from);
      // Offsets count from base_ (what allocate returns): the mapping's start.
      if (go) fault_in(base_ + from, base_ + to, page);
      lock.lock();
      if (!go) {  // no idle core, or memory is short: look again later
        warm_cv_.wait_for(lock, retry, [&] { return reserve_ == 0; });
        continue;
      }
      warm_end_ = std::max(warm_end_, to);
    }
    if (reserve_ == 0) return;
  }
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

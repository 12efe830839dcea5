// runtime/pool_allocated.hpp: where the driver's per-task objects (tasks,
// directory entries, the directory's nodes) come from: TBB's scalable
// allocator. They come and go a hundred thousand at a time, made by one thread
// and freed by another; with malloc, coalescing the freed neighbours
// (unlink_chunk, malloc_consolidate) took ~15% of the driver's time in tasks in
// bulk.
//
// TBB's allocator has no fork handlers: a child forked while a runtime thread
// was inside it inherits that thread's spin lock held forever, and its first
// allocation that needs it spins for good. So a fork child of a running
// runtime (process::allocate_from_malloc) takes these objects from malloc,
// which glibc keeps fork-safe, and never frees its parent's (release_slow).
// Under the sanitizers they always come from malloc, which the sanitizers see.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>

#include <boost/container/options.hpp>
#include <boost/container/vector.hpp>
#include <tbb/scalable_allocator.h>

#include "process/context.hpp"

namespace manta::runtime {

inline void* pool_malloc(std::size_t bytes) {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  if (!process::allocate_from_malloc.load(std::memory_order_relaxed)) {
    if (void* p = scalable_malloc(bytes)) return p;
    throw std::bad_alloc();
  }
#endif
  if (void* p = std::malloc(bytes)) return p;
  throw std::bad_alloc();
}

inline void pool_free(void* p) noexcept {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  if (!process::allocate_from_malloc.load(std::memory_order_relaxed)) return scalable_free(p);
#endif
  std::free(p);
}

/// A base whose operator new is pool_malloc.
struct pool_allocated {
  static void* operator new(std::size_t bytes) { return pool_malloc(bytes); }
  static void operator delete(void* p) noexcept { pool_free(p); }
};

/// The standard allocator interface over pool_malloc (for TBB's containers,
/// whose default allocator is TBB's allocator whatever the process).
template <class T>
struct pool_allocator {
  using value_type = T;
  pool_allocator() = default;
  template <class U>
  pool_allocator(const pool_allocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(pool_malloc(n * sizeof(T))); }
  void deallocate(T* p, std::size_t) noexcept { pool_free(p); }
  template <class U>
  bool operator==(const pool_allocator<U>&) const noexcept { return true; }
};

/// A vector of 16 bytes (32-bit size and capacity, not 64-bit) whose elements
/// come from pool_malloc, for the lists every pending task and entry holds (its
/// arguments, returns, waiters): one element takes TBB's 8-byte bin, not
/// malloc's 32-byte smallest chunk. A million pending tasks hold millions of them.
template <class T>
using pool_vector = boost::container::vector<
    T, pool_allocator<T>, boost::container::vector_options_t<boost::container::stored_size<std::uint32_t>>>;

}  // namespace manta::runtime

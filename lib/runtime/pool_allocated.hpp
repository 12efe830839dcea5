// runtime/pool_allocated.hpp: a base for the driver's per-task objects (tasks,
// directory entries), allocated from TBB's scalable allocator. They come and go
// a hundred thousand at a time, made by one thread and freed by another; with
// malloc, coalescing the freed neighbours (unlink_chunk, malloc_consolidate)
// took ~15% of the driver's time in tasks in bulk. Under the sanitizers they
// come from operator new, so AddressSanitizer still sees a use after free.
#pragma once

#include <cstddef>
#include <new>

#include <tbb/scalable_allocator.h>

namespace manta::runtime {

struct pool_allocated {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  static void* operator new(std::size_t bytes) {
    if (void* p = scalable_malloc(bytes)) return p;
    throw std::bad_alloc();
  }
  static void operator delete(void* p) noexcept { scalable_free(p); }
#endif
};

}  // namespace manta::runtime

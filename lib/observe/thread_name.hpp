// observe/thread_name.hpp: names the runtime's own threads (what top -H and
// perf show) and marks them as the runtime's, so that code they share with
// user threads can tell them apart (a user thread may park while the process
// exits; a runtime thread must not: shutdown joins it).
#pragma once

#include <sys/prctl.h>

namespace manta::observe {

inline thread_local bool runtime_thread = false;

/// Names the calling thread (at most 15 characters are kept) and marks it as the runtime's.
inline void name_runtime_thread(const char* name) noexcept {
  ::prctl(PR_SET_NAME, name);
  runtime_thread = true;
}

/// Whether the calling thread is one the runtime started.
inline bool is_runtime_thread() noexcept { return runtime_thread; }

}  // namespace manta::observe

// detail/introspect.hpp: a look inside the running node, for tests and tools.
// Not part of the stable API.
#pragma once

#include <cstddef>
#include <vector>

namespace manta::detail {

/// pids of the zygote and the live workers of this driver's runtime.
std::vector<int> runtime_process_ids();
/// Bytes of the arena in use.
std::size_t arena_used_bytes();
/// Objects in the directory.
std::size_t object_count();

}  // namespace manta::detail

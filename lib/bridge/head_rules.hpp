// bridge/head_rules.hpp: what the head state's files share (head_state.cpp,
// head_tasks.cpp, head_actors.cpp, head_objects.cpp); not part of the bridge's interface.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "bridge/task_wire.hpp"

namespace manta::bridge::head_rules {

/// Why place() found no node, when nodes that had what a task asks were lost:
/// a new task or actor then waits for one to join (head_state::settings::node_wait).
inline constexpr std::string_view lost_everywhere = "every node that could run it was lost";
inline constexpr std::string_view unplaced_yet = "could not be placed: every node that has what it asks was lost";
/// Long frames at most that one peer may be sending at once.
inline constexpr std::size_t max_open_streams = 1024;

using bridge::kind_actor_died;
using bridge::kind_node_died;
using bridge::kind_usage;
using bridge::mode_construct;

/// Where a part's stream number is, and where the task's number is in a first part.
inline constexpr std::size_t stream_at = 0, first_bytes_at = 8 + 1 + 2 + 8;
inline void put_u64(std::string& body, std::size_t at, std::uint64_t v) { std::memcpy(body.data() + at, &v, sizeof v); }

/// The outcome of a task that failed at the head.
inline task_outcome failed(std::uint64_t id, std::uint8_t kind, const std::string& type, std::string message,
                           const std::string& function, std::string node = {}) {
  task_outcome o;
  o.id = id;
  o.ok = false;
  o.node = std::move(node);
  o.error.kind = kind;
  o.error.remote_type = type;
  o.error.message = std::move(message);
  o.error.function = function;
  return o;
}

}  // namespace manta::bridge::head_rules

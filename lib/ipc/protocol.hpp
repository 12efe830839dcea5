// ipc/protocol.hpp: the control messages between the driver's runtime and the
// processes it runs, and the encodings they share (value locations, errors).
#pragma once

#include <cstdint>
#include <string>

#include "ipc/frame.hpp"

namespace manta::ipc {

enum class msg : std::uint16_t {
  // driver -> worker
  run_task = 1,      ///< key, function, mode, returns, options, arguments
  object_ready = 2,  ///< an object a worker subscribed to is sealed (or failed)
  alloc_reply = 3,   ///< an arena extent for a worker's large value (or a failure)
  actor_reply = 4,   ///< the answer to find_actor
  resources_reply = 5,  ///< the answer to resources_request
  // worker -> driver
  task_done = 16,      ///< results or the error of a task
  submit = 17,         ///< a nested task
  put = 18,            ///< an object the worker created
  add_ref = 19,        ///< the worker now holds these objects
  release = 20,        ///< the worker no longer holds these objects
  subscribe = 21,      ///< send object_ready for these objects
  alloc_request = 22,  ///< reserve an arena extent
  block = 23,          ///< the running task waits in get/wait: its CPU is lent
  unblock = 24,        ///< the task runs again
  free_alloc = 25,     ///< give back an extent that was never sealed
  find_actor = 26,     ///< the actor with this name (get_actor)
  kill_actor = 27,     ///< end this actor
  resources_request = 28,  ///< the node's resources (available or total)
  cancel = 29,             ///< cancel the tasks producing these objects
};

enum class error_kind : std::uint8_t {
  task_exception = 0,
  worker_crashed = 1,
  actor_died = 2,
  object_store_full = 3,
  usage = 4,
  cancelled = 5,
};

/// A failure stored in place of an object's value.
struct error_info {
  error_kind kind = error_kind::task_exception;
  std::string remote_type, message, function, chain;
  std::int32_t pid = 0;
  std::int32_t signal = 0;
};

void write_error(frame_writer& w, const error_info& e);
error_info read_error(frame_reader& r);
/// Throws the public exception matching `e`.
[[noreturn]] void throw_error(const error_info& e);
/// The error a task gets when an argument it depends on failed.
error_info chained(const error_info& cause, const std::string& dependent);

inline constexpr std::uint64_t no_offset = ~std::uint64_t{0};

/// Where a value lies: inline bytes in a message, or an extent of the arena.
struct value_location {
  std::uint64_t type_tag = 0;
  std::uint64_t size = 0;
  std::uint64_t offset = no_offset;  ///< arena offset, or no_offset when inline
  const std::byte* inline_data = nullptr;
};

/// Inline bytes are written 8-aligned so spans over them are aligned.
void write_location(frame_writer& w, std::uint64_t tag, std::uint64_t size, std::uint64_t offset,
                    const void* inline_bytes);
value_location read_location(frame_reader& r);

}  // namespace manta::ipc

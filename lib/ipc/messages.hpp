// ipc/messages.hpp: every control message between the driver and the processes
// it runs, one struct each, its writer and reader side by side. Readers return
// views into the frame body (valid until the inbox reads again) and check each
// count against the bytes that back it before anything is allocated.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/container/small_vector.hpp>

#include <manta/detail/core.hpp>
#include <manta/detail/task_request.hpp>

#include "ipc/failure.hpp"
#include "ipc/frame.hpp"

namespace manta::ipc {

enum class msg : std::uint16_t {
  // driver -> worker
  run_task = 1,
  object_ready = 2,
  alloc_reply = 3,
  actor_reply = 4,
  resources_reply = 5,
  nodes_reply = 6,
  // worker -> driver
  task_done = 16,
  submit = 17,
  put = 18,
  add_ref = 19,
  release = 20,
  subscribe = 21,
  alloc_request = 22,
  block = 23,
  unblock = 24,
  free_alloc = 25,
  find_actor = 26,
  kill_actor = 27,
  resources_request = 28,
  cancel = 29,
  nodes_request = 30,
};

inline constexpr std::uint64_t no_offset = ~std::uint64_t{0};

/// Where a value lies: inline bytes in the message, or an extent of the arena.
struct value_location {
  std::uint64_t type_tag = 0;
  std::uint64_t size = 0;
  std::uint64_t offset = no_offset;  ///< arena offset, or no_offset when inline
  const std::byte* inline_data = nullptr;
};

/// Ids of the refs serialised inside a value. Up to `max_inline_ids` travel in
/// the message; a longer list is written into an arena extent granted to the
/// sender (`offset`), which the receiver reads and frees: a value holding
/// millions of refs never makes a frame too large.
struct id_list {
  std::span<const object_id> ids;   ///< inline, when offset == no_offset
  std::uint64_t offset = no_offset;  ///< extent holding `count` ids
  std::uint64_t count = 0;
};
inline constexpr std::size_t max_inline_ids = 4096;

// ---- driver -> worker

/// Run a task: what to call, where its arguments lie, where its results go.
struct run_task {
  static constexpr msg type = msg::run_task;
  std::uint64_t key = 0;
  std::uint64_t function = 0;
  detail::call_mode mode = detail::call_mode::call;
  std::uint16_t concurrency = 1;  ///< constructors: the actor's max_concurrency
  std::string_view name;          ///< the task's name option, or empty
  std::span<const object_id> returns;
  std::uint64_t grant_offset = no_offset;  ///< an extent offered for its result
  std::uint64_t grant_size = 0;
  /// Sent ahead to a busy process: it runs only if the process takes
  /// `ahead_seq` (this sending's number: a task taken back and sent ahead
  /// again has a new one) out of its control slot's ahead words first
  /// (process/control.hpp), and never nested (the body's first byte says
  /// so: sent_ahead).
  bool ahead = false;
  std::uint64_t ahead_seq = 0;
  std::span<const std::int32_t> gpus;
  /// Writing: the arguments. Reading: `read` fills `args_storage` and points here.
  std::span<const value_location> args;

  void write(frame_writer& w) const;
  static run_task read(frame_reader& r, std::vector<value_location>& args_storage);
};

/// Whether the run_task `body` was sent ahead (its first byte), without reading it.
inline bool sent_ahead(std::string_view body) noexcept { return !body.empty() && body.front() != 0; }

/// An object a worker subscribed to was sealed, or failed.
struct object_ready {
  static constexpr msg type = msg::object_ready;
  object_id id;
  bool ok = true;
  value_location location;  ///< when ok
  error_info error;         ///< otherwise

  void write(frame_writer& w) const;
  static object_ready read(frame_reader& r);
};

/// The answer to alloc_request: an extent, or no_offset when nothing fits.
struct alloc_reply {
  static constexpr msg type = msg::alloc_reply;
  std::uint64_t request = 0;
  std::uint64_t offset = no_offset;
  std::string_view error;  ///< with no_offset: why there is no room (the store's own words)
  void write(frame_writer& w) const;
  static alloc_reply read(frame_reader& r);
};

/// The answer to find_actor: the actor's id (empty if none), or why not.
struct actor_reply {
  static constexpr msg type = msg::actor_reply;
  std::uint64_t request = 0;
  object_id id;
  std::string_view error;
  void write(frame_writer& w) const;
  static actor_reply read(frame_reader& r);
};

/// The answer to resources_request.
struct resources_reply {
  static constexpr msg type = msg::resources_reply;
  std::uint64_t request = 0;
  std::map<std::string, double> amounts;
  void write(frame_writer& w) const;
  static resources_reply read(frame_reader& r);
};

/// The answer to nodes_request: the other nodes of the driver's cluster, as
/// its driver last heard of them (none on one machine).
struct nodes_reply {
  static constexpr msg type = msg::nodes_reply;
  struct node {
    std::string id, address;
    std::map<std::string, double> resources;
    bool alive = true;
  };
  std::uint64_t request = 0;
  std::vector<node> nodes;
  void write(frame_writer& w) const;
  static nodes_reply read(frame_reader& r);
};

// ---- worker -> driver

/// A task finished: its results, or its error.
struct task_done {
  static constexpr msg type = msg::task_done;
  struct result {
    id_list contained;
    value_location location;
  };
  std::uint64_t key = 0;
  bool ok = true;
  /// The task's result grant was taken by a buffer: it belongs to the worker now
  /// (sealed as a result, put, or freed later), so the driver must not free it.
  bool grant_used = false;
  std::uint64_t ns = 0;  ///< how long it ran
  std::uint64_t started_ns = 0;  ///< when it began (steady clock, shared by the node's processes)
  std::int32_t thread = 0;       ///< the thread that ran it (its kernel id: the timeline's track)
  boost::container::small_vector<result, 1> results;  ///< when ok
  error_info error;                                    ///< otherwise

  void write(frame_writer& w) const;
  static task_done read(frame_reader& r);
};

/// A task submitted from inside a task or an actor.
struct submit {
  static constexpr msg type = msg::submit;
  std::uint64_t function = 0;
  std::uint64_t parent = 0;  ///< the submitting task (cancelled with it), or 0
  detail::call_mode mode = detail::call_mode::call;
  std::uint16_t arg_count = 0;
  detail::task_options options;
  object_id actor;                       ///< method calls: the actor
  std::span<const object_id> returns;    ///< ids the worker chose for the results
  std::span<const object_id> deps;       ///< refs arguments are resolved from
  std::span<const object_id> contained;  ///< refs inside inline arguments
  std::string_view args;                 ///< the argument blob (process/args_blob.hpp)

  void write(frame_writer& w) const;
  static submit read(frame_reader& r);
};

/// An object the worker created.
struct put {
  static constexpr msg type = msg::put;
  object_id id;
  id_list contained;
  value_location location;
  void write(frame_writer& w) const;
  static put read(frame_reader& r);
};

/// A list of ids: add_ref, release, subscribe, kill_actor, cancel. Writers split
/// long lists into several messages (`max_ids_per_message`).
template <msg Type>
struct ids_message {
  static constexpr msg type = Type;
  std::span<const object_id> ids;
  void write(frame_writer& w) const;
  static ids_message read(frame_reader& r);
};
inline constexpr std::size_t max_ids_per_message = 1 << 16;
using add_ref = ids_message<msg::add_ref>;        ///< the worker now holds these objects
using release = ids_message<msg::release>;        ///< the worker no longer holds these
using subscribe = ids_message<msg::subscribe>;    ///< send object_ready for these
using kill_actor = ids_message<msg::kill_actor>;  ///< end these actors
using cancel = ids_message<msg::cancel>;          ///< cancel the tasks producing these

/// Reserve an arena extent for a large value.
struct alloc_request {
  static constexpr msg type = msg::alloc_request;
  std::uint64_t request = 0;
  std::uint64_t size = 0;
  void write(frame_writer& w) const;
  static alloc_request read(frame_reader& r);
};

/// A thread of the running task `key` waits in get/wait until `needed` of
/// `ids` are sealed: its CPU is lent while any such wait lasts. `ids` is a hint
/// (at most max_awaited_ids are sent). `wait` numbers the waits of one process:
/// a task and threads it started may wait at once, each on its own objects.
struct block {
  static constexpr msg type = msg::block;
  std::uint64_t key = 0;
  std::uint32_t needed = 1;
  std::span<const object_id> ids;
  std::uint32_t wait = 0;
  void write(frame_writer& w) const;
  static block read(frame_reader& r);
};
inline constexpr std::size_t max_awaited_ids = 4096;

/// The wait `wait` of the task `key` ended (the task runs again once none is left).
struct unblock {
  static constexpr msg type = msg::unblock;
  std::uint64_t key = 0;
  std::uint32_t wait = 0;
  void write(frame_writer& w) const;
  static unblock read(frame_reader& r);
};

/// Give back an extent that was never sealed.
struct free_alloc {
  static constexpr msg type = msg::free_alloc;
  std::uint64_t offset = no_offset;
  void write(frame_writer& w) const;
  static free_alloc read(frame_reader& r);
};

/// The actor registered under `name` (get_actor).
struct find_actor {
  static constexpr msg type = msg::find_actor;
  std::uint64_t request = 0;
  std::uint64_t class_tag = 0;
  std::string_view name;
  void write(frame_writer& w) const;
  static find_actor read(frame_reader& r);
};

/// The node's resources, available or total.
struct resources_request {
  static constexpr msg type = msg::resources_request;
  std::uint64_t request = 0;
  bool available = false;
  void write(frame_writer& w) const;
  static resources_request read(frame_reader& r);
};

/// A task asks for the cluster's other nodes (nodes(), cluster_resources()).
struct nodes_request {
  static constexpr msg type = msg::nodes_request;
  std::uint64_t request = 0;
  void write(frame_writer& w) const { w.put(request); }
  static nodes_request read(frame_reader& r) { return {r.get<std::uint64_t>()}; }
};

/// Appends `m` as one frame. @throws frame_too_large (nothing is appended).
template <class M>
void append(std::string& out, const M& m) {
  frame_writer w(out, static_cast<std::uint16_t>(M::type));
  m.write(w);
  w.finish();
}

/// Appends an ids message, split into as many frames as it takes.
template <msg Type>
void append(std::string& out, const ids_message<Type>& m) {
  std::span<const object_id> rest = m.ids;
  do {
    auto part = rest.first(std::min(rest.size(), max_ids_per_message));
    frame_writer w(out, static_cast<std::uint16_t>(Type));
    ids_message<Type>{part}.write(w);
    w.finish();
    rest = rest.subspan(part.size());
  } while (!rest.empty());
}

// Encodings the messages share (tests and fuzzers use them too).
void write_location(frame_writer& w, const value_location& v);
value_location read_location(frame_reader& r);
void write_error(frame_writer& w, const error_info& e);
error_info read_error(frame_reader& r);
void write_ids(frame_writer& w, std::span<const object_id> ids);
std::span<const object_id> read_ids(frame_reader& r);
void write_options(frame_writer& w, const detail::task_options& o);
detail::task_options read_options(frame_reader& r);

}  // namespace manta::ipc

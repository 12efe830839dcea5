// bridge/task_wire.hpp: a task as it travels between the nodes of a cluster
// (driver -> head -> node) and its outcome on the way back. Every argument
// travels as a value (the sender resolved its refs), so the node that runs the
// task needs nothing else from the sender. A body is the task's 8-byte number,
// a 4-byte header length, a binary header (task_wire.cpp), and the raw bytes
// (arguments, or result values) after it. The small frames (actor ends,
// lookups, object notes, output) have the same layout.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace manta::bridge {

struct remote_task {
  std::uint64_t id = 0;        ///< the sender's number for it (the head renumbers what it forwards)
  std::uint64_t function = 0;  ///< the registered callable's id (the hash of its name)
  std::string name;            ///< what errors call it
  std::uint8_t mode = 0;       ///< detail::call_mode
  std::uint16_t num_returns = 1;
  std::uint16_t arg_count = 0;
  double num_cpus = 1;
  double num_gpus = 0;
  std::map<std::string, double> resources;  ///< custom resources
  std::uint64_t memory = 0;
  int max_retries = 3;  ///< on a worker's death (on the node), and on the node's loss (by the head)
  bool retry_exceptions = false;
  std::uint64_t timeout_ns = 0;
  int max_calls = 0;
  /// An actor's constructor or method: the actor's key in the cluster
  /// ("<driver id>/<number>", chosen by its driver), else empty.
  std::string actor;
  int max_restarts = 0;      ///< a constructor's: restarts on its node, and elsewhere when its node is lost
  int max_task_retries = 0;  ///< a constructor's: calls retried after a restart on its node
  int max_concurrency = 1;   ///< a constructor's
  /// A named actor's constructor: its name, known cluster-wide (get_actor from
  /// any driver), and its class (the registry's tag), else empty and 0.
  std::string actor_name;
  std::uint64_t class_tag = 0;
  /// The stored objects its `ref` arguments name (the blob's index into this):
  /// their keys in the cluster ("<driver id>/<object id>"). The node fetches
  /// each from the driver once and keeps it until the driver frees it.
  std::vector<std::string> objects;
  /// Handles inside its arguments of actors that live on nodes of the
  /// cluster: the node that runs it makes them there, under the same ids.
  struct handle {
    std::string id;   ///< the handle's object id (32 hex digits)
    std::string key;  ///< the actor's key in the cluster
    std::uint64_t class_tag = 0;
    std::string label;  ///< what messages call it
  };
  std::vector<handle> handles;
  /// The driver whose program it serves ("driver-N"): its sender, or for a
  /// node's nested task, the driver of the task that submitted it. The head
  /// ends the actors it starts when that driver leaves.
  std::string origin;
  /// Sent only because its driver's own workers were busy: lost with its
  /// node, it goes back to its driver (which can run it) rather than wait
  /// at the head for a node.
  bool spilled = false;
  /// Set on a value sent to one node (mode_object): the node it goes to, and
  /// the object's key; its one argument is the value.
  std::string node, object;
  std::string args;  ///< the argument blob: values, and refs into `objects`
  /// The receiver's: values kept out of `args` where they landed as they
  /// arrived (frame::landed); the blob names them as refs past `objects`.
  std::shared_ptr<void> landed;
};

/// remote_task::mode of an object's value on its way to a node that asked for it.
inline constexpr std::uint8_t mode_object = 5;

/// The runtime's numbers the head acts on: ipc::error_kind's, and
/// detail::call_mode's constructor. The bridge does not depend on the
/// runtime; the runtime's conversion (runtime/cluster_driver.cpp) checks at
/// compile time that these are the same, and that mode_object is none of
/// call_mode's.
inline constexpr std::uint8_t kind_actor_died = 2;
inline constexpr std::uint8_t kind_usage = 4;
inline constexpr std::uint8_t kind_node_died = 6;
inline constexpr std::uint8_t mode_construct = 3;

/// A failure as it crosses the cluster (ipc::error_info, field for field).
struct remote_error {
  std::uint8_t kind = 0;
  std::string remote_type, message, function, chain, stack;
  std::int32_t pid = 0;
  std::int32_t signal = 0;
};

/// An object's key and the node it concerns: a node asking for an object
/// (fetch_object), an object that cannot be sent (object_lost, with why), an
/// object freed by its driver (object_freed).
struct object_note {
  std::string object;
  std::string node;
  std::string why;
  /// With object_lost, from its driver: the error of the calls that needed it
  /// (none: node_died_error). `failed`: the object itself failed (the task that
  /// made it threw, or was cancelled) and `error` is its own, which the asker
  /// keeps as the object's, so its tasks run and their get raises it, as on
  /// the driver's own node.
  std::optional<remote_error> error;
  bool failed = false;
};
/// A driver asks the head for the actor of that name (find_actor, with its
/// number for the request); the head answers with its key and class, or why not (actor_found).
struct actor_lookup {
  std::uint64_t request = 0;
  std::string name;
  std::string key;  ///< the answer's: empty if there is none
  std::uint64_t class_tag = 0;
  std::string why;
};
std::string encode_actor_lookup(const actor_lookup& l);
/// @throws wire_error if the body is malformed
actor_lookup decode_actor_lookup(std::string_view body);

/// Lines a process of a node printed while it ran a task of `driver`, for
/// that driver's terminal (an output frame's body).
struct remote_output {
  std::string driver;  ///< the driver's id in the cluster ("driver-N")
  std::string node;    ///< the node's id
  std::int32_t pid = 0;
  bool err = false;  ///< stderr, not stdout
  std::string lines;  ///< whole lines, as written
};
std::string encode_output(const remote_output& o);
/// @throws wire_error if the body is malformed
remote_output decode_output(std::string_view body);

std::string encode_object_note(const object_note& n);
/// @throws wire_error if the body is malformed
object_note decode_object_note(std::string_view body);

struct remote_value {
  std::uint64_t tag = 0;  ///< the stored type
  std::string bytes;
  /// Instead of `bytes`, when set: bytes the sender keeps alive until sent (encoding reads them).
  std::optional<std::string_view> borrowed;
  /// The ids (32 hex digits each) of the object_refs serialised in it.
  std::vector<std::string> inside;
  /// Empty for a task's result. Set for an object a result's refs name that
  /// the node made (carried back with the results): its id there.
  std::string id;
  /// A carried object that failed: why (no bytes).
  std::optional<remote_error> error;
  /// The receiver's: its bytes are not in the frame, they landed outside it
  /// as they arrived (task_outcome::landed, number *landed there).
  std::optional<std::uint32_t> landed;
  std::string_view data() const noexcept { return borrowed ? *borrowed : std::string_view(bytes); }
};

/// An actor handle inside a task's results (or in the objects carried with
/// them), as its receiver makes it under the same id.
struct returned_handle : remote_task::handle {
  /// The sender's driver owned the actor and hands it over: the receiver's
  /// driver ends it when its own handles are gone; the sender keeps the actor
  /// until the head says so (actor_returned). Else the receiver only borrows it.
  bool owned = false;
  /// It lives on the sender's own node and was never offered to the cluster:
  /// the head learns of it here (as of host_actor), hosted by the sender's driver.
  bool hosted = false;
};

struct task_outcome {
  std::uint64_t id = 0;  ///< the task's number, as the receiver knows it
  bool ok = true;
  /// When ok: one per return, then the objects the node made that refs
  /// inside them name (and refs inside those), the innermost first.
  std::vector<remote_value> values;
  /// When ok: the actor handles refs in the values name (made before the values).
  std::vector<returned_handle> handles;
  /// With owned handles: the sender's id as a driver ("driver-N"), which
  /// keeps a count of each until the head returns it (actor_returned).
  std::string lender;
  remote_error error;                ///< when not ok
  std::string node;                  ///< the node that ran it (or was to)
  /// decode_outcome(std::string&&): the frame its values' bytes are views
  /// into (shared: copies of the outcome keep it).
  std::shared_ptr<const std::string> frame;
  /// The receiver's: the values that landed outside the frame (frame::landed).
  std::shared_ptr<void> landed;
};

std::string encode_task(const remote_task& t);
/// What goes before the arguments (a task's body is this, then t.args).
std::string encode_task_head(const remote_task& t);
/// @param with_args  false: only the header is read (`body` may be the start of one)
/// @throws wire_error if the body is malformed
remote_task decode_task(std::string_view body, bool with_args = true);
/// The same, the arguments moved out of `body` rather than copied.
remote_task decode_task(std::string&& body);
std::string encode_outcome(const task_outcome& o);
/// What goes before the values (an outcome's body is this, then each value's bytes).
std::string encode_outcome_head(const task_outcome& o);
/// @param with_values  false: the values' sizes are checked against the body, nothing copied
/// @throws wire_error if the body is malformed
task_outcome decode_outcome(std::string_view body, bool with_values = true);
/// The same, the values left in `body` (kept in task_outcome::frame) and
/// read through views: nothing copied, however long.
/// @param landed  the values (by number, in order) whose bytes are not in
///                `body`: they landed outside it (remote_value::landed)
task_outcome decode_outcome(std::string&& body, std::span<const std::uint32_t> landed = {});
/// Where the values of an outcome begin, and their sizes, from the start of
/// its body (`total` bytes long). @throws wire_error if it is malformed
struct outcome_layout {
  std::size_t head = 0;  ///< the bytes before the values
  std::vector<std::uint64_t> sizes;
};
outcome_layout layout_of_outcome(std::string_view start, std::uint64_t total);
/// Checks the start of an outcome whose body is `total` bytes long (the
/// values' sizes against it); returns it without values. @throws wire_error
task_outcome decode_outcome_head(std::string_view start, std::uint64_t total);

/// An actor whose handles are all gone (it ends once its calls are done), or
/// that is killed (at once): an actor_end frame's body.
struct actor_end {
  std::string actor;  ///< its key (remote_task::actor)
  bool kill = false;
  std::string why;  ///< a kill's reason when the head refuses an actor (its name is taken), or empty
};
std::string encode_actor_end(const actor_end& e);
/// @throws wire_error if the body is malformed
actor_end decode_actor_end(std::string_view body);

/// A cancel_task frame's body: the number of the task to cancel (the sender's
/// own for a driver's, the head's for what it sends a node).
std::string encode_cancel(std::uint64_t id);
/// @throws wire_error if the body is not one number
std::uint64_t decode_cancel(std::string_view body);

/// The task's number, read from an encoded task or outcome without decoding
/// the rest (the head renumbers what it forwards). @throws wire_error
std::uint64_t peek_id(std::string_view body);
/// The same body with its number replaced. @throws wire_error
std::string with_id(std::string_view body, std::uint64_t id);
/// Replaces the number of `body` in place. @throws wire_error
void set_id(std::string& body, std::uint64_t id);

}  // namespace manta::bridge

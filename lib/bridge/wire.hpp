// bridge/wire.hpp: frames between the nodes of a cluster. A frame is a 4-byte
// little-endian length (of what follows), a 2-byte type and the body. The
// decoder takes bytes as they arrive from a socket, checks the length against
// a limit before it keeps anything (a peer announcing 4 GiB gets an error, not
// an allocation), and hands out whole frames.
//
// A body longer than part_size travels as parts (frame_type::part), each of
// them a frame: no frame is ever large, other frames (heartbeats, small tasks)
// go between the parts of a long one, and the head forwards each part as it
// arrives instead of holding the whole body.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

namespace manta::bridge {

/// A frame's body may be at most this long unless a decoder is told less.
inline constexpr std::size_t max_frame_body = 64u << 20;
/// Bodies longer than this go as parts of at most this many bytes.
inline constexpr std::size_t part_size = 8u << 20;
/// A body sent as parts may be at most this long.
inline constexpr std::uint64_t max_long_body = std::uint64_t{16} << 30;

enum class frame_type : std::uint16_t {
  challenge = 1,  ///< head -> peer: a nonce to prove the token on
  proof = 2,      ///< peer -> head: its own nonce and its proof
  welcome = 3,    ///< head -> peer: the head's proof (both know the token)
  refused = 4,    ///< either way: why the connection ends (text)
  heartbeat = 5,  ///< either way, every heartbeat interval: still there
  join = 6,       ///< node -> head: who it is (JSON: host, pid, resources, functions)
  joined = 7,     ///< head -> node: its node id
  stop = 8,       ///< head -> node: the cluster stops; exit
  status_request = 9,   ///< tool -> head
  status_reply = 10,    ///< head -> tool: the node table (JSON)
  stop_request = 11,    ///< tool -> head: stop the cluster
  run_task = 12,        ///< driver -> head -> node: a task to run (bridge/task_wire)
  task_result = 13,     ///< node -> head -> driver: its outcome (bridge/task_wire)
  cluster_update = 14,  ///< head -> driver: the node table (JSON), whenever it changes
  part = 15,            ///< either way: a piece of a long frame (part_header, then the bytes)
  actor_end = 16,       ///< driver -> head -> node: an actor's handles are gone, or it is killed (JSON)
  cancel_task = 17,     ///< driver -> head -> node: cancel a task sent before (encode_cancel)
  fetch_object = 18,    ///< node -> head -> driver: send me this object (object_note)
  object_lost = 19,     ///< driver or head -> node: that object cannot be sent (object_note)
  object_freed = 20,    ///< driver -> head -> nodes holding it: drop your copy (object_note)
  find_actor = 21,      ///< driver -> head: the actor of this name (actor_lookup)
  actor_found = 22,     ///< head -> driver: its key and class, or why not (actor_lookup)
  /// driver -> head: an actor on the driver's own node that other members may
  /// now call, its handle having gone to one (actor_lookup: its key, class, label)
  host_actor = 23,
  /// head -> member: the driver a handle of this actor went to in a result
  /// (task_outcome::handles) is done with it; the member that lent it gives
  /// back the count it kept (the actor's key)
  actor_returned = 24,
  /// node -> head -> driver: lines a task of that driver printed on the node (remote_output)
  output = 25,
};

/// A malformed or oversized frame: the connection it came on is closed.
class wire_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct frame {
  frame_type type{};
  std::string body;
  /// What a landing kept out of the body (frame_landing): the receiver's own.
  std::shared_ptr<void> landed;
};

/// Where the bytes of one long frame go as they arrive, chosen by its
/// receiver from the frame's first part (its header): a landing puts what it
/// wants where it will stay (a value into the receiver's arena), so a long
/// frame is never joined in memory first and copied again.
class frame_landing {
 public:
  virtual ~frame_landing() = default;
  /// The next bytes of the body, after the first part's, in order.
  /// @throws wire_error if they are malformed
  virtual void take(std::string_view bytes) = 0;
  /// Every byte came: the frame to hand on. @throws wire_error if it ended short
  virtual frame finish() = 0;
};
/// Chooses the landing of a long frame from its type, first part and whole
/// length; null: the frame is joined in memory.
using frame_lander =
    std::function<std::unique_ptr<frame_landing>(frame_type type, std::string_view first, std::uint64_t total)>;

/// The bytes of one frame. @throws wire_error if `body` is over max_frame_body.
std::string encode(frame_type type, std::string_view body);
/// The 6 bytes that go before a body of `body_size` bytes (the body then goes
/// as it is, with no copy). @throws wire_error if it is over max_frame_body.
std::string frame_header(frame_type type, std::size_t body_size);

/// What goes before the bytes of a part: the stream (the sender's number for
/// the long frame), whether it is the first or last part or ends the stream
/// unfinished, and, in the first, the long frame's type and its whole length.
struct part_header {
  std::uint64_t stream = 0;
  bool first = false, last = false, abort = false;
  frame_type type{};         ///< the long frame's (first part only)
  std::uint64_t total = 0;   ///< the long frame's body length (first part only)
};
/// The bytes of a part's header.
std::string encode_part_header(const part_header& h);
/// Reads a part's header; `bytes` is set to what follows it. @throws wire_error
part_header decode_part_header(std::string_view body, std::string_view& bytes);

/// Calls `send(header, bytes)` for each frame that carries a long frame of
/// type `type` made of `pieces` (in order) as stream `stream`: one plain frame
/// if it is short, else parts. A part never spans two pieces, and the first
/// piece goes whole in the first part (it holds what a router reads: a task's
/// or an outcome's header). @throws wire_error if the first piece is over
/// max_frame_body (then nothing was sent)
/// @throws wire_error if it is over max_long_body
template <class Send>
void for_each_frame(frame_type type, std::span<const std::string_view> pieces, std::uint64_t stream,
                    Send&& send);
std::uint64_t total_size(std::span<const std::string_view> pieces);
/// Appends to `out` the frame whose body is `pieces` joined: small frames
/// gathered to go in one write. @throws wire_error if it is over max_frame_body
void append_frame(std::string& out, frame_type type, std::span<const std::string_view> pieces);
std::string part_frame_header(const part_header& h, std::size_t bytes);

/// Puts long frames back together from their parts, each stream apart.
class part_assembler {
 public:
  /// @param max_pending  bytes at most announced by unfinished streams
  /// @param lander  where long frames land, if not joined (its landings run on the caller's thread)
  explicit part_assembler(std::uint64_t max_pending = 2 * max_long_body, frame_lander lander = {})
      : max_pending_(max_pending), lander_(std::move(lander)) {}
  /// Takes the body of a part frame; returns the long frame once its last part arrived.
  /// @throws wire_error for a part out of order, too long, or of an unknown stream
  std::optional<frame> take(std::string_view part_body);
  /// Streams not finished.
  std::size_t open_streams() const noexcept { return streams_.size(); }
  /// Drops the streams not finished (their landings with them): the connection ended.
  void clear() noexcept {
    streams_.clear();
    pending_ = 0;
  }

 private:
  struct partial {
    frame_type type{};
    std::uint64_t total = 0;
    std::uint64_t received = 0;
    std::string body;                         ///< joined here, unless it lands
    std::unique_ptr<frame_landing> landing;  ///< where its bytes go instead
  };
  std::uint64_t max_pending_;
  frame_lander lander_;
  std::uint64_t pending_ = 0;  ///< the totals of the open streams
  std::map<std::uint64_t, partial> streams_;
};

/// A frame as it lies in the decoder's buffer: valid until the decoder is next used.
struct frame_view {
  frame_type type{};
  std::string_view body;
};

class frame_decoder {
 public:
  /// @param max_body  frames with a longer body are refused (wire_error)
  explicit frame_decoder(std::size_t max_body = max_frame_body) : max_body_(max_body) {}

  /// Takes bytes read from the connection.
  void feed(const void* data, std::size_t size);
  /// Room for at least `bytes` more at the end of the buffer, to read into
  /// (then commit what was read). Views handed out before are invalid after.
  std::span<char> space(std::size_t bytes);
  void commit(std::size_t bytes) noexcept { end_ += bytes; }
  /// How much to read next: what the frame begun still lacks (a long frame
  /// comes in few reads, straight into the buffer), at least 256 KiB.
  std::size_t wanted() const noexcept;
  /// The next whole frame, if one has arrived.
  /// @throws wire_error for a frame too long or too short to hold its type
  std::optional<frame> next();
  /// The same, without copying its body out of the buffer.
  std::optional<frame_view> next_view();
  /// Bytes received and not yet handed out as frames.
  std::size_t pending() const noexcept { return end_ - start_; }
  /// Whether a whole frame waits (next() hands it out without reading more);
  /// true for a malformed one too (next() then says what is wrong).
  bool has_frame() const noexcept;
  /// Changes the limit (raised once the peer has proved the token).
  void set_limit(std::size_t max_body) noexcept { max_body_ = max_body; }

 private:
  /// The whole length (header included) of the frame at start_, once its length has arrived; 0 before.
  std::size_t frame_length() const;

  std::size_t max_body_;
  std::unique_ptr<char[]> buffer_;  ///< not zeroed: reads go straight in
  std::size_t capacity_ = 0;
  std::size_t start_ = 0;  ///< where the next frame begins
  std::size_t end_ = 0;    ///< where the bytes received end
};

template <class Send>
void for_each_frame(frame_type type, std::span<const std::string_view> pieces, std::uint64_t stream,
                    Send&& send) {
  const std::uint64_t total = total_size(pieces);
  if (total <= part_size && pieces.size() == 1) {
    send(frame_header(type, total), *pieces.begin());
    return;
  }
  if (total <= part_size) {  // short, but in pieces: joined (a copy of at most part_size bytes)
    std::string body;
    body.reserve(total);
    for (auto p : pieces) body.append(p);
    send(frame_header(type, total), std::string_view(body));
    return;
  }
  part_header h{stream, true, false, false, type, total};
  std::uint64_t sent = 0;
  bool first_piece = true;
  for (std::string_view p : pieces) {
    if (p.empty() && !first_piece) continue;
    std::size_t at = 0;
    do {
      // The first piece (a task's or an outcome's header) whole, however long.
      const std::size_t n = first_piece ? p.size() : std::min(part_size, p.size() - at);
      sent += n;
      h.last = sent == total;
      send(part_frame_header(h, n), p.substr(at, n));
      h.first = false;
      at += n;
    } while (at < p.size());
    first_piece = false;
  }
}

}  // namespace manta::bridge

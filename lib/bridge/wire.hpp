// bridge/wire.hpp: frames between the nodes of a cluster. A frame is a 4-byte
// little-endian length (of what follows), a 2-byte type and the body. The
// decoder takes bytes as they arrive from a socket, checks the length against
// a limit before it keeps anything (a peer announcing 4 GiB gets an error, not
// an allocation), and hands out whole frames.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace manta::bridge {

/// A frame's body may be at most this long unless a decoder is told less.
inline constexpr std::size_t max_frame_body = 64u << 20;

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
};

/// A malformed or oversized frame: the connection it came on is closed.
class wire_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct frame {
  frame_type type{};
  std::string body;
};

/// The bytes of one frame. @throws wire_error if `body` is over max_frame_body.
std::string encode(frame_type type, std::string_view body);
/// The 6 bytes that go before a body of `body_size` bytes (the body then goes
/// as it is, with no copy). @throws wire_error if it is over max_frame_body.
std::string frame_header(frame_type type, std::size_t body_size);

class frame_decoder {
 public:
  /// @param max_body  frames with a longer body are refused (wire_error)
  explicit frame_decoder(std::size_t max_body = max_frame_body) : max_body_(max_body) {}

  /// Takes bytes read from the connection.
  void feed(const void* data, std::size_t size) { buffer_.append(static_cast<const char*>(data), size); }
  /// The next whole frame, if one has arrived.
  /// @throws wire_error for a frame too long or too short to hold its type
  std::optional<frame> next();
  /// Bytes received and not yet handed out as frames.
  std::size_t pending() const noexcept { return buffer_.size() - start_; }
  /// Changes the limit (raised once the peer has proved the token).
  void set_limit(std::size_t max_body) noexcept { max_body_ = max_body; }

 private:
  std::size_t max_body_;
  std::string buffer_;
  std::size_t start_ = 0;  ///< where the next frame begins in buffer_
};

}  // namespace manta::bridge

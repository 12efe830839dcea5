// bridge/auth.hpp: proving the cluster token before anything else is read.
//
// Mutual challenge-response over a fresh connection, the token never sent:
//   1. head -> peer  challenge: the head's 32-byte nonce
//   2. peer -> head  proof: the peer's nonce, HMAC-SHA256(token, "peer" | head's nonce | peer's nonce)
//   3. head -> peer  welcome: HMAC-SHA256(token, "head" | peer's nonce | head's nonce)
//                    (or refused: why, and the connection closes)
// Proofs are compared in constant time. Until the head has checked the proof
// it reads one frame of at most 64 bytes of body, within a deadline; a peer
// that says anything else, or nothing, is refused. The peer checks the head's
// proof as well, so it never talks to an impostor.
#pragma once

#include <chrono>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

#include "bridge/socket_io.hpp"

namespace manta::bridge {

/// The peer could not prove the token (or the head could not), or the
/// handshake broke off; what() says which, for the log line.
class auth_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// How long each side waits for the other's handshake frames.
inline constexpr std::chrono::milliseconds handshake_timeout{5000};
/// The longest handshake frame (a proof: two 32-byte values) and then some:
/// what a decoder reads before the peer proved the token.
inline constexpr std::size_t max_handshake_body = 64;

class frame_decoder;
struct frame;

/// The head's side of the handshake as state, free of sockets (the head's
/// sessions drive it): the challenge to send first, then the answer to the
/// peer's proof.
class token_check {
 public:
  /// @param binding  the TLS session's keying material (empty on plain TCP)
  token_check(std::string token, std::string binding);
  /// The challenge frame's body.
  const std::string& challenge() const noexcept { return nonce_; }
  /// The welcome frame's body that answers `proof`, the peer's first frame.
  /// @throws token_refused if it proves nothing
  std::string welcome(const frame& proof) const;

 private:
  std::string token_, binding_;
  std::string nonce_;
};

/// The peer did not prove the token: refusal() is the body of the `refused` frame that tells it why.
class token_refused : public auth_error {
 public:
  explicit token_refused(const std::string& why) : auth_error("manta bridge: a peer was refused: " + why), why_(why) {}
  const std::string& refusal() const noexcept { return why_; }

 private:
  std::string why_;
};

/// The head's side, on a connected stream socket (blocking or not).
/// `in` is the connection's decoder: it is limited to the handshake's frames
/// while it runs, and keeps what arrived after them for the caller.
/// @throws auth_error; the caller closes the connection.
void authenticate_peer(socket_ref s, const std::string& token, frame_decoder& in,
                       std::chrono::milliseconds timeout = handshake_timeout);
void authenticate_peer(socket_ref s, const std::string& token, std::chrono::milliseconds timeout = handshake_timeout);

/// The joining peer's side. @throws auth_error.
void authenticate_to_head(socket_ref s, const std::string& token, frame_decoder& in,
                          std::chrono::milliseconds timeout = handshake_timeout);
void authenticate_to_head(socket_ref s, const std::string& token, std::chrono::milliseconds timeout = handshake_timeout);

}  // namespace manta::bridge

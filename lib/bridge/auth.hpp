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
#include <stdexcept>
#include <string>

namespace manta::bridge {

/// The peer could not prove the token (or the head could not), or the
/// handshake broke off; what() says which, for the log line.
class auth_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// How long each side waits for the other's handshake frames.
inline constexpr std::chrono::milliseconds handshake_timeout{5000};

class frame_decoder;

/// The head's side, on a connected stream socket `fd` (blocking or not).
/// `in` is the connection's decoder: it is limited to the handshake's frames
/// while it runs, and keeps what arrived after them for the caller.
/// @throws auth_error; the caller closes the connection.
void authenticate_peer(int fd, const std::string& token, frame_decoder& in,
                       std::chrono::milliseconds timeout = handshake_timeout);
void authenticate_peer(int fd, const std::string& token, std::chrono::milliseconds timeout = handshake_timeout);

/// The joining peer's side. @throws auth_error.
void authenticate_to_head(int fd, const std::string& token, frame_decoder& in,
                          std::chrono::milliseconds timeout = handshake_timeout);
void authenticate_to_head(int fd, const std::string& token, std::chrono::milliseconds timeout = handshake_timeout);

}  // namespace manta::bridge

// bridge/socket_io.hpp: frames over a TCP socket, every wait bounded: sending
// all of a frame, receiving the next one (or learning that the time ran out,
// the peer closed, or another thread asked to stop), connecting and listening.
#pragma once

#include <atomic>
#include <chrono>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "bridge/wire.hpp"

namespace manta::bridge {

using io_clock = std::chrono::steady_clock;

/// The connection broke, or a send did not finish in time.
class io_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
/// A send did not finish in time: its peer read nothing (and said nothing) for its limit.
class send_timeout : public io_error {
 public:
  send_timeout() : io_error("manta bridge: a send timed out") {}
};

class tls_session;
/// A connected socket as the sends and receives here see it: its descriptor,
/// and its TLS session when it has one. Whoever owns the connection owns the
/// session and names it here, so a TLS connection is never written in plain
/// (a plain int is a plain TCP socket).
struct socket_ref {
  socket_ref(int fd, tls_session* tls = nullptr) noexcept : fd(fd), tls(tls) {}  // NOLINT(google-explicit-constructor)
  int fd;
  tls_session* tls;
};

/// Sends all of `bytes` before `until`. @throws io_error
void send_all(socket_ref s, std::string_view bytes, io_clock::time_point until);
/// Sends all of `first` then all of `second` (one frame's header and body,
/// without joining them) before `until`. @throws io_error
void send_all(socket_ref s, std::string_view first, std::string_view second, io_clock::time_point until);
/// Sends all of `pieces` in order (several frames in one call) before `until`. @throws io_error
void send_all(socket_ref s, std::span<const std::string_view> pieces, io_clock::time_point until);
/// Why a send to a peer timed out, for logs and the node table: it read
/// nothing and said nothing since `heard`.
std::string send_timeout_why(io_clock::time_point heard, io_clock::time_point now = io_clock::now());
/// When another thread last heard the peer (a frame or bytes from it): set by
/// the connection's reader, read by its senders.
using heard_time = std::atomic<io_clock::time_point>;
/// The same, and each time bytes leave, the deadline moves to `stall` from
/// then if that is later: a slow reader that keeps reading is waited for; one
/// that stops reading fails the send `stall` after its last byte. With
/// `heard`, the deadline also moves to `stall` after the peer was last heard:
/// a peer that paces what it reads from us (behind a slow receiver of its own)
/// but still speaks is waited for.
void send_all(socket_ref s, std::span<const std::string_view> pieces, io_clock::time_point until,
              io_clock::duration stall, const heard_time* heard = nullptr);

// For the sends here and in bridge/tls: milliseconds left to `until` (-1: no
// limit); how long one wait of a send may be (short while `heard` may move
// the deadline); whether a waiting send ran out of time (moving `until` by `heard` first).
int left_ms(io_clock::time_point until);
int send_wait_ms(io_clock::time_point until, const heard_time* heard);
bool send_ran_out(io_clock::time_point& until, io_clock::duration stall, const heard_time* heard);

/// Whether a short send to `fd` would go without waiting (its socket has room).
bool writable_now(int fd);

enum class receive_status { frame, timeout, closed, woken };

/// Waits for the next frame (into `out`) until `until`, or until `wake_fd`
/// (an eventfd, -1: none) is readable. @throws wire_error for a malformed or
/// oversized frame, io_error if the connection broke
receive_status receive(socket_ref s, frame_decoder& in, io_clock::time_point until, frame& out, int wake_fd = -1);
/// The same, the frame left in `in`'s buffer (valid until `in` is next used).
receive_status receive_view(socket_ref s, frame_decoder& in, io_clock::time_point until, frame_view& out,
                            int wake_fd = -1);

/// A TCP connection to HOST:PORT (resolved with Boost.Asio), within `timeout`.
/// @throws io_error naming the address and why
int connect_to(const std::string& host, unsigned short port, std::chrono::milliseconds timeout);

/// A listening TCP socket on `bind_address`:`port` (0: any free port); sets
/// `port` to the one bound. @throws std::system_error naming the address
int listen_on(const std::string& bind_address, unsigned short& port);
/// What to tell a user whose head listens on `bind_address` in plain TCP
/// while other machines can reach it (any address but a loopback one), or "".
std::string plain_tcp_warning(const std::string& bind_address);

}  // namespace manta::bridge

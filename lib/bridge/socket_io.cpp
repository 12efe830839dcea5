// bridge/socket_io.cpp: poll-based sends and receives with deadlines.
#include "bridge/socket_io.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>
#include <vector>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/io_context.hpp>

#include "bridge/tls.hpp"

namespace manta::bridge {

int left_ms(io_clock::time_point until) {
  if (until == io_clock::time_point::max()) return -1;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(until - io_clock::now()).count();
  return ms > 0 ? static_cast<int>(std::min<long long>(ms, 1 << 30)) : 0;
}

int send_wait_ms(io_clock::time_point until, const heard_time* heard) {
  const int left = left_ms(until);
  return heard && (left < 0 || left > 250) ? 250 : left;
}

bool send_ran_out(io_clock::time_point& until, io_clock::duration stall, const heard_time* heard) {
  if (heard) until = std::max(until, heard->load(std::memory_order_acquire) + stall);
  return io_clock::now() >= until;
}

std::string send_timeout_why(io_clock::time_point heard, io_clock::time_point now) {
  const auto quiet = std::chrono::duration_cast<std::chrono::milliseconds>(now - heard);
  return "a send to it timed out: it had read nothing and said nothing for " + std::to_string(quiet.count()) + " ms";
}

bool writable_now(int fd) {
  pollfd p{fd, POLLOUT, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & POLLOUT);
}

namespace {

std::string why(int e) { return std::strerror(e); }

}  // namespace

void send_all(socket_ref s, std::string_view bytes, io_clock::time_point until) { send_all(s, bytes, {}, until); }

void send_all(socket_ref s, std::string_view first, std::string_view second, io_clock::time_point until) {
  const std::string_view pieces[] = {first, second};
  send_all(s, std::span<const std::string_view>(pieces), until);
}

void send_all(socket_ref s, std::span<const std::string_view> pieces, io_clock::time_point until) {
  send_all(s, pieces, until, io_clock::duration{});
}

void send_all(socket_ref s, std::span<const std::string_view> pieces, io_clock::time_point until,
              io_clock::duration stall, const heard_time* heard) {
  if (s.tls) return tls_send_all(*s.tls, s.fd, pieces, until, stall, heard);
  const int fd = s.fd;
  std::size_t piece = 0, at = 0;  // the first byte not sent yet
  for (;;) {
    while (piece < pieces.size() && at == pieces[piece].size()) ++piece, at = 0;
    if (piece == pieces.size()) return;
    iovec parts[64];
    std::size_t count = 0;
    for (std::size_t i = piece; i < pieces.size() && count < std::size(parts); ++i) {
      const std::size_t skip = i == piece ? at : 0;
      if (pieces[i].size() > skip) parts[count++] = {const_cast<char*>(pieces[i].data()) + skip, pieces[i].size() - skip};
    }
    msghdr m{};
    m.msg_iov = parts;
    m.msg_iovlen = count;
    ssize_t n = ::sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      for (auto left = static_cast<std::size_t>(n); left > 0;) {  // past what went
        const std::size_t here = std::min(left, pieces[piece].size() - at);
        at += here;
        left -= here;
        if (at == pieces[piece].size()) ++piece, at = 0;
      }
      if (stall.count() > 0) until = std::max(until, io_clock::now() + stall);  // it moves: more time
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      int ready = ::poll(&p, 1, send_wait_ms(until, heard));
      if (ready == 0 && send_ran_out(until, stall, heard)) throw send_timeout();
      continue;
    }
    throw io_error("manta bridge: the connection broke: " + why(errno));
  }
}

namespace {
/// Waits for bytes until `until` and reads them straight into `in`'s buffer,
/// as much as the frame begun still lacks. @returns frame when bytes came
receive_status read_into(socket_ref s, frame_decoder& in, io_clock::time_point until, int wake_fd) {
  if (s.tls) return tls_read_into(*s.tls, s.fd, in, until, wake_fd);
  const int fd = s.fd;
  for (;;) {
    pollfd p[2] = {{fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
    int ready = ::poll(p, wake_fd >= 0 ? 2 : 1, left_ms(until));
    if (ready == 0) return receive_status::timeout;
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw io_error("manta bridge: poll: " + why(errno));
    }
    if (wake_fd >= 0 && p[1].revents) return receive_status::woken;
    std::span<char> room = in.space(in.wanted());
    ssize_t n = ::recv(fd, room.data(), room.size(), MSG_DONTWAIT);
    if (n > 0) {
      in.commit(static_cast<std::size_t>(n));
      return receive_status::frame;
    }
    if (n == 0 || errno == ECONNRESET || errno == EPIPE) return receive_status::closed;
    if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)
      throw io_error("manta bridge: the connection broke: " + why(errno));
  }
}
}  // namespace

receive_status receive(socket_ref s, frame_decoder& in, io_clock::time_point until, frame& out, int wake_fd) {
  for (;;) {
    if (auto f = in.next()) {
      out = std::move(*f);
      return receive_status::frame;
    }
    if (auto st = read_into(s, in, until, wake_fd); st != receive_status::frame) return st;
  }
}

receive_status receive_view(socket_ref s, frame_decoder& in, io_clock::time_point until, frame_view& out, int wake_fd) {
  for (;;) {
    if (auto f = in.next_view()) {
      out = *f;
      return receive_status::frame;
    }
    if (auto st = read_into(s, in, until, wake_fd); st != receive_status::frame) return st;
  }
}

int connect_to(const std::string& host, unsigned short port, std::chrono::milliseconds timeout) {
  const std::string where = host + ":" + std::to_string(port);
  boost::asio::io_context io;
  boost::asio::ip::tcp::resolver resolver(io);
  boost::system::error_code ec;
  auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  if (ec) throw io_error("manta bridge: cannot resolve " + where + ": " + ec.message());
  const auto until = io_clock::now() + timeout;
  std::string last = "no address";
  for (const auto& entry : endpoints) {
    auto endpoint = entry.endpoint();
    int fd = ::socket(endpoint.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) throw io_error("manta bridge: socket: " + why(errno));
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int rc = ::connect(fd, endpoint.data(), static_cast<socklen_t>(endpoint.size()));
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int error = ETIMEDOUT;
      if (::poll(&p, 1, left_ms(until)) > 0) {
        socklen_t len = sizeof error;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
      }
      rc = error == 0 ? 0 : -1;
      errno = error;
    }
    if (rc == 0) return fd;
    last = why(errno);
    ::close(fd);
  }
  throw io_error("manta bridge: cannot connect to " + where + ": " + last);
}

std::string plain_tcp_warning(const std::string& bind_address) {
  boost::system::error_code ec;
  const auto address = boost::asio::ip::make_address(bind_address, ec);
  if (!ec && address.is_loopback()) return {};
  return "manta: warning: the head listens on " + bind_address +
         ", where other machines can reach it, in plain TCP: the token authenticates only the "
         "handshake, and the tasks, arguments and results after it cross the network unencrypted and "
         "unauthenticated (anyone on the path can read or change them). Give the head --tls-cert and "
         "--tls-key (MANTA_TLS_CERT and MANTA_TLS_KEY under srun or mpirun) to use TLS.";
}

int listen_on(const std::string& bind_address, unsigned short& port) {
  boost::system::error_code ec;
  auto address = boost::asio::ip::make_address(bind_address, ec);
  if (ec) throw std::system_error(EINVAL, std::generic_category(), "manta bridge: bad bind address '" + bind_address + "'");
  boost::asio::ip::tcp::endpoint endpoint(address, port);
  int fd = ::socket(endpoint.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "manta bridge: socket");
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd, endpoint.data(), static_cast<socklen_t>(endpoint.size())) != 0 || ::listen(fd, 64) != 0) {
    int e = errno;
    ::close(fd);
    throw std::system_error(e, std::generic_category(),
                            "manta bridge: cannot listen on " + bind_address + ":" + std::to_string(port));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return fd;
}

}  // namespace manta::bridge

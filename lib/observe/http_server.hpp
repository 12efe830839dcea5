// observe/http_server.hpp: a small HTTP/1.1 server (Boost.Beast) for pages and
// metrics: GET only, one I/O context, asynchronous sessions with a deadline
// each (a browser's idle preconnection must not hold up the others). Used by
// `manta dashboard` and by a runtime serving /metrics (MANTA_METRICS_ADDRESS).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace manta::observe {

/// What a request is answered with.
struct http_reply {
  int status = 200;
  std::string body;
  std::string content_type = "text/plain; charset=utf-8";
};

class http_server {
 public:
  /// Answers the target of a GET ("/path?query"); runs on the I/O context's thread.
  using handler = std::function<http_reply(std::string_view target)>;

  /// Listens on `at` and accepts on `io` (run by the caller).
  /// @throws boost::system::system_error when it cannot listen (the port is taken)
  http_server(boost::asio::io_context& io, const boost::asio::ip::tcp::endpoint& at, handler answer);
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  /// Where it listens (the port chosen, when asked for 0).
  boost::asio::ip::tcp::endpoint local_endpoint() const;

 private:
  struct state;
  std::shared_ptr<state> state_;
};

/// The value of `key` in the target's query string ("" if absent).
std::string query_value(std::string_view target, std::string_view key);

/// Parses "HOST:PORT" (an IPv4 or IPv6 address; "[::1]:80" too).
/// @throws std::invalid_argument naming what is wrong
boost::asio::ip::tcp::endpoint parse_endpoint(const std::string& host_port);

}  // namespace manta::observe

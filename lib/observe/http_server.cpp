// observe/http_server.cpp: sessions of the small HTTP server.
#include "observe/http_server.hpp"

#include <chrono>
#include <stdexcept>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace manta::observe {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr auto session_idle = std::chrono::seconds(30);

}  // namespace

struct http_server::state : std::enable_shared_from_this<http_server::state> {
  state(asio::io_context& io, const tcp::endpoint& at, handler h)
      : acceptor(io, at), backoff(io), answer(std::move(h)) {}

  tcp::acceptor acceptor;
  asio::steady_timer backoff;
  handler answer;

  void accept() {
    acceptor.async_accept([self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec) {
        std::make_shared<session>(std::move(socket), self)->start();
        self->accept();
        return;
      }
      // Out of descriptors, most likely: the connection stays pending, so
      // wait a little rather than spin on it.
      self->backoff.expires_after(std::chrono::milliseconds(100));
      self->backoff.async_wait([self](beast::error_code e) {
        if (!e) self->accept();
      });
    });
  }

  /// One connection: requests answered in turn until it closes or idles out.
  class session : public std::enable_shared_from_this<session> {
   public:
    session(tcp::socket socket, std::shared_ptr<state> s) : stream_(std::move(socket)), server_(std::move(s)) {}
    void start() { read(); }

   private:
    void read() {
      req_ = {};
      stream_.expires_after(session_idle);
      http::async_read(stream_, buffer_, req_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
        if (ec) return self->close();
        self->respond();
        self->stream_.expires_after(session_idle);
        http::async_write(self->stream_, self->res_, [self](beast::error_code ec2, std::size_t) {
          if (ec2 || !self->res_.keep_alive()) return self->close();
          self->read();
        });
      });
    }

    void respond() {
      http_reply r;
      if (req_.method() != http::verb::get) {
        r = {405, "GET only\n"};
      } else {
        try {
          r = server_->answer(std::string_view(req_.target().data(), req_.target().size()));
        } catch (const std::exception& e) {
          r = {500, std::string(e.what()) + "\n"};
        }
      }
      res_ = {static_cast<http::status>(r.status), req_.version()};
      res_.set(http::field::content_type, r.content_type);
      res_.set(http::field::cache_control, "no-store");
      res_.keep_alive(req_.keep_alive());
      res_.body() = std::move(r.body);
      res_.prepare_payload();
    }

    void close() {
      beast::error_code ignored;
      stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    }

    beast::tcp_stream stream_;
    beast::flat_buffer buffer_;
    http::request<http::string_body> req_;
    http::response<http::string_body> res_;
    std::shared_ptr<state> server_;
  };
};

http_server::http_server(asio::io_context& io, const tcp::endpoint& at, handler answer)
    : state_(std::make_shared<state>(io, at, std::move(answer))) {
  state_->accept();
}

http_server::~http_server() {
  beast::error_code ignored;
  state_->acceptor.close(ignored);
  state_->backoff.cancel();
}

tcp::endpoint http_server::local_endpoint() const { return state_->acceptor.local_endpoint(); }

std::string query_value(std::string_view target, std::string_view key) {
  auto q = target.find('?');
  if (q == std::string_view::npos) return {};
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    auto amp = rest.find('&');
    std::string_view pair = rest.substr(0, amp);
    auto eq = pair.find('=');
    if (eq != std::string_view::npos && pair.substr(0, eq) == key) return std::string(pair.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    rest.remove_prefix(amp + 1);
  }
  return {};
}

tcp::endpoint parse_endpoint(const std::string& host_port) {
  const auto colon = host_port.rfind(':');
  if (colon == std::string::npos || colon + 1 == host_port.size())
    throw std::invalid_argument("'" + host_port + "' is not HOST:PORT");
  std::string host = host_port.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = host_port.substr(colon + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 || std::stoul(port) > 65535)
    throw std::invalid_argument("'" + host_port + "': the port is not a number up to 65535");
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(host.empty() ? "127.0.0.1" : host, ec);
  if (ec) throw std::invalid_argument("'" + host_port + "': '" + host + "' is not an IP address");
  return {address, static_cast<unsigned short>(std::stoul(port))};
}

}  // namespace manta::observe

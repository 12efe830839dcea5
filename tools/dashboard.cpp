// tools/dashboard.cpp: the dashboard's pages, served by observe::http_server
// on one thread, every answer made from requests to the runtime's socket.
#include "tools/dashboard.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include <boost/asio.hpp>
#include <nlohmann/json.hpp>

#include "observe/control_socket.hpp"
#include "observe/http_server.hpp"
#include "observe/metrics.hpp"
#include "tools/dashboard_page.hpp"

namespace manta::tools {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using nlohmann::json;

std::string random_token() {
  unsigned char bytes[16] = {};
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::read(fd, bytes, sizeof bytes) != static_cast<ssize_t>(sizeof bytes))
    throw std::runtime_error("cannot read /dev/urandom for the dashboard's token");
  ::close(fd);
  std::string hex;
  for (unsigned char b : bytes) {
    char two[3];
    std::snprintf(two, sizeof two, "%02x", b);
    hex += two;
  }
  return hex;
}

/// Compares in time independent of where they differ: the token is a secret.
bool same_secret(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

struct server_state {
  dashboard_options opts;
  std::string token;
  std::string page;      ///< with the token filled in
  std::string chart_js;  ///< the file's bytes, or empty if it is missing
};

observe::http_reply answer(const server_state& s, std::string_view target) {
  auto reply = [](int status, std::string body, const char* type) { return observe::http_reply{status, std::move(body), type}; };
  std::string_view path = target.substr(0, target.find('?'));
  if (!same_secret(observe::query_value(target, "token"), s.token))
    return reply(403, "a token is needed: use the URL manta dashboard printed\n", "text/plain");
  try {
    if (path == "/") return reply(200, s.page, "text/html; charset=utf-8");
    if (path == "/chart.js") {
      if (s.chart_js.empty()) return reply(404, "// Chart.js is not installed\n", "text/javascript");
      return reply(200, s.chart_js, "text/javascript");
    }
    // The one I/O thread asks the runtime: a runtime that does not answer
    // holds the other sessions up at most this long.
    constexpr int ask_ms = 3000;
    if (path == "/api/status")
      return reply(200, observe::ask(s.opts.socket, "status", ask_ms), "application/json");
    if (path == "/api/memory") {  // ?limit=N&sort=size|age&group=...: the runtime checks each value
      std::string request = "memory";
      for (const char* key : {"limit", "sort", "group"})
        if (std::string v = observe::query_value(target, key); !v.empty()) request += std::string(" ") + key + "=" + v;
      return reply(200, observe::ask(s.opts.socket, request, ask_ms), "application/json");
    }
    if (path == "/api/summary") {  // ?limit=N: the N busiest functions
      std::string request = "summary";
      if (std::string v = observe::query_value(target, "limit"); !v.empty()) request += " limit=" + v;
      return reply(200, observe::ask(s.opts.socket, request, ask_ms), "application/json");
    }
    if (path == "/metrics")
      return reply(200,
                   observe::prometheus_metrics(json::parse(observe::ask(s.opts.socket, "status", ask_ms)),
                                               json::parse(observe::ask(s.opts.socket, "summary", ask_ms))),
                   "text/plain; version=0.0.4");
  } catch (const std::exception& e) {
    return reply(503, json{{"error", e.what()}}.dump(), "application/json");
  }
  return reply(404, "no such page\n", "text/plain");
}

void watch_runtime(asio::steady_timer& timer, const server_state& s, asio::io_context& io) {
  timer.expires_after(std::chrono::seconds(1));
  timer.async_wait([&timer, &s, &io](boost::system::error_code ec) {
    if (ec) return;
    if (::access(s.opts.socket.c_str(), F_OK) != 0) {
      std::printf("the runtime ended: dashboard stops\n");
      std::fflush(stdout);
      io.stop();
      return;
    }
    watch_runtime(timer, s, io);
  });
}

}  // namespace

int run_dashboard(const dashboard_options& o) {
  server_state s;
  s.opts = o;
  s.token = random_token();
  s.page = dashboard_page;
  for (std::size_t at; (at = s.page.find("__TOKEN__")) != std::string::npos;) s.page.replace(at, 9, s.token);
  if (std::ifstream in{o.chart_js, std::ios::binary}) {
    std::stringstream bytes;
    bytes << in.rdbuf();
    s.chart_js = bytes.str();
  } else {
    std::fprintf(stderr, "manta dashboard: %s is missing (apt-get install libjs-chart.js): no chart\n",
                 o.chart_js.c_str());
  }
  asio::io_context io{1};
  // Loopback only: the page shows what the program does, to this machine's users.
  std::unique_ptr<observe::http_server> server;
  try {
    server = std::make_unique<observe::http_server>(io, tcp::endpoint{asio::ip::make_address("127.0.0.1"), o.port},
                                                    [&s](std::string_view target) { return answer(s, target); });
  } catch (const boost::system::system_error& e) {
    throw std::runtime_error("cannot serve on 127.0.0.1:" + std::to_string(o.port) + ": " + e.code().message() +
                             " (--port 0 picks a free port)");
  }
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](boost::system::error_code, int) { io.stop(); });
  asio::steady_timer timer(io);
  if (o.exit_with_runtime) watch_runtime(timer, s, io);
  std::printf("dashboard: http://127.0.0.1:%u/?token=%s\n", server->local_endpoint().port(), s.token.c_str());
  std::fflush(stdout);
  io.run();
  return 0;
}

}  // namespace manta::tools

// tools/dashboard.cpp: the dashboard's HTTP server: one thread, asynchronous
// sessions with a deadline each (a browser's idle preconnection must not hold
// up the others), every answer made from one request to the runtime's socket.
#include "tools/dashboard.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "observe/control_socket.hpp"
#include "tools/dashboard_page.hpp"

namespace manta::tools {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
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

/// The value of `key` in the target's query string ("" if absent).
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

struct server_state {
  dashboard_options opts;
  std::string token;
  std::string page;      ///< with the token filled in
  std::string chart_js;  ///< the file's bytes, or empty if it is missing
};

http::response<http::string_body> answer(const server_state& s, const http::request<http::string_body>& req) {
  auto reply = [&](http::status st, std::string body, const char* type) {
    http::response<http::string_body> res{st, req.version()};
    res.set(http::field::content_type, type);
    res.set(http::field::cache_control, "no-store");
    res.keep_alive(req.keep_alive());
    res.body() = std::move(body);
    res.prepare_payload();
    return res;
  };
  std::string_view target(req.target().data(), req.target().size());
  std::string_view path = target.substr(0, target.find('?'));
  if (req.method() != http::verb::get) return reply(http::status::method_not_allowed, "GET only\n", "text/plain");
  if (!same_secret(query_value(target, "token"), s.token))
    return reply(http::status::forbidden, "a token is needed: use the URL manta dashboard printed\n", "text/plain");
  try {
    if (path == "/") return reply(http::status::ok, s.page, "text/html; charset=utf-8");
    if (path == "/chart.js") {
      if (s.chart_js.empty()) return reply(http::status::not_found, "// Chart.js is not installed\n", "text/javascript");
      return reply(http::status::ok, s.chart_js, "text/javascript");
    }
    // The one I/O thread asks the runtime: a runtime that does not answer
    // holds the other sessions up at most this long.
    constexpr int ask_ms = 3000;
    if (path == "/api/status")
      return reply(http::status::ok, observe::ask(s.opts.socket, "status", ask_ms), "application/json");
    if (path == "/api/memory") {  // ?limit=N&sort=size|age&group=...: the runtime checks each value
      std::string request = "memory";
      for (const char* key : {"limit", "sort", "group"})
        if (std::string v = query_value(target, key); !v.empty()) request += std::string(" ") + key + "=" + v;
      return reply(http::status::ok, observe::ask(s.opts.socket, request, ask_ms), "application/json");
    }
    if (path == "/metrics")
      return reply(http::status::ok, prometheus_metrics(json::parse(observe::ask(s.opts.socket, "status", ask_ms))),
                   "text/plain; version=0.0.4");
  } catch (const std::exception& e) {
    return reply(http::status::service_unavailable, json{{"error", e.what()}}.dump(), "application/json");
  }
  return reply(http::status::not_found, "no such page\n", "text/plain");
}

/// One connection: requests answered in turn until it closes or idles out.
class session : public std::enable_shared_from_this<session> {
 public:
  session(tcp::socket socket, const server_state& s) : stream_(std::move(socket)), state_(s) {}
  void start() { read(); }

 private:
  void read() {
    req_ = {};
    stream_.expires_after(std::chrono::seconds(30));
    http::async_read(stream_, buffer_, req_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec) return self->close();
      self->res_ = answer(self->state_, self->req_);
      self->stream_.expires_after(std::chrono::seconds(30));
      http::async_write(self->stream_, self->res_, [self](beast::error_code ec2, std::size_t) {
        if (ec2 || !self->res_.keep_alive()) return self->close();
        self->read();
      });
    });
  }
  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  http::request<http::string_body> req_;
  http::response<http::string_body> res_;
  const server_state& state_;
};

void accept(tcp::acceptor& acceptor, asio::steady_timer& backoff, const server_state& s) {
  acceptor.async_accept([&acceptor, &backoff, &s](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      std::make_shared<session>(std::move(socket), s)->start();
      accept(acceptor, backoff, s);
      return;
    }
    // Out of descriptors, most likely: the connection stays pending, so wait
    // a little rather than spin on it.
    backoff.expires_after(std::chrono::milliseconds(100));
    backoff.async_wait([&acceptor, &backoff, &s](beast::error_code e) {
      if (!e) accept(acceptor, backoff, s);
    });
  });
}

void watch_runtime(asio::steady_timer& timer, const server_state& s, asio::io_context& io) {
  timer.expires_after(std::chrono::seconds(1));
  timer.async_wait([&timer, &s, &io](beast::error_code ec) {
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

void metric(std::string& out, const char* name, const char* type, const char* help, const std::string& labels,
            double value, bool header = true) {
  char line[512];
  if (header) {
    std::snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    out += line;
  }
  std::snprintf(line, sizeof line, "%s%s %.17g\n", name, labels.c_str(), value);
  out += line;
}

}  // namespace

std::string prometheus_metrics(const json& s) {
  std::string out;
  const json& t = s.at("tasks");
  metric(out, "manta_tasks_finished_total", "counter", "Tasks and actor calls that finished.", "",
         t.at("finished").get<double>());
  metric(out, "manta_tasks_failed_total", "counter", "Tasks and actor calls whose results failed.", "",
         t.at("failed").get<double>());
  metric(out, "manta_task_retries_total", "counter", "Runs retried after a crash or an exception.", "",
         t.at("retried").get<double>());
  bool first = true;
  for (const char* state : {"running", "queued", "waiting_for_arguments"}) {
    metric(out, "manta_tasks", "gauge", "Tasks not finished, by state.", std::string("{state=\"") + state + "\"}",
           t.at(state).get<double>(), first);
    first = false;
  }
  metric(out, "manta_pool_workers", "gauge", "Worker processes in the pool.", "", s.at("pool_workers").get<double>());
  metric(out, "manta_busy_workers", "gauge", "Pool workers running a task.", "", s.at("busy_workers").get<double>());
  metric(out, "manta_actors", "gauge", "Actors the runtime knows.", "", static_cast<double>(s.at("actors").size()));
  const json& o = s.at("objects");
  metric(out, "manta_objects", "gauge", "Objects in the directory.", "", o.at("count").get<double>());
  metric(out, "manta_arena_used_bytes", "gauge", "Bytes of the shared-memory arena in use.", "",
         o.at("arena_used_bytes").get<double>());
  metric(out, "manta_arena_capacity_bytes", "gauge", "Size of the shared-memory arena.", "",
         o.at("arena_capacity_bytes").get<double>());
  metric(out, "manta_spilled_objects", "gauge", "Objects in the spill file.", "", o.at("spilled_objects").get<double>());
  metric(out, "manta_spilled_bytes", "gauge", "Bytes the spill file occupies.", "", o.at("spilled_bytes").get<double>());
  metric(out, "manta_processes_lost_total", "counter", "Workers and actor hosts that died unasked.", "",
         s.at("processes_lost").get<double>());
  first = true;
  for (const auto& [name, total] : s.at("resources").at("total").items()) {
    metric(out, "manta_resource_total", "gauge", "Resources the node offers.", "{resource=\"" + name + "\"}",
           total.get<double>(), first);
    first = false;
  }
  first = true;
  for (const auto& [name, avail] : s.at("resources").at("available").items()) {
    metric(out, "manta_resource_available", "gauge", "Resources not taken.", "{resource=\"" + name + "\"}",
           avail.get<double>(), first);
    first = false;
  }
  return out;
}

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
  tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), o.port});
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](beast::error_code, int) { io.stop(); });
  asio::steady_timer timer(io), backoff(io);
  if (o.exit_with_runtime) watch_runtime(timer, s, io);
  accept(acceptor, backoff, s);
  std::printf("dashboard: http://127.0.0.1:%u/?token=%s\n", acceptor.local_endpoint().port(), s.token.c_str());
  std::fflush(stdout);
  io.run();
  return 0;
}

}  // namespace manta::tools

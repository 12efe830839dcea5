// bridge/membership.cpp: the head's node table and a node's link to it.
//
// Threads: the head has one accepting thread, one watching heartbeats, and one
// per connection (a cluster has tens of nodes, not thousands), each reading its
// peer's frames with a deadline. A connection's sends go under its own mutex
// (its thread answers heartbeats; stop_cluster writes from another).
#include "bridge/membership.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <system_error>

#include <nlohmann/json.hpp>

#include "bridge/auth.hpp"
#include "bridge/socket_io.hpp"
#include "bridge/wire.hpp"

namespace manta::bridge {

using nlohmann::json;

namespace {

/// How long a frame may take to leave; a peer that reads nothing for this
/// long is dropped rather than holding a thread.
constexpr auto send_limit = std::chrono::seconds(5);
/// Connections at most that have not proved the token yet.
constexpr std::ptrdiff_t max_handshakes = 32;

std::string peer_address(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "?";
  char host[INET6_ADDRSTRLEN] = "?";
  unsigned port = 0;
  if (a.ss_family == AF_INET) {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
    port = ntohs(v4->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&a);
  ::inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
  return "[" + std::string(host) + "]:" + std::to_string(ntohs(v6->sin6_port));
}

void wake(int fd) {
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(fd, &one, sizeof one);
}

}  // namespace

std::pair<std::string, unsigned short> split_address(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size())
    throw join_error("manta: an address must be HOST:PORT, not '" + address + "'");
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  unsigned long port = 0;
  try {
    std::size_t used = 0;
    port = std::stoul(address.substr(colon + 1), &used);
    if (used != address.size() - colon - 1 || port == 0 || port > 65535) throw std::invalid_argument("port");
  } catch (const std::exception&) {
    throw join_error("manta: the port of '" + address + "' is not a number from 1 to 65535");
  }
  return {host, static_cast<unsigned short>(port)};
}

// ---- the head

struct head::connection {
  /// Read only by its server thread, which alone closes it (under fd_mu, set
  /// to -1); other threads send or shut it down under fd_mu.
  int fd = -1;
  std::mutex fd_mu;
  std::string node_id;  ///< set once it joined as a node (under the head's mu_)
  io_clock::time_point last_heard = io_clock::now();  // under the head's mu_
  bool done = false;                                   // under the head's mu_
  std::thread thread;
  std::atomic<bool> finished{false};  ///< its thread has ended: join it
  std::atomic<bool> proved{false};    ///< the peer proved the token

  void send(frame_type type, std::string_view body) {
    std::lock_guard lock(fd_mu);
    if (fd < 0) throw io_error("manta bridge: the connection is closed");
    send_all(fd, encode(type, body), io_clock::now() + send_limit);
  }
  /// Ends the server thread's reads (it then closes the connection).
  void shut() {
    std::lock_guard lock(fd_mu);
    if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
  }
  void close() {
    std::lock_guard lock(fd_mu);
    if (fd >= 0) ::close(std::exchange(fd, -1));
  }
};

head::head(config c) : cfg_(std::move(c)), port_(cfg_.port) {
  if (cfg_.token.empty()) throw std::invalid_argument("manta bridge: a head needs the cluster token");
  listen_fd_ = listen_on(cfg_.bind, port_);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    ::close(listen_fd_);
    throw std::system_error(errno, std::generic_category(), "manta bridge: eventfd");
  }
  acceptor_ = std::thread([this] { accept_loop(); });
  try {
    watcher_ = std::thread([this] { watch_heartbeats(); });
  } catch (...) {
    stopping_ = true;
    wake(wake_fd_);
    acceptor_.join();
    ::close(listen_fd_);
    ::close(wake_fd_);
    throw;
  }
}

head::~head() {
  stopping_ = true;  // no node joins from here on...
  wake(wake_fd_);
  acceptor_.join();
  watcher_.join();
  stop_cluster();  // ...and every node that did is told
  std::vector<std::shared_ptr<connection>> all;
  {
    std::lock_guard lock(mu_);
    all = connections_;
  }
  for (auto& c : all) c->shut();  // ends each server's read (no new ones: the acceptor is gone)
  for (auto& c : all) c->thread.join();
  ::close(listen_fd_);
  ::close(wake_fd_);
}

void head::accept_loop() {
  for (;;) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) continue;
    if (stopping_) return;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) {  // the connection stays pending: do not spin on it
        pollfd w{wake_fd_, POLLIN, 0};
        ::poll(&w, 1, 100);
      }
      continue;
    }
    auto c = std::make_shared<connection>();
    c->fd = fd;
    std::lock_guard lock(mu_);
    // Connections that ended (tools' requests, lost nodes) go: their threads are joined.
    std::erase_if(connections_, [](const std::shared_ptr<connection>& old) {
      if (!old->finished.load(std::memory_order_acquire)) return false;
      old->thread.join();
      return true;
    });
    // A thread per connection, but only so many before the token is proved:
    // strangers opening sockets cannot pile threads up.
    auto unproved = std::count_if(connections_.begin(), connections_.end(),
                                  [](const auto& old) { return !old->proved.load(std::memory_order_acquire); });
    if (unproved >= max_handshakes) {
      ::close(fd);
      continue;
    }
    connections_.push_back(c);
    try {
      c->thread = std::thread([this, c] {
        serve(c);
        c->close();
        c->finished.store(true, std::memory_order_release);
      });
    } catch (const std::system_error&) {  // no thread to be had: the peer is dropped
      connections_.pop_back();
      c->close();
    }
  }
}

std::string head::registry_difference(const std::vector<std::string>& functions) {
  if (!have_reference_) {
    reference_ = functions;
    have_reference_ = true;
    return {};
  }
  auto [mine, theirs] = std::mismatch(reference_.begin(), reference_.end(), functions.begin(), functions.end());
  if (mine == reference_.end() && theirs == functions.end()) return {};
  if (theirs == functions.end() || (mine != reference_.end() && *mine < *theirs))
    return "it lacks '" + *mine + "', which the cluster's first node registered";
  return "it registers '" + *theirs + "', which the cluster's first node does not";
}

void head::serve(std::shared_ptr<connection> c) {
  const std::string where = peer_address(c->fd);
  auto finish = [&](const std::string& why) {
    std::lock_guard lock(mu_);
    c->done = true;
    for (auto& n : nodes_)
      if (n.id == c->node_id && n.alive) {
        n.alive = false;
        n.lost_why = why;
      }
  };
  try {
    frame_decoder in;  // one for the connection's life: nothing that arrives early is lost
    authenticate_peer(c->fd, cfg_.token, in);
    c->proved.store(true, std::memory_order_release);
    frame f;
    if (receive(c->fd, in, io_clock::now() + std::chrono::seconds(5), f, wake_fd_) != receive_status::frame)
      return finish("it said nothing after the handshake");
    if (f.type == frame_type::status_request) {
      c->send(frame_type::status_reply, nodes_json());
      return finish("");
    }
    if (f.type == frame_type::stop_request) {
      stop_cluster();
      c->send(frame_type::status_reply, "{}");
      if (cfg_.on_stop_request) cfg_.on_stop_request();
      return finish("");
    }
    if (f.type != frame_type::join) {
      c->send(frame_type::refused, "the first frame after the handshake must be a join or a request");
      return finish("");
    }
    node_info info;
    try {
      json j = json::parse(f.body);
      info.host = j.at("host").get<std::string>();
      info.pid = j.at("pid").get<int>();
      info.resources = j.at("resources").get<std::map<std::string, double>>();
      info.functions = j.at("functions").get<std::vector<std::string>>();
    } catch (const std::exception& e) {
      c->send(frame_type::refused, std::string("a malformed join: ") + e.what());
      return finish("");
    }
    std::sort(info.functions.begin(), info.functions.end());
    std::string id;
    {
      std::lock_guard lock(mu_);
      std::string difference = registry_difference(info.functions);
      if (!difference.empty()) {
        c->send(frame_type::refused, "its binary differs from the cluster's: " + difference);
        c->done = true;
        return;
      }
      id = "node-" + std::to_string(++next_node_);
      c->node_id = id;
      c->last_heard = io_clock::now();
      nodes_.push_back({id, where, info, true, {}});
    }
    c->send(frame_type::joined, id);
    // Heartbeats, answered, until the connection ends or the watcher drops it.
    for (;;) {
      receive_status st = receive(c->fd, in, io_clock::time_point::max(), f, -1);
      if (st == receive_status::closed) return finish("its connection closed (the process ended, or its machine)");
      if (st != receive_status::frame) continue;
      {
        std::lock_guard lock(mu_);
        if (c->done) return;  // the watcher declared it lost
        c->last_heard = io_clock::now();
      }
      if (f.type == frame_type::heartbeat) c->send(frame_type::heartbeat, "");
    }
  } catch (const std::exception& e) {
    std::lock_guard lock(mu_);
    c->done = true;
    for (auto& n : nodes_)
      if (n.id == c->node_id && n.alive) {
        n.alive = false;
        n.lost_why = e.what();
      }
  }
}

void head::watch_heartbeats() {
  for (;;) {
    pollfd w{wake_fd_, POLLIN, 0};
    ::poll(&w, 1, 100);
    if (stopping_) return;
    std::lock_guard lock(mu_);
    const auto now = io_clock::now();
    for (auto& c : connections_) {
      if (c->done || c->node_id.empty() || now - c->last_heard < cfg_.lost_after) continue;
      c->done = true;
      c->shut();  // its server thread ends
      for (auto& n : nodes_)
        if (n.id == c->node_id && n.alive) {
          n.alive = false;
          n.lost_why = "no heartbeat for " + std::to_string(cfg_.lost_after.count()) + " ms";
        }
    }
  }
}

std::vector<node_state> head::nodes() const {
  std::lock_guard lock(mu_);
  return nodes_;
}

std::string head::nodes_json() const {
  json rows = json::array();
  for (const auto& n : nodes()) {
    json r = {{"id", n.id},
              {"address", n.address},
              {"host", n.info.host},
              {"pid", n.info.pid},
              {"resources", n.info.resources},
              {"alive", n.alive}};
    if (!n.alive) r["lost_why"] = n.lost_why;
    rows.push_back(std::move(r));
  }
  return json{{"nodes", std::move(rows)}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

void head::stop_cluster() {
  std::vector<std::shared_ptr<connection>> nodes;
  {
    std::lock_guard lock(mu_);
    for (auto& c : connections_)
      if (!c->done && !c->node_id.empty()) nodes.push_back(c);
  }
  for (auto& c : nodes) {
    try {
      c->send(frame_type::stop, "the cluster was stopped");
    } catch (const std::exception&) {  // already gone
    }
  }
}

// ---- a node's link

node_link::node_link(const std::string& address, const std::string& token, node_info info,
                     std::function<void(const std::string&)> on_end)
    : on_end_(std::move(on_end)) {
  auto [host, port] = split_address(address);
  try {
    fd_ = connect_to(host, port, std::chrono::seconds(5));
  } catch (const io_error& e) {
    throw join_error(e.what());
  }
  try {
    authenticate_to_head(fd_, token, in_);
    std::sort(info.functions.begin(), info.functions.end());
    json j = {{"host", info.host}, {"pid", info.pid}, {"resources", info.resources}, {"functions", info.functions}};
    auto until = io_clock::now() + std::chrono::seconds(5);
    send_all(fd_, encode(frame_type::join, j.dump()), until);
    frame f;
    if (receive(fd_, in_, until, f) != receive_status::frame) throw join_error("manta: the head did not answer the join");
    if (f.type == frame_type::refused) throw join_error("manta: the head refused this node: " + f.body);
    if (f.type == frame_type::stop) throw join_error("manta: the cluster is stopping: " + f.body);
    if (f.type != frame_type::joined) throw join_error("manta: the head answered the join with something else");
    id_ = f.body;
  } catch (const join_error&) {
    ::close(fd_);
    throw;
  } catch (const std::exception& e) {
    ::close(fd_);
    throw join_error(e.what());
  }
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    ::close(fd_);
    throw join_error(std::string("manta: eventfd: ") + std::strerror(errno));
  }
  thread_ = std::thread([this] { run(); });
}

node_link::~node_link() {
  wake(wake_fd_);
  // Destroyed from its own on_end: run() touches nothing after the callback.
  if (thread_.get_id() == std::this_thread::get_id()) thread_.detach();
  else thread_.join();
  ::close(fd_);
  ::close(wake_fd_);
}

void node_link::run() {
  std::string why;
  try {
    frame_decoder& in = in_;  // (what came with `joined` is in it already)
    frame f;
    auto last_heard = io_clock::now();
    auto next_beat = io_clock::now();
    for (;;) {
      if (io_clock::now() >= next_beat) {
        send_all(fd_, encode(frame_type::heartbeat, ""), io_clock::now() + send_limit);
        next_beat = io_clock::now() + heartbeat_every;
      }
      receive_status st = receive(fd_, in, next_beat, f, wake_fd_);
      if (st == receive_status::woken) return;  // the link is being destroyed: no callback
      if (st == receive_status::closed) {
        why = "the head was lost (its connection closed)";
        break;
      }
      if (st == receive_status::frame) {
        last_heard = io_clock::now();
        if (f.type == frame_type::stop) {
          why = f.body.empty() ? "the cluster was stopped" : f.body;
          break;
        }
      } else if (io_clock::now() - last_heard > lost_after) {
        why = "the head was lost (no heartbeat for " + std::to_string(lost_after.count()) + " ms)";
        break;
      }
    }
  } catch (const std::exception& e) {
    why = std::string("the head was lost: ") + e.what();
  }
  // The last thing, from a copy of its own: the callback may destroy the link (and on_end_ with it).
  auto callback = std::move(on_end_);
  if (callback) callback(why);
}

std::string ask_head(const std::string& address, const std::string& token, const std::string& request) {
  auto [host, port] = split_address(address);
  int fd = -1;
  try {
    fd = connect_to(host, port, std::chrono::seconds(5));
    authenticate_to_head(fd, token);
    auto until = io_clock::now() + std::chrono::seconds(10);
    send_all(fd, encode(request == "stop" ? frame_type::stop_request : frame_type::status_request, ""), until);
    frame_decoder in;
    frame f;
    if (receive(fd, in, until, f) != receive_status::frame || f.type != frame_type::status_reply)
      throw join_error("manta: the head at " + address + " did not answer");
    ::close(fd);
    return f.body;
  } catch (const join_error&) {
    if (fd >= 0) ::close(fd);
    throw;
  } catch (const std::exception& e) {
    if (fd >= 0) ::close(fd);
    throw join_error(e.what());
  }
}

}  // namespace manta::bridge

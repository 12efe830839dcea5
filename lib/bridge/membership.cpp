// bridge/membership.cpp: the head's node table and a node's link to it.
//
// Threads: the head has one accepting thread, one watching heartbeats, and one
// per connection (a cluster has tens of nodes, not thousands), each reading its
// peer's frames with a deadline. A connection's sends go under its own mutex
// (its thread answers heartbeats; stop_cluster writes from another).
#include "bridge/membership.hpp"
#include "observe/thread_name.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <limits>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include <nlohmann/json.hpp>

#include "bridge/auth.hpp"
#include "bridge/socket_io.hpp"
#include "bridge/task_wire.hpp"
#include "bridge/wire.hpp"

namespace manta::bridge {

std::chrono::milliseconds silence_limit() {
  const char* text = std::getenv("MANTA_SILENCE_LIMIT_S");
  if (!text || !*text) return std::chrono::seconds(30);
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(seconds >= 1) || seconds > 86400)
    throw std::invalid_argument(std::string("manta: MANTA_SILENCE_LIMIT_S=") + text +
                                " is not a number of seconds from 1 to 86400 (how long a silent peer is waited for)");
  return std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
}


using nlohmann::json;

namespace {

/// How long a frame may take to leave: 5 s, and a second more per 8 MiB (a
/// peer that reads slower than that is dropped rather than holding a thread).
io_clock::duration send_limit_for(std::size_t bytes) {
  return std::chrono::seconds(5) + std::chrono::seconds(bytes >> 23);
}
/// Bytes at most waiting to go to one peer (not counting tasks' frames the head keeps anyway).
constexpr std::size_t max_queued = 512u << 20;
/// Bytes of tasks' frames the head keeps at most, to send again on a node's
/// loss; a task past it runs, but fails with its node instead of running again.
constexpr std::uint64_t max_kept = std::uint64_t{4} << 30;
/// Why place() found no node, when nodes that had what a task asks were lost:
/// a new task or actor then waits for one to join (head::config::node_wait).
constexpr std::string_view lost_everywhere = "every node that could run it was lost";
constexpr std::string_view unplaced_yet = "could not be placed: every node that has what it asks was lost";
/// Long frames at most that one peer may be sending at once.
constexpr std::size_t max_open_streams = 1024;
/// How often a reader looks whether bytes arrived (a long frame on its way
/// counts as a sign of life, not only whole frames).
constexpr auto progress_every = std::chrono::milliseconds(250);
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
  /// Read by its server and writer threads; closed by the server thread (under
  /// fd_mu, set to -1) only once its writer has ended; shut down by any thread.
  int fd = -1;
  std::mutex fd_mu;
  std::string node_id;  ///< set once it joined: "node-N" or "driver-N" (under the head's mu_)
  bool driver = false;  ///< it joined as a driver (under the head's mu_)
  io_clock::time_point last_heard = io_clock::now();  // under the head's mu_
  bool done = false;                                   // under the head's mu_
  std::thread thread;
  std::atomic<bool> finished{false};  ///< its thread has ended: join it
  std::atomic<bool> proved{false};    ///< the peer proved the token
  /// Long frames it is sending, by its number for them: the head's number of
  /// their task (0 for one dropped) and the bytes still to come (under the head's mu_).
  struct in_stream {
    std::uint64_t id = 0;
    std::uint64_t left = 0;
    bool outcome = false;  ///< a task's outcome (from a node, or a driver hosting an actor), not a task
  };
  std::map<std::uint64_t, in_stream> in_streams;

  // What goes out, written by a thread of its own: no thread of the head ever
  // waits on a slow peer (a serve thread would stop reading its own peer, the
  // watcher would stall every other).
  std::mutex out_mu;
  std::condition_variable out_cv;
  struct queued_frame {
    std::string header;
    std::shared_ptr<const std::string> body;
    bool kept = false;
  };
  std::deque<queued_frame> outq;  // under out_mu
  std::size_t queued = 0;        // bytes in outq, under out_mu
  std::size_t unkept = 0;        // of them, bytes of frames the head does not keep anyway (under out_mu)
  bool writing = false;          // the writer holds a frame it took (under out_mu)
  bool out_closed = false;       // nothing more is queued (under out_mu)
  std::thread writer;

  /// Queues a frame; never blocks. @throws io_error if the connection is
  /// closed, or its peer reads so slowly that max_queued bytes wait for it
  /// (it is then dropped)
  /// @param kept  the head keeps the body anyway (a task's, to send again):
  ///               it does not count against max_queued
  void send(frame_type type, std::shared_ptr<const std::string> body, bool kept = false) {
    queued_frame f{frame_header(type, body->size()), std::move(body), kept};
    const std::size_t bytes = f.header.size() + f.body->size();
    bool was_empty;
    {
      std::lock_guard lock(out_mu);
      if (out_closed) throw io_error("manta bridge: the connection is closed");
      if (!kept && unkept + bytes > max_queued) {
        out_closed = true;
        shut();
        throw io_error("manta bridge: the peer reads too slowly (" + std::to_string(unkept >> 20) +
                       " MiB wait for it); dropped");
      }
      queued += bytes;
      if (!kept) unkept += bytes;
      was_empty = outq.empty();
      outq.push_back(std::move(f));
    }
    if (was_empty) out_cv.notify_all();  // (the writer sleeps only on an empty queue)
  }
  void send(frame_type type, std::string_view body) {
    send(type, std::make_shared<const std::string>(body));
  }
  void start_writer() {
    writer = std::thread([this] {
      observe::name_runtime_thread("manta-head-wr");  // (names what top -H and perf show)
      std::vector<queued_frame> batch;
      std::vector<std::string_view> pieces;
      for (;;) {
        batch.clear();
        pieces.clear();
        std::size_t bytes = 0;
        {
          std::unique_lock lock(out_mu);
          out_cv.wait(lock, [&] { return out_closed || !outq.empty(); });
          if (outq.empty()) return;  // closed, everything written
          // What waits goes in one call (a few MiB at most): a burst of small
          // frames costs one system call, not one each.
          while (!outq.empty() && batch.size() < 32 && (batch.empty() || bytes < (1u << 20))) {
            queued_frame& f = outq.front();
            const std::size_t n = f.header.size() + f.body->size();
            queued -= n;
            if (!f.kept) unkept -= n;
            bytes += n;
            batch.push_back(std::move(f));
            outq.pop_front();
          }
          writing = true;
        }
        for (const auto& f : batch) {
          pieces.push_back(f.header);
          pieces.push_back(*f.body);
        }
        bool ok = true;
        try {
          send_all(fd, pieces, io_clock::now() + send_limit_for(bytes));
        } catch (const std::exception&) {
          ok = false;
        }
        std::lock_guard lock(out_mu);
        writing = false;
        out_cv.notify_all();
        if (!ok) {  // half a frame may have left: the connection cannot go on
          out_closed = true;
          outq.clear();
          queued = unkept = 0;
          shut();
          return;
        }
      }
    });
  }
  /// Waits until at most `bytes` wait to be written, or the connection
  /// closed (true), or `until` (false).
  bool wait_below(std::size_t bytes, io_clock::time_point until) {
    std::unique_lock lock(out_mu);
    return out_cv.wait_until(lock, until, [&] { return out_closed || queued <= bytes; });
  }
  /// Waits until what was queued has been written (or `until`).
  void flush(io_clock::time_point until) {
    std::unique_lock lock(out_mu);
    out_cv.wait_until(lock, until, [&] { return outq.empty() && !writing; });
  }
  /// Writes what is queued (bounded), then ends the writer.
  void stop_writer() {
    {
      std::lock_guard lock(out_mu);
      out_closed = true;
    }
    out_cv.notify_all();
    if (writer.joinable()) writer.join();
  }
  /// Ends the server thread's reads (it then closes the connection).
  void shut() {
    std::lock_guard lock(fd_mu);
    if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
  }
  /// Ends the server thread's reads only: what is queued still goes out,
  /// within the writer's limit, before the connection closes.
  void shut_reads() {
    std::lock_guard lock(fd_mu);
    if (fd >= 0) ::shutdown(fd, SHUT_RD);
  }
  void close() {
    std::lock_guard lock(fd_mu);
    if (fd >= 0) close_socket(std::exchange(fd, -1));
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
  acceptor_ = std::thread([this] {
    observe::name_runtime_thread("manta-accept");
    accept_loop();
  });
  try {
    watcher_ = std::thread([this] {
      observe::name_runtime_thread("manta-watch");
      watch_heartbeats();
    });
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
  const auto until = io_clock::now() + std::chrono::seconds(2);
  for (auto& c : all) c->flush(until);  // the stops leave before the connections close
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
    int one = 1;  // frames go out at once: small ones must not wait for the peer's delayed ACK (Nagle)
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
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
        observe::name_runtime_thread("manta-head-rd");
        serve(c);
        c->stop_writer();  // what was queued (a reply, a refusal) goes first, within its limit
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
    std::vector<outgoing> out;
    std::lock_guard lock(mu_);  // queued under it: frames for one peer go in the order they were made
    if (!c->done) lose_member(*c, why, out);
    c->done = true;
    send_all_of(out);
  };
  try {
    frame_decoder in;  // one for the connection's life: nothing that arrives early is lost
    if (cfg_.tls) start_tls(c->fd, *cfg_.tls, /*as_head=*/true, {}, io_clock::now() + handshake_timeout);
    authenticate_peer(c->fd, cfg_.token, in);
    c->proved.store(true, std::memory_order_release);
    c->start_writer();
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
      info.role = j.value("role", std::string("node"));
      info.id = j.value("id", std::string());
      if (info.role != "node" && info.role != "driver") throw std::invalid_argument("role '" + info.role + "'");
    } catch (const std::exception& e) {
      c->send(frame_type::refused, std::string("a malformed join: ") + e.what());
      return finish("");
    }
    std::sort(info.functions.begin(), info.functions.end());
    const bool driver = info.role == "driver";
    std::string id;
    std::vector<outgoing> out;
    {
      std::lock_guard lock(mu_);
      std::string difference = registry_difference(info.functions);
      if (!difference.empty()) {
        c->send(frame_type::refused, "its binary differs from the cluster's: " + difference);
        c->done = true;
        return;
      }
      // A node keeps its runtime's id (what node_id() says there) when it is a plain, unused one.
      const bool plain = !info.id.empty() && info.id.size() <= 16 &&
                         info.id.find_first_not_of("0123456789abcdef") == std::string::npos &&
                         std::none_of(nodes_.begin(), nodes_.end(), [&](const node_state& n) { return n.id == info.id; });
      id = driver  ? "driver-" + std::to_string(++next_driver_)
           : plain ? info.id
                   : "node-" + std::to_string(++next_node_);
      c->node_id = id;
      c->last_heard = io_clock::now();
      // Queued before the node can be chosen: `joined` is the first frame it reads.
      c->send(frame_type::joined, id);
      if (!driver) {
        nodes_.push_back({id, where, info, true, {}});
        tell_drivers(out);
        place_restarting(out);  // actors waiting for a node like it start there
        // Under the lock, as the serve threads send: a call routed to a restarted
        // actor by another thread once the lock is free must not overtake its start.
        send_all_of(out);
      }
    }
    if (driver) {
      // A driver hears of the table only after its `joined`, then of every change.
      std::lock_guard lock(mu_);
      c->driver = true;
      out.push_back({c, frame_type::cluster_update, std::make_shared<const std::string>(nodes_json_locked())});
    }
    send_all_of(out);
    // Heartbeats, answered, tasks and outcomes, until the connection ends or the watcher drops it.
    std::size_t seen = in.pending();
    for (;;) {
      receive_status st = receive(c->fd, in, io_clock::now() + progress_every, f, -1);
      if (st == receive_status::closed) return finish("its connection closed (the process ended, or its machine)");
      if (st != receive_status::frame) {
        if (in.pending() != seen) {  // part of a long frame: the peer is alive
          seen = in.pending();
          std::lock_guard lock(mu_);
          c->last_heard = io_clock::now();
        }
        continue;
      }
      out.clear();
      std::vector<std::shared_ptr<connection>> forwarded_to;
      bool beat = false;
      {
        std::lock_guard lock(mu_);
        if (c->done) return;  // the watcher declared it lost
        c->last_heard = io_clock::now();
        // Frames that came together (a driver's tasks come in bursts) are
        // routed under one hold of the lock, up to a part (this thread then
        // waits for its receiver) or 64 of them.
        std::size_t before = 0;
        try {
          for (int taken = 1;; ++taken) {
            beat = beat || f.type == frame_type::heartbeat;
            before = out.size();
            route_frame(c, driver, std::move(f), out);  // malformed: the connection ends
            // Queued under the lock: a part forwarded here cannot overtake the
            // parts another thread sent again to the same node, nor an abort.
            if (f.type == frame_type::part) {
              for (std::size_t i = before; i < out.size(); ++i) forwarded_to.push_back(out[i].to);
              break;
            }
            before = out.size();
            if (taken == 64 || !in.has_frame()) break;
            f = std::move(*in.next());  // malformed: the connection ends
          }
        } catch (...) {
          out.resize(before);  // what came before it still goes
          send_all_of(out);
          throw;
        }
        send_all_of(out);
      }
      seen = in.pending();
      if (beat) c->send(frame_type::heartbeat, "");
      // A long frame is read no faster than its receiver takes it: the head
      // holds a few parts per receiver, not the whole frame. Meanwhile the
      // sender counts as alive (its bytes wait in the socket).
      for (auto& to : forwarded_to) {
        const auto until = io_clock::now() + send_limit_for(max_queued);
        while (!to->wait_below(max_queued / 4, std::min(until, io_clock::now() + progress_every)) &&
               io_clock::now() < until && !stopping_) {
          std::lock_guard lock(mu_);
          if (c->done) return;
          c->last_heard = io_clock::now();
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "manta head: dropped %s (%s): %s\n", c->node_id.empty() ? "a peer" : c->node_id.c_str(),
                 where.c_str(), e.what());
    finish(e.what());
  }
}

void head::route_frame(const std::shared_ptr<connection>& c, bool driver, frame&& f, std::vector<outgoing>& out) {
  if (f.type == frame_type::run_task && driver) route_task(c, std::move(f.body), out);
  // (A driver answers calls of the actors of its own node that it offered.)
  else if (f.type == frame_type::task_result) route_outcome(*c, std::move(f.body), out);
  else if (f.type == frame_type::part) route_part(c, std::move(f.body), out);
  else if (f.type == frame_type::actor_end && driver) end_actor(*c, f.body, out);
  else if (f.type == frame_type::cancel_task && driver) cancel_routed(*c, f.body, out);
  else if (f.type == frame_type::find_actor && driver) find_named(c, f.body, out);
  else if (f.type == frame_type::host_actor && driver) host_actor(c, f.body, out);
  // (A driver fetches too: for a call of an actor of its own node naming another member's object.)
  else if (f.type == frame_type::fetch_object ||
           ((f.type == frame_type::object_lost || f.type == frame_type::object_freed) && driver))
    route_object_note(*c, f.type, f.body, out);
}

void head::watch_heartbeats() {
  for (;;) {
    pollfd w{wake_fd_, POLLIN, 0};
    ::poll(&w, 1, 100);
    if (stopping_) return;
    std::vector<outgoing> out;
    std::vector<std::shared_ptr<connection>> silent;
    {
      std::lock_guard lock(mu_);
      const auto now = io_clock::now();
      for (auto& c : connections_) {
        if (c->done || c->node_id.empty() || now - c->last_heard < cfg_.lost_after) continue;
        c->done = true;
        silent.push_back(c);
        lose_member(*c, "no heartbeat for " + std::to_string(cfg_.lost_after.count()) + " ms", out);
      }
      if (!restarting_.empty() || !waiting_tasks_.empty()) place_restarting(out);  // (their waits end here)
      send_all_of(out);  // under the lock, as the serve threads do: in order per peer
    }
    for (auto& c : silent) {
      // A member that was only frozen (or cut off a while) reads why when it wakes, not "the head was lost".
      try {
        c->send(frame_type::stop, "the head dropped it: no heartbeat for " + std::to_string(cfg_.lost_after.count()) +
                                      " ms (frozen, or cut off?)");
      } catch (const std::exception&) {  // (closed already, or too much waits for it)
      }
      c->shut_reads();  // its server thread ends
    }
  }
}

void head::send_all_of(std::vector<outgoing>& out) {
  for (auto& o : out) {
    try {
      o.to->send(o.type, o.body, o.kept);
    } catch (const std::exception&) {  // its connection is gone: its server thread sees to it
    }
  }
  out.clear();
}

std::string lacking(const std::map<std::string, double>& has, double cpus, double gpus,
                    const std::map<std::string, double>& custom, double memory) {
  auto short_of = [&](const std::string& name, double want) -> std::string {
    if (want <= 0) return {};
    auto it = has.find(name);
    double have = it == has.end() ? 0 : it->second;
    if (have >= want) return {};
    auto number = [](double x) {  // (bytes of memory whole, not as 1.1e+12)
      char text[32];
      std::snprintf(text, sizeof text, x == std::floor(x) && std::fabs(x) < 1e18 ? "%.0f" : "%g", x);
      return std::string(text);
    };
    return name + ": " + number(want) + " asked, " + number(have) + " there";
  };
  if (auto w = short_of("CPU", cpus); !w.empty()) return w;
  if (auto w = short_of("GPU", gpus); !w.empty()) return w;
  if (auto w = short_of("memory", memory); !w.empty()) return w;
  for (const auto& [name, want] : custom)
    if (auto w = short_of(name, want); !w.empty()) return w;
  return {};
}

namespace {

task_outcome failed(std::uint64_t id, std::uint8_t kind, const std::string& type, std::string message,
                    const std::string& function, std::string node = {}) {
  task_outcome o;
  o.id = id;
  o.ok = false;
  o.node = std::move(node);
  o.error.kind = kind;
  o.error.remote_type = type;
  o.error.message = std::move(message);
  o.error.function = function;
  return o;
}

// ipc::error_kind's numbers (the bridge does not depend on ipc).
constexpr std::uint8_t kind_actor_died = 2;
constexpr std::uint8_t kind_usage = 4;
constexpr std::uint8_t mode_construct = 3;  // detail::call_mode's
constexpr std::uint8_t kind_node_died = 6;

}  // namespace

std::shared_ptr<head::connection> head::place(const routed_task& t, std::string& why) {
  // The least loaded node whose resources, less what its actors hold for
  // life, cover what `t` asks; failing that, the least loaded whose totals do
  // (`t` waits there until its actors give some back). Among nodes with a CPU
  // free, one that holds more of the objects `t` names comes first.
  std::shared_ptr<connection> best;
  double best_load = 0;
  bool best_has_room = false;
  std::size_t best_held = 0;
  std::string first_lack;
  bool any_fits = false;
  for (const auto& n : nodes_) {
    std::string lack = lacking(n.info.resources, t.num_cpus, t.num_gpus, t.resources, static_cast<double>(t.memory));
    if (!lack.empty()) {
      if (first_lack.empty()) first_lack = n.id + " has " + lack;
      continue;
    }
    any_fits = true;
    if (!n.alive) continue;
    auto c = std::find_if(connections_.begin(), connections_.end(),
                          [&](const auto& x) { return x->node_id == n.id && !x->done; });
    if (c == connections_.end()) continue;
    std::map<std::string, double> free = n.info.resources;
    if (auto held = held_.find(n.id); held != held_.end())
      for (const auto& [name, amount] : held->second) free[name] -= amount;
    const bool has_room = lacking(free, t.num_cpus, t.num_gpus, t.resources, static_cast<double>(t.memory)).empty();
    auto cpus = n.info.resources.find("CPU");
    double load = (running_[n.id] + hosted_[n.id]) / std::max(1.0, cpus == n.info.resources.end() ? 1.0 : cpus->second);
    std::size_t held = 0;
    if (load < 1)
      for (const auto& key : t.objects)
        if (auto d = directory_.find(key); d != directory_.end() && d->second.count(n.id)) ++held;
    const bool better = !best || (has_room && !best_has_room) ||
                        (has_room == best_has_room && (held > best_held || (held == best_held && load < best_load)));
    if (better) {
      best = *c;
      best_load = load;
      best_has_room = has_room;
      best_held = held;
    }
  }
  if (!best)
    why = nodes_.empty() ? "the cluster has no node"
          : any_fits     ? std::string(lost_everywhere)
                         : "no node of the cluster has what it needs (" + first_lack + ")";
  return best;
}

void head::route_task(const std::shared_ptr<connection>& driver, std::string&& body, std::vector<outgoing>& out) {
  remote_task t = decode_task(body, /*with_args=*/false);  // a malformed task ends the driver's connection
  routed_task r = routed_from(driver, t);
  std::string why;
  std::shared_ptr<connection> node = !t.actor.empty() ? actor_target(driver, t, r, why)
                                     : !t.node.empty()  ? node_target(driver, t, r, why)
                                                        : place(r, why);
  if (!node && r.method && hold_call(std::move(r), std::move(body))) return;  // its actor restarts
  // (Only the wait actor_target made, which leaves `why` empty: not a refused second constructor of that key.)
  if (!node && !t.actor.empty() && !r.method && why.empty() && hold_constructor(t, r, std::move(body), out)) return;
  if (!node && t.actor.empty() && t.node.empty() && !t.spilled && why == lost_everywhere && cfg_.node_wait.count() > 0) {
    if (hold_task(std::move(r), std::move(body))) return;  // a node that can run it may join
    why += " (and the head keeps no more tasks waiting for one)";
  }
  if (!node) {
    if (r.method && actors_.count(t.actor) && actors_[t.actor].restarting) why += " (the head keeps no more calls for it)";
    out.push_back({driver, frame_type::task_result, t.actor.empty() ? unplaced(t, why) : actor_refused(t, why)});
    return;
  }
  const std::uint64_t id = ++next_task_;
  set_id(body, id);  // renumbered in place: the body is not copied on its way
  auto frame = std::make_shared<const std::string>(std::move(body));
  routed_task& kept = routed_.emplace(id, std::move(r)).first->second;
  keep_frame(kept, frame_type::run_task, frame);
  forward(kept, node, out);
  if (!kept.keep) out.push_back({node, frame_type::run_task, frame, true});
  if (!kept.actor.empty()) actor_forwarded(id, kept, frame);
  else if (!t.node.empty()) forget_frames(kept);  // its node is lost: nobody needs it sent again
}

head::routed_task head::routed_from(const std::shared_ptr<connection>& driver, const remote_task& t) {
  routed_task r;
  r.driver = driver;
  r.driver_id = t.id;
  r.name = t.name;
  r.num_cpus = t.num_cpus;
  r.num_gpus = t.num_gpus;
  r.resources = t.resources;
  r.memory = t.memory;
  r.objects = t.objects;
  r.spilled = t.spilled;
  r.retries_left = t.max_retries < 0 ? std::numeric_limits<int>::max() : t.max_retries;  // negative: no limit
  return r;
}

head::shared_body head::unplaced(const remote_task& t, const std::string& why) {
  const bool never = why.rfind("no node", 0) == 0 || nodes_.empty();
  return std::make_shared<const std::string>(
      encode_outcome(failed(t.id, never ? kind_usage : kind_node_died,
                            never ? "manta::usage_error" : "manta::node_died_error",
                            "manta: task '" + t.name + "' cannot run on the cluster: " + why, t.name)));
}

void head::keep_frame(routed_task& r, frame_type type, const shared_body& body) {
  if (r.keep && kept_bytes_ + body->size() <= max_kept) {
    r.frames.emplace_back(type, body);
    r.kept += body->size();
    kept_bytes_ += body->size();
    return;
  }
  // Past what the head keeps: it runs where it is sent, and fails if that node is lost.
  r.keep = false;
  kept_bytes_ -= r.kept;
  r.kept = 0;
  r.frames.clear();
}

void head::drop_route(std::map<std::uint64_t, routed_task>::iterator it) {
  kept_bytes_ -= it->second.kept;
  routed_.erase(it);
}

void head::forward(routed_task& r, const std::shared_ptr<connection>& node, std::vector<outgoing>& out) {
  r.node = node->node_id;
  r.node_connection = node;
  ++running_[r.node];
  // The node fetches what it lacks of these now: later tasks naming them find them there.
  for (const auto& key : r.objects) directory_[key].insert(r.node);
  for (const auto& [type, body] : r.frames) out.push_back({node, type, body, true});
}

namespace {
/// Where a part's stream number is, and where the task's number is in a first part.
constexpr std::size_t stream_at = 0, first_bytes_at = 8 + 1 + 2 + 8;
void put_u64(std::string& body, std::size_t at, std::uint64_t v) { std::memcpy(body.data() + at, &v, sizeof v); }
}  // namespace

void head::route_part(const std::shared_ptr<connection>& from, std::string&& body, std::vector<outgoing>& out) {
  std::string_view bytes;
  const part_header h = decode_part_header(body, bytes);  // malformed: the connection ends
  if (h.first) {
    // Its length is held to what it announced, as the receiver's assembler will.
    if (from->in_streams.count(h.stream)) throw wire_error("manta bridge: a stream started twice");
    if (from->in_streams.size() >= max_open_streams) throw wire_error("manta bridge: too many long frames at once");
    if (bytes.size() > h.total) throw wire_error("manta bridge: a long frame runs past its length");
    if ((bytes.size() == h.total) != h.last) throw wire_error("manta bridge: a long frame's last part is not at its end");
    std::uint64_t id = 0;  // 0: nobody takes it; the rest of it is dropped
    if (h.type == frame_type::run_task && from->driver) {
      remote_task t = decode_task(bytes, /*with_args=*/false);  // the header comes whole in the first part
      routed_task r = routed_from(from, t);
      std::string why;
      std::shared_ptr<connection> node = !t.actor.empty() ? actor_target(from, t, r, why)
                                         : !t.node.empty()  ? node_target(from, t, r, why)
                                                            : place(r, why);
      if (auto a = actors_.find(t.actor); !node && r.method && a != actors_.end() && a->second.restarting) {
        // Its actor waits for a node: the call waits at the head, its parts kept as they come.
        id = ++next_task_;
        put_u64(body, first_bytes_at, id);
        put_u64(body, stream_at, id);
        r.complete = h.last;
        routed_task& held = routed_.emplace(id, std::move(r)).first->second;
        keep_frame(held, frame_type::part, std::make_shared<const std::string>(std::move(body)));
        if (held.keep) {
          a->second.held_calls.emplace_back(id, true);
        } else {
          out.push_back({from, frame_type::task_result, actor_refused(t, why + " (the head keeps no more calls for it)")});
          drop_route(routed_.find(id));
          id = 0;
        }
      } else if (!node) {
        if (auto a = actors_.find(t.actor); why.empty() && a != actors_.end() && t.mode == mode_construct &&
                                            a->second.restarting && a->second.first_start) {
          // (It would wait for a node, but only a whole constructor is kept before its start.)
          why = a->second.lost_with + ", and a constructor over 8 MiB cannot wait at the head for a node";
          restarting_.erase(t.actor);
          a->second.first_start = false;
          actor_gone(t.actor, a->second, "could not start: " + why, out);
          a->second.ctor.driver_id = 0;  // (its constructor is answered below)
          fail_held(a->second, a->second.gone, out);  // the calls held behind it
        }
        out.push_back({from, frame_type::task_result, t.actor.empty() ? unplaced(t, why) : actor_refused(t, why)});
      } else {
        id = ++next_task_;
        put_u64(body, first_bytes_at, id);  // renumbered in place, and its stream with it
        put_u64(body, stream_at, id);
        r.complete = h.last;
        auto part = std::make_shared<const std::string>(std::move(body));
        routed_task& kept = routed_.emplace(id, std::move(r)).first->second;
        keep_frame(kept, frame_type::part, part);
        forward(kept, node, out);
        if (!kept.keep) out.push_back({node, frame_type::part, part, true});
        if (!kept.actor.empty()) actor_forwarded(id, kept, nullptr);
        else if (!t.node.empty()) forget_frames(kept);
        if (!kept.actor.empty() && !kept.method) keep_constructor_part(kept.actor, part);
        if (!kept.actor.empty() && !kept.method && !h.last)
          if (auto a = actors_.find(kept.actor); a != actors_.end()) a->second.complete = false;
      }
    } else if (h.type == frame_type::task_result) {
      const task_outcome o = decode_outcome_head(bytes, h.total);  // checked here: a driver gets no malformed one
      auto it = routed_.find(o.id);
      if (it == routed_.end() || it->second.node != from->node_id) take_over_handles(o, nullptr, out);
      if (it != routed_.end() && it->second.node == from->node_id) {  // else nobody waits for it here
        id = o.id;
        routed_task& r = it->second;
        put_u64(body, first_bytes_at, r.driver_id);
        put_u64(body, stream_at, id);
        auto driver = r.driver.lock();
        if (driver && !driver->done)
          out.push_back({driver, frame_type::part, std::make_shared<const std::string>(std::move(body))});
        r.outcome_streaming = !h.last;
        if (h.last) {
          take_over_handles(o, driver, out);
          --running_[r.node];
          drop_route(it);
        } else {
          r.lends = o;  // taken over once its last part went
        }
      }
    } else {
      throw wire_error("manta bridge: a long frame of a kind that is never long");
    }
    if (!h.last) from->in_streams[h.stream] = {id, h.total - bytes.size(), h.type == frame_type::task_result};
    return;
  }
  auto stream = from->in_streams.find(h.stream);
  if (stream == from->in_streams.end()) {
    if (h.abort) return;
    throw wire_error("manta bridge: a part of a stream that never began");
  }
  const std::uint64_t id = stream->second.id;
  const bool outcome = stream->second.outcome;
  if (h.abort) {
    from->in_streams.erase(stream);
  } else {
    if (bytes.size() > stream->second.left) throw wire_error("manta bridge: a long frame runs past its length");
    stream->second.left -= bytes.size();
    if ((stream->second.left == 0) != h.last) throw wire_error("manta bridge: a long frame's last part is not at its end");
    if (h.last) from->in_streams.erase(stream);
  }
  auto it = routed_.find(id);
  if (id == 0 || it == routed_.end()) return;  // dropped
  routed_task& r = it->second;
  put_u64(body, stream_at, id);
  auto part = std::make_shared<const std::string>(std::move(body));
  if (from->driver && !outcome) {
    if (h.abort) {  // the driver gave it up: so does its node
      if (auto node = r.node_connection.lock()) out.push_back({node, frame_type::part, part});
      if (!r.actor.empty() && !r.method)
        if (auto a = actors_.find(r.actor); a != actors_.end())
          actor_gone(a->first, a->second, "its constructor was not sent whole", out);
      if (!r.node.empty()) --running_[r.node];  // (empty: it waits for a node)
      drop_route(it);
      return;
    }
    keep_frame(r, frame_type::part, part);
    if (!r.keep && r.method && r.node.empty()) {
      // A call held for its actor's restart, past what the head keeps: it can never go.
      if (auto driver = r.driver.lock(); driver && !driver->done)
        out.push_back({driver, frame_type::task_result,
                       std::make_shared<const std::string>(encode_outcome(failed(
                           r.driver_id, kind_actor_died, "manta::actor_died_error",
                           "manta: actor call '" + r.name + "' did not run: its actor waits for a node to start "
                           "again on, and its arguments were more than the head keeps meanwhile",
                           r.name)))});
      drop_route(it);
      return;
    }
    if (!r.actor.empty() && !r.method) keep_constructor_part(r.actor, part);
    r.complete = h.last;
    if (auto node = r.node_connection.lock(); node && !node->done) out.push_back({node, frame_type::part, part, true});
    if (h.last && !r.actor.empty() && !r.method)
      if (auto a = actors_.find(r.actor); a != actors_.end()) {
        a->second.complete = true;  // queued behind its last part: calls forwarded from now come after it
        answer_lookups(a->first, out);
      }
    return;
  }
  if (r.node != from->node_id) return;
  auto driver = r.driver.lock();
  if (driver && !driver->done) out.push_back({driver, frame_type::part, part});
  if (h.last) {
    take_over_handles(r.lends, driver, out);
    --running_[r.node];
    drop_route(it);
  } else if (h.abort) {
    r.outcome_streaming = false;  // (the node answers again, whole or in parts, lending them again)
    take_over_handles(r.lends, nullptr, out);
    r.lends = {};
  }
}

void head::route_outcome(connection& from, std::string&& body, std::vector<outgoing>& out) {
  task_outcome o = decode_outcome(body, /*with_values=*/false);  // a malformed outcome ends the node's connection
  auto it = routed_.find(o.id);
  // A task of a driver that left, or one sent elsewhere since: nobody waits for it here.
  if (it == routed_.end() || it->second.node != from.node_id) {
    take_over_handles(o, nullptr, out);
    return;
  }
  auto driver = it->second.driver.lock();
  const std::uint64_t driver_id = it->second.driver_id;
  if (!it->second.actor.empty() && !it->second.method) {
    auto a = actors_.find(it->second.actor);
    if (a != actors_.end()) {
      a->second.ctor.driver_id = 0;  // answered: a start elsewhere later answers nobody
      if (!o.ok) actor_gone(a->first, a->second, "could not be started on " + from.node_id + ": " + o.error.message, out);
    }
  }
  --running_[it->second.node];
  drop_route(it);
  if (driver_id == 0) return;  // an actor started again elsewhere: its driver heard of it the first time
  if (driver && !driver->done) {
    set_id(body, driver_id);
    out.push_back({driver, frame_type::task_result, std::make_shared<const std::string>(std::move(body))});
  }
  take_over_handles(o, driver, out);  // (behind the outcome: a return to that same driver comes after it)
}

void head::lose_member(connection& c, const std::string& why, std::vector<outgoing>& out) {
  if (c.node_id.empty()) return;  // a tool's request, or a peer that never joined
  auto abort_part = [](std::uint64_t stream) {
    return std::make_shared<const std::string>(encode_part_header({stream, false, false, true}));
  };
  if (c.driver) {
    // Its tasks are cancelled on their nodes (a running one's worker is
    // killed, and the tasks it started elsewhere are cancelled with it):
    // their outcomes have nobody to go to. Its actors' calls end with them below.
    for (auto it = routed_.begin(); it != routed_.end();) {
      auto next = std::next(it);
      auto d = it->second.driver.lock();
      if (!d || d.get() == &c) {
        auto node = it->second.node_connection.lock();
        if (!it->second.complete) {  // its node drops the parts it has
          if (node) out.push_back({node, frame_type::part, abort_part(it->first)});
        } else if (node && !node->done && it->second.actor.empty()) {
          auto cancel = std::make_shared<std::string>(sizeof it->first, '\0');
          std::memcpy(cancel->data(), &it->first, sizeof it->first);
          out.push_back({node, frame_type::cancel_task, std::move(cancel)});
        }
        if (!it->second.node.empty()) --running_[it->second.node];  // (empty: held for a restarting actor)
        drop_route(it);
      }
      it = next;
    }
    // Calls of the actors on its own node that it offered: nobody answers them now.
    for (auto it = routed_.begin(); it != routed_.end();) {
      auto next = std::next(it);
      if (it->second.node == c.node_id) {
        if (auto d = it->second.driver.lock(); d && !d->done) {
          if (it->second.outcome_streaming) out.push_back({d, frame_type::part, abort_part(it->first)});
          out.push_back({d, frame_type::task_result,
                         std::make_shared<const std::string>(encode_outcome(failed(
                             it->second.driver_id, kind_actor_died, "manta::actor_died_error",
                             "manta: actor call '" + it->second.name + "' was lost: its actor lived on the node of " +
                                 c.node_id + ", which left the cluster (" + why + ")",
                             it->second.name, c.node_id)))});
        }
        drop_route(it);
      }
      it = next;
    }
    running_.erase(c.node_id);
    for (auto it = directory_.begin(); it != directory_.end();) {  // (calls' objects it was sent by value, or fetched)
      it->second.erase(c.node_id);
      it = it->second.empty() ? directory_.erase(it) : std::next(it);
    }
    std::erase_if(fetching_, [&](const auto& f) { return f.second == c.node_id; });
    // Its actors end with it, as a driver's do on one node; so do those its
    // program's tasks started on nodes (owned by a node's driver connection,
    // which hears, as of a kill).
    for (auto it = actors_.begin(); it != actors_.end();) {
      auto d = it->second.driver.lock();
      const bool its_program = it->second.origin == c.node_id;
      if (d && d.get() != &c && !its_program) {
        // One it handed over to another driver lived on its node: gone with it.
        if (it->second.on_driver && it->second.node_connection.lock().get() == &c && it->second.gone.empty())
          actor_gone(it->first, it->second,
                     "was lost: it lived on the node of " + c.node_id + ", which left the cluster (" + why + ")", out);
        ++it;
        continue;
      }
      auto end = std::make_shared<const std::string>(encode_actor_end({it->first, true}));
      if (auto node = it->second.node_connection.lock();
          node && !node->done && it->second.gone.empty() && !it->second.on_driver)
        out.push_back({node, frame_type::actor_end, end});
      if (d && d.get() != &c && !d->done) out.push_back({d, frame_type::actor_end, end});
      fail_held(it->second, "ended with the driver " + c.node_id, out);
      const std::string key = it->first;
      it = forget_actor(it, out);
      answer_lookups(key, out);  // (as ended)
    }
    // Copies of its objects on nodes go with it, and fetches it never answered fail.
    const std::string prefix = c.node_id + "/";
    for (auto it = fetching_.begin(); it != fetching_.end();) {
      if (it->first.rfind(prefix, 0) != 0) {
        ++it;
        continue;
      }
      if (auto n = member_of(it->second))
        out.push_back({n, frame_type::object_lost, std::make_shared<const std::string>(encode_object_note(
                                                       {it->first, it->second, "its driver left the cluster"}))});
      it = fetching_.erase(it);
    }
    for (auto it = directory_.begin(); it != directory_.end();) {
      if (it->first.rfind(prefix, 0) != 0) {
        ++it;
        continue;
      }
      auto note = std::make_shared<const std::string>(encode_object_note({it->first, {}, "its driver left"}));
      for (const auto& node : it->second)
        if (auto n = member_of(node)) out.push_back({n, frame_type::object_freed, note});
      it = directory_.erase(it);
    }
    return;
  }
  for (auto& n : nodes_)
    if (n.id == c.node_id && n.alive) {
      n.alive = false;
      n.lost_why = why;
    }
  // The table lists the last lost nodes, not every one since the head began:
  // nodes come and go for as long as it runs, and every change sends the table.
  auto lost = std::count_if(nodes_.begin(), nodes_.end(), [](const node_state& n) { return !n.alive; });
  for (auto it = nodes_.begin(); lost > static_cast<std::ptrdiff_t>(lost_nodes_listed) && it != nodes_.end();)
    if (!it->alive) it = nodes_.erase(it), --lost;
    else ++it;
  running_.erase(c.node_id);
  hosted_.erase(c.node_id);
  held_.erase(c.node_id);
  for (auto it = directory_.begin(); it != directory_.end();) {
    it->second.erase(c.node_id);
    it = it->second.empty() ? directory_.erase(it) : std::next(it);
  }
  std::erase_if(fetching_, [&](const auto& f) { return f.second == c.node_id; });
  std::vector<std::uint64_t> resend;  // calls that may run again once their actor starts again
  for (auto it = routed_.begin(); it != routed_.end();) {
    auto following = std::next(it);
    routed_task& r = it->second;
    if (r.node != c.node_id) {
      it = following;
      continue;
    }
    auto driver = r.driver.lock();
    if (!driver || driver->done) {
      drop_route(it);
      it = following;
      continue;
    }
    if (std::exchange(r.outcome_streaming, false)) {  // the driver drops what came of its outcome
      out.push_back({driver, frame_type::part, abort_part(it->first)});
      take_over_handles(std::exchange(r.lends, {}), nullptr, out);
    }
    if (r.method && r.keep && !r.frames.empty() && r.retries_left > 0) {
      resend.push_back(it->first);  // (lose_actors sends it again, or fails it)
      it = following;
      continue;
    }
    if (!r.actor.empty()) {
      // An actor's call is not run again (unless it may be, above): its actor's
      // state went with the node (the actor starts again below). Its
      // constructor is answered by that start.
      std::string message;
      if (r.method)
        message = "manta: actor call '" + r.name + "' was lost with " + c.node_id + " (" + why + ")";
      else if (!actors_.count(r.actor))
        message = "manta: actor '" + r.name + "' was lost with " + c.node_id + " (" + why + ") while it started";
      if (!message.empty())
        out.push_back({driver, frame_type::task_result,
                       std::make_shared<const std::string>(encode_outcome(failed(
                           r.driver_id, r.method ? kind_actor_died : kind_node_died,
                           r.method ? "manta::actor_died_error" : "manta::node_died_error", std::move(message), r.name,
                           c.node_id)))});
      drop_route(it);  // (its node's count went with the node)
      it = following;
      continue;
    }
    std::string elsewhere;
    std::shared_ptr<connection> next = r.retries_left > 0 && r.keep ? place(r, elsewhere) : nullptr;
    if (next) {
      --r.retries_left;
      forward(r, next, out);
      it = following;
      continue;
    }
    if (r.retries_left > 0 && r.keep && !r.spilled && cfg_.node_wait.count() > 0) {
      // No alive node can run it: it waits for one to join (place_restarting).
      --r.retries_left;
      r.node.clear();
      r.node_connection.reset();
      r.wait_by = std::chrono::steady_clock::now() + cfg_.node_wait;
      r.lost_with = "was lost with " + c.node_id + " (" + why + ")";
      waiting_tasks_.push_back(it->first);
      it = following;
      continue;
    }
    std::string message = "manta: task '" + r.name + "' was lost with " + c.node_id + " (" + why + ")" +
                          (!r.keep             ? ", and its arguments were more than the head keeps to send again"
                           : elsewhere.empty() ? ", past its max_retries"
                                               : ", and " + elsewhere);
    out.push_back({driver, frame_type::task_result,
                   std::make_shared<const std::string>(encode_outcome(failed(
                       r.driver_id, kind_node_died, "manta::node_died_error", std::move(message), r.name, c.node_id)))});
    drop_route(it);
    it = following;
  }
  lose_actors(c, why, std::move(resend), out);
  tell_drivers(out);
}

void head::lose_actors(const connection& c, const std::string& why, std::vector<std::uint64_t> resend,
                       std::vector<outgoing>& out) {
  for (auto& [key, a] : actors_) {
    if (a.node != c.node_id || !a.gone.empty()) continue;
    auto driver = a.driver.lock();
    std::string elsewhere;
    std::shared_ptr<connection> next;
    const bool can_restart = driver && !driver->done && a.restarts_left > 0 && !a.ctor.frames.empty();
    if (can_restart) next = place(a.ctor, elsewhere);
    const std::string lost_with = "was lost with " + c.node_id + " (" + why + ")";
    if (next) {
      restart_on(key, a, next, lost_with, out);
      continue;
    }
    if (can_restart && cfg_.node_wait.count() > 0) {
      // No alive node has what it asks: it waits for one to join (the lost
      // node started again, or another), as Ray's restarting actors do.
      a.restarting = true;
      a.restart_by = std::chrono::steady_clock::now() + cfg_.node_wait;
      a.lost_with = lost_with;
      a.node.clear();
      a.node_connection.reset();
      restarting_.insert(key);
      std::fprintf(stderr, "manta head: actor %s (%s) %s; it waits up to %lld ms for a node that has what it asks\n",
                   a.ctor.name.c_str(), key.c_str(), lost_with.c_str(),
                   static_cast<long long>(cfg_.node_wait.count()));
      continue;
    }
    actor_gone(key, a,
               "was lost with " + c.node_id + " (" + why + ")" +
                   (a.restarts_left <= 0      ? ", past its max_restarts"
                    : a.ctor.frames.empty()   ? ", and its constructor's arguments were more than the head keeps"
                    : !driver || driver->done ? ""
                                              : ", and " + elsewhere),
               out);
    if (a.ctor.driver_id != 0 && driver && !driver->done)  // its constructor was never answered
      out.push_back({driver, frame_type::task_result,
                     std::make_shared<const std::string>(encode_outcome(failed(
                         std::exchange(a.ctor.driver_id, 0), kind_node_died, "manta::node_died_error",
                         "manta: actor '" + a.ctor.name + "' " + a.gone, a.ctor.name, c.node_id)))});
  }
  // Calls that were running go behind their actor's new start, in the order
  // they were sent (routed_ is in the head's order); the others fail.
  for (std::uint64_t id : resend) {
    auto it = routed_.find(id);
    if (it == routed_.end()) continue;
    routed_task& r = it->second;
    auto driver = r.driver.lock();
    auto a = actors_.find(r.actor);
    if (driver && !driver->done && a != actors_.end() && a->second.restarting) {
      // Held until its actor starts again, behind its constructor.
      --r.retries_left;
      r.node.clear();
      r.node_connection.reset();
      a->second.held_calls.emplace_back(id, false);
      continue;
    }
    std::shared_ptr<connection> node;
    if (a != actors_.end() && a->second.gone.empty() && a->second.node != c.node_id)
      node = a->second.node_connection.lock();
    if (driver && !driver->done && node && !node->done) {
      --r.retries_left;
      forward(r, node, out);
      continue;
    }
    if (driver && !driver->done)
      out.push_back({driver, frame_type::task_result,
                     std::make_shared<const std::string>(encode_outcome(failed(
                         r.driver_id, kind_actor_died, "manta::actor_died_error",
                         "manta: actor call '" + r.name + "' was lost with " + c.node_id + " (" + why + ")" +
                             (a == actors_.end() || !a->second.gone.empty() ? ", and its actor did not start again"
                                                                            : ""),
                         r.name, c.node_id)))});
    drop_route(it);
  }
}

void head::restart_on(const std::string& key, placed_actor& a, const std::shared_ptr<connection>& node,
                      const std::string& lost_with, std::vector<outgoing>& out) {
  // Its constructor runs again there, from the frame the head kept (and
  // numbered as before); its driver hears only if it never heard of the first.
  const bool first = std::exchange(a.first_start, false);
  if (!first) --a.restarts_left;
  routed_task r = a.ctor;
  r.kept = 0;  // (the actor counts the frame)
  routed_task& sent = routed_.insert_or_assign(a.ctor_id, std::move(r)).first->second;
  forward(sent, node, out);
  sent.frames.clear();
  sent.keep = false;
  // (a.ctor.driver_id stays until the start is answered: if this node is
  // lost too before it answers, the next start, or the failure, answers.)
  a.node = node->node_id;
  host(a);
  a.node_connection = node;
  a.restarting = false;
  std::fprintf(stderr, "manta head: actor %s (%s) %s; started %son %s\n", a.ctor.name.c_str(), key.c_str(),
               lost_with.c_str(), first ? "" : "again ", a.node.c_str());
  // The calls held while it waited follow its constructor, in order.
  for (auto [id, fresh] : std::exchange(a.held_calls, {})) {
    auto it = routed_.find(id);
    if (it == routed_.end()) continue;  // its driver left, or cancelled it
    forward(it->second, node, out);
    if (fresh) actor_forwarded(id, it->second, it->second.frames.empty() ? nullptr : it->second.frames.front().second);
  }
}

void head::place_restarting(std::vector<outgoing>& out) {
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(waiting_tasks_, [&](std::uint64_t id) {
    auto it = routed_.find(id);
    if (it == routed_.end()) return true;  // its driver left, or cancelled it
    routed_task& r = it->second;
    auto driver = r.driver.lock();
    std::string why;
    // (Parts of it that came meanwhile may have passed what the head keeps: then it cannot go.)
    if (auto node = driver && !driver->done && r.keep ? place(r, why) : nullptr) {
      forward(r, node, out);
      return true;
    }
    if (driver && !driver->done && r.keep && now < r.wait_by) return false;
    if (driver && !driver->done)
      out.push_back({driver, frame_type::task_result,
                     std::make_shared<const std::string>(encode_outcome(failed(
                         r.driver_id, kind_node_died, "manta::node_died_error",
                         "manta: task '" + r.name + "' " + r.lost_with +
                             (r.keep ? ", and no node that can run it joined within " +
                                           std::to_string(cfg_.node_wait.count()) + " ms"
                                     : ", and its arguments were more than the head keeps to send again"),
                         r.name)))});
    drop_route(it);
    return true;
  });
  for (auto k = restarting_.begin(); k != restarting_.end();) {
    auto it = actors_.find(*k);
    if (it == actors_.end() || !it->second.restarting) {  // ended or killed meanwhile
      k = restarting_.erase(k);
      continue;
    }
    placed_actor& a = it->second;
    auto driver = a.driver.lock();
    const bool driven = driver && !driver->done;
    std::string why;
    if (auto node = driven ? place(a.ctor, why) : nullptr) {
      restart_on(*k, a, node, a.lost_with, out);
      k = restarting_.erase(k);
      continue;
    }
    if (driven && now < a.restart_by) {
      ++k;
      continue;
    }
    actor_gone(*k, a,
               a.lost_with + ", and no node that has what it asks joined within " +
                   std::to_string(cfg_.node_wait.count()) + " ms",
               out);
    fail_held(a, a.gone, out);
    k = restarting_.erase(k);
  }
}

bool head::hold_constructor(const remote_task& t, const routed_task& r, std::string&& body,
                            std::vector<outgoing>& out) {
  auto it = actors_.find(t.actor);
  if (it == actors_.end() || !it->second.restarting || !it->second.first_start) return false;
  placed_actor& a = it->second;
  const std::uint64_t id = ++next_task_;
  set_id(body, id);
  a.ctor_id = id;
  a.ctor.driver_id = r.driver_id;
  if (kept_bytes_ + body.size() > max_kept) {
    actor_gone(t.actor, a, a.lost_with + ", and the head keeps no more to start it later", out);
    fail_held(a, a.gone, out);  // (its driver hears)
    restarting_.erase(t.actor);
    return true;
  }
  a.ctor.kept = body.size();
  kept_bytes_ += a.ctor.kept;
  a.ctor.frames = {{frame_type::run_task, std::make_shared<const std::string>(std::move(body))}};
  return true;
}

bool head::hold_task(routed_task&& r, std::string&& body) {
  const std::uint64_t id = ++next_task_;
  set_id(body, id);
  routed_task& kept = routed_.emplace(id, std::move(r)).first->second;
  keep_frame(kept, frame_type::run_task, std::make_shared<const std::string>(std::move(body)));
  if (!kept.keep) {
    drop_route(routed_.find(id));
    return false;
  }
  kept.wait_by = std::chrono::steady_clock::now() + cfg_.node_wait;
  kept.lost_with = unplaced_yet;
  waiting_tasks_.push_back(id);
  return true;
}

bool head::hold_call(routed_task&& r, std::string&& body) {
  auto a = actors_.find(r.actor);
  if (a == actors_.end() || !a->second.restarting) return false;
  const std::uint64_t id = ++next_task_;
  set_id(body, id);
  routed_task& kept = routed_.emplace(id, std::move(r)).first->second;
  keep_frame(kept, frame_type::run_task, std::make_shared<const std::string>(std::move(body)));
  if (!kept.keep) {  // past what the head keeps
    drop_route(routed_.find(id));
    return false;
  }
  a->second.held_calls.emplace_back(id, true);
  return true;
}

void head::fail_held(placed_actor& a, const std::string& why, std::vector<outgoing>& out) {
  // A constructor lost with its node before it answered waits for the restart:
  // with none coming, it is answered here.
  if (auto driver = a.driver.lock(); a.restarting && a.ctor.driver_id != 0 && driver && !driver->done)
    out.push_back({driver, frame_type::task_result,
                   std::make_shared<const std::string>(
                       encode_outcome(failed(std::exchange(a.ctor.driver_id, 0), kind_node_died,
                                             "manta::node_died_error", "manta: actor '" + a.ctor.name + "' " + why,
                                             a.ctor.name)))});
  a.restarting = false;
  for (auto [id, fresh] : std::exchange(a.held_calls, {})) {
    auto it = routed_.find(id);
    if (it == routed_.end()) continue;
    if (auto driver = it->second.driver.lock(); driver && !driver->done)
      out.push_back({driver, frame_type::task_result,
                     std::make_shared<const std::string>(encode_outcome(
                         failed(it->second.driver_id, kind_actor_died, "manta::actor_died_error",
                                "manta: actor call '" + it->second.name + "' did not run: its actor " + why,
                                it->second.name)))});
    drop_route(it);
  }
}

std::shared_ptr<head::connection> head::actor_target(const std::shared_ptr<connection>& driver, const remote_task& t,
                                                     routed_task& r, std::string& why) {
  r.actor = t.actor;
  r.method = t.mode != mode_construct;
  r.retries_left = 0;  // its actor starts again instead (lose_actors)
  auto it = actors_.find(t.actor);
  if (!r.method) {  // (any driver may call an actor it found by name; only its own driver starts it)
    if (t.actor.rfind(driver->node_id + "/", 0) != 0) {
      why = "its actor key '" + t.actor + "' is not one of " + driver->node_id + "'s";
      return nullptr;
    }
    if (it != actors_.end()) {
      why = "an actor '" + t.actor + "' was started already";
      return nullptr;
    }
    // Refused, it stays in the table as gone: the calls sent behind it learn why.
    auto refused = [&] {
      placed_actor& a = actors_[t.actor];
      a.driver = driver;
      a.gone = "could not start: " + why;
      return nullptr;
    };
    if (auto named = actor_names_.find(t.actor_name); !t.actor_name.empty() && named != actor_names_.end()) {
      why = "the name '" + t.actor_name + "' is taken in the cluster (by " + named->second + ")";
      return refused();
    }
    std::shared_ptr<connection> node = place(r, why);
    // No alive node has what it asks, but one that had it was lost: it waits
    // for one to join (route_task keeps its constructor), as after a loss.
    const bool waits = !node && why == lost_everywhere && cfg_.node_wait.count() > 0;
    if (!node && !waits) return refused();
    if (!t.actor_name.empty()) actor_names_[t.actor_name] = t.actor;
    placed_actor& a = actors_[t.actor];
    a.name = t.actor_name;
    a.class_tag = t.class_tag;
    a.driver = driver;
    a.ctor = r;
    a.restarts_left = t.max_restarts < 0 ? std::numeric_limits<int>::max() : t.max_restarts;
    a.task_retries = t.max_task_retries;
    a.origin = t.origin.empty() ? driver->node_id : t.origin;
    if (waits) {
      a.restarting = a.first_start = true;
      a.restart_by = std::chrono::steady_clock::now() + cfg_.node_wait;
      a.lost_with = unplaced_yet;
      restarting_.insert(t.actor);
      why.clear();
      return nullptr;
    }
    a.node = node->node_id;
    a.node_connection = node;
    host(a);
    return node;
  }
  if (it == actors_.end()) {
    why = "its actor is not in the cluster (it was ended)";
    return nullptr;
  }
  // (Any driver may call it: found by name, or its handle came inside a task's
  // arguments; only its own driver ends it, and others kill only named ones.)
  if (!it->second.gone.empty()) {
    why = "its actor " + it->second.gone;
    return nullptr;
  }
  if (it->second.restarting) {  // (route_task holds it, unless the head keeps no more)
    why = "its actor " + it->second.lost_with + " and waits for a node to start again on";
    return nullptr;
  }
  auto node = it->second.node_connection.lock();
  if (!node || node->done) {
    why = "its actor's node " + it->second.node + " is gone";
    return nullptr;
  }
  return node;
}

head::shared_body head::actor_refused(const remote_task& t, const std::string& why) {
  if (t.mode == mode_construct) return unplaced(t, why);
  return std::make_shared<const std::string>(encode_outcome(
      failed(t.id, kind_actor_died, "manta::actor_died_error", "manta: actor call '" + t.name + "' cannot run: " + why,
             t.name)));
}

void head::actor_forwarded(std::uint64_t id, routed_task& r, const shared_body& body) {
  if (!r.method) {
    auto it = actors_.find(r.actor);
    if (it != actors_.end()) {
      placed_actor& a = it->second;
      a.ctor_id = id;
      a.ctor.driver_id = r.driver_id;
      if (body && kept_bytes_ + body->size() <= max_kept) {  // kept to start it again elsewhere
        a.ctor.frames = {{frame_type::run_task, body}};
        a.ctor.kept = body->size();
        kept_bytes_ += a.ctor.kept;
      }
    }
  }
  if (r.method && (body || r.keep)) {
    // A call of an actor with max_task_retries keeps its frame (or the parts
    // of a long one, while the head keeps them) until answered, to run again after a restart.
    auto it = actors_.find(r.actor);
    if (it != actors_.end() && it->second.task_retries != 0 && it->second.restarts_left > 0 &&
        !it->second.ctor.frames.empty()) {  // (it can start again)
      r.retries_left = it->second.task_retries < 0 ? std::numeric_limits<int>::max() : it->second.task_retries;
      return;
    }
  }
  forget_frames(r);  // never sent again as itself: its actor starts again instead
}

void head::keep_constructor_part(const std::string& key, const shared_body& part) {
  auto it = actors_.find(key);
  if (it == actors_.end() || !it->second.ctor.keep) return;
  routed_task& ctor = it->second.ctor;
  if (kept_bytes_ + part->size() <= max_kept) {
    ctor.frames.emplace_back(frame_type::part, part);
    ctor.kept += part->size();
    kept_bytes_ += part->size();
    return;
  }
  forget_frames(ctor);  // past what the head keeps: it is not started again elsewhere
}

void head::forget_frames(routed_task& r) {
  kept_bytes_ -= r.kept;
  r.kept = 0;
  r.frames.clear();
  r.keep = false;
}

void head::end_actor(const connection& driver, std::string_view body, std::vector<outgoing>& out) {
  const actor_end e = decode_actor_end(body);  // malformed: the driver's connection ends
  auto it = actors_.find(e.actor);
  // Its own driver ends it; any driver holding a handle (found by name, or given) may kill it, and
  // then its own driver hears (its handles fail from then on).
  if (it == actors_.end()) return;
  auto owner = it->second.driver.lock();
  const bool own = owner.get() == &driver;
  if (!own && !e.kill) return;  // (only its own driver ends it; any holder of a handle may kill it)
  // (An actor on a driver's node: its driver hears below, or ended it; one
  // handed over to another driver is killed by its host.)
  if (auto node = it->second.node_connection.lock();
      node && !node->done && it->second.gone.empty() &&
      (!it->second.on_driver || (e.kill && node.get() != &driver && node != owner)))
    out.push_back({node, frame_type::actor_end, std::make_shared<const std::string>(body)});
  if (!own && owner && !owner->done)
    out.push_back({owner, frame_type::actor_end, std::make_shared<const std::string>(body)});
  fail_held(it->second, e.kill ? "was killed" : "was ended", out);
  const std::string key = it->first;
  forget_actor(it, out);
  answer_lookups(key, out);  // (as ended)
}

std::shared_ptr<head::connection> head::connection_of(const std::string& id, bool driver) const {
  // (A connection that has not joined, a tool's or one in its handshake, has
  // no id: a frame naming none must not reach it.)
  if (id.empty()) return nullptr;
  for (const auto& c : connections_)
    if (c->node_id == id && c->driver == driver && !c->done) return c;
  return nullptr;
}

std::shared_ptr<head::connection> head::member_of(const std::string& id) const {
  auto c = connection_of(id, false);
  return c ? c : connection_of(id, true);
}

std::shared_ptr<head::connection> head::node_target(const std::shared_ptr<connection>& driver, const remote_task& t,
                                                    routed_task& r, std::string& why) {
  r.retries_left = 0;  // it is for that node only
  if (t.mode == mode_object && t.object.rfind(driver->node_id + "/", 0) != 0) {
    why = "its object '" + t.object + "' is not one of " + driver->node_id + "'s";
    return nullptr;
  }
  // (An object goes to a driver too, one that fetched it for a call of an
  // actor of its node: only then, so that no member fills another's arena.)
  auto node = connection_of(t.node, false);
  if (!node && t.mode == mode_object && fetching_.count({t.object, t.node})) node = connection_of(t.node, true);
  if (!node) {
    why = "its node " + t.node + " is not in the cluster";
    return nullptr;
  }
  if (t.mode == mode_object) {
    directory_[t.object].insert(t.node);
    fetching_.erase({t.object, t.node});
  }
  return node;
}

void head::route_object_note(const connection& from, frame_type type, std::string_view body,
                             std::vector<outgoing>& out) {
  object_note note = decode_object_note(body);  // malformed: the connection ends
  const std::string owner = note.object.substr(0, note.object.find('/'));
  if (type == frame_type::fetch_object) {
    note.node = from.node_id;  // (the asker is who the head says it is)
    if (auto driver = connection_of(owner, true)) {
      out.push_back({driver, type, std::make_shared<const std::string>(encode_object_note(note))});
      fetching_.insert({note.object, note.node});
    } else {
      note.why = "its driver " + owner + " left the cluster";
      out.push_back({member_of(from.node_id), frame_type::object_lost,
                     std::make_shared<const std::string>(encode_object_note(note))});
      if (!out.back().to) out.pop_back();
    }
    return;
  }
  if (owner != from.node_id) return;  // only its own driver speaks for an object
  if (type == frame_type::object_lost) {
    fetching_.erase({note.object, note.node});
    if (auto node = member_of(note.node)) out.push_back({node, type, std::make_shared<const std::string>(body)});
    return;
  }
  auto it = directory_.find(note.object);  // object_freed
  if (it == directory_.end()) return;
  auto freed = std::make_shared<const std::string>(body);
  for (const auto& node : it->second)
    if (auto n = member_of(node)) out.push_back({n, type, freed});
  directory_.erase(it);
}

void head::host_actor(const std::shared_ptr<connection>& driver, std::string_view body, std::vector<outgoing>& out) {
  const actor_lookup l = decode_actor_lookup(body);  // malformed: the driver's connection ends
  const std::string_view number = std::string_view(l.key).substr(std::min(l.key.size(), driver->node_id.size() + 2));
  if (l.key.rfind(driver->node_id + "/d", 0) != 0 || number.empty() ||
      number.find_first_not_of("0123456789") != std::string_view::npos)
    throw wire_error("manta bridge: " + driver->node_id + " offered an actor key that is not one of its own: " + l.key);
  if (actors_.count(l.key)) return;  // (offered before)
  // A named one waits for the answer (request set): its constructor runs only if the name is its own.
  auto answer = [&](std::string why) {
    actor_lookup reply = l;
    reply.why = std::move(why);
    if (l.request != 0)
      out.push_back({driver, frame_type::actor_found, std::make_shared<const std::string>(encode_actor_lookup(reply))});
    else if (!reply.why.empty())
      out.push_back({driver, frame_type::actor_end,
                     std::make_shared<const std::string>(encode_actor_end({l.key, true, reply.why}))});
  };
  if (auto named = actor_names_.find(l.name); !l.name.empty() && named != actor_names_.end()) {
    answer("the name '" + l.name + "' is taken in the cluster (by " + named->second + ")");
    return;
  }
  answer({});
  if (!l.name.empty()) actor_names_[l.name] = l.key;
  placed_actor& a = actors_[l.key];
  a.name = l.name;
  a.driver = driver;
  a.node = driver->node_id;
  a.node_connection = driver;
  a.on_driver = true;
  a.class_tag = l.class_tag;
  a.origin = driver->node_id;
  a.ctor.name = l.name.empty() ? l.key : l.name;  // (what messages call it)
}

void head::find_named(const std::shared_ptr<connection>& driver, std::string_view body, std::vector<outgoing>& out) {
  actor_lookup l = decode_actor_lookup(body);  // malformed: the driver's connection ends
  auto named = actor_names_.find(l.name);
  auto a = named == actor_names_.end() ? actors_.end() : actors_.find(named->second);
  if (a != actors_.end() && !a->second.complete && a->second.gone.empty()) {
    waiting_lookups_[a->first].emplace_back(driver, std::move(l));  // answered once its constructor went whole
    return;
  }
  if (a == actors_.end()) {
    l.why = "no actor of the cluster is named '" + l.name + "'";
  } else if (!a->second.gone.empty()) {
    l.why = "the actor named '" + l.name + "' " + a->second.gone;
  } else {
    l.key = a->first;
    l.class_tag = a->second.class_tag;
  }
  out.push_back({driver, frame_type::actor_found, std::make_shared<const std::string>(encode_actor_lookup(l))});
}

void head::answer_lookups(const std::string& key, std::vector<outgoing>& out) {
  auto waiting = waiting_lookups_.find(key);
  if (waiting == waiting_lookups_.end()) return;
  auto a = actors_.find(key);
  for (auto& [to, l] : waiting->second) {
    auto driver = to.lock();
    if (!driver || driver->done) continue;
    if (a == actors_.end() || !a->second.gone.empty()) {
      l.why = "the actor named '" + l.name + "' " + (a == actors_.end() ? std::string("was ended") : a->second.gone);
    } else {
      l.key = key;
      l.class_tag = a->second.class_tag;
    }
    out.push_back({driver, frame_type::actor_found, std::make_shared<const std::string>(encode_actor_lookup(l))});
  }
  waiting_lookups_.erase(waiting);
}

void head::take_over_handles(const task_outcome& o, const std::shared_ptr<connection>& driver,
                             std::vector<outgoing>& out) {
  if (o.lender.empty()) return;
  auto lender = connection_of(o.lender, true);  // (gone: its counts went with it)
  for (const returned_handle& h : o.handles) {
    if (!h.owned || !lender) continue;  // (borrowed: nothing changes hands)
    auto it = actors_.find(h.key);
    const bool hosted_new = it == actors_.end() && h.hosted && h.key.rfind(o.lender + "/", 0) == 0;
    const bool owned_by_lender = it != actors_.end() && it->second.driver.lock() == lender;
    if (!driver || driver->done || lender == driver || (!hosted_new && !owned_by_lender)) {
      // Nobody receives it, it came back to the member that lent it, or that
      // member did not own it (or it ended): nothing changes hands.
      out.push_back({lender, frame_type::actor_returned, std::make_shared<const std::string>(h.key)});
      continue;
    }
    if (hosted_new) {
      placed_actor& a = actors_[h.key];  // as host_actor would, owned by the receiver
      a.node = lender->node_id;
      a.node_connection = lender;
      a.on_driver = true;
      a.class_tag = h.class_tag;
      a.origin = driver->node_id;
      a.ctor.name = h.label;
      it = actors_.find(h.key);
    }
    it->second.driver = driver;
    it->second.lenders.push_back(lender);
  }
}

void head::actor_gone(const std::string& key, placed_actor& a, std::string why, std::vector<outgoing>& out) {
  unhost(a);
  a.gone = std::move(why);
  if (auto named = actor_names_.find(a.name); named != actor_names_.end() && named->second == key)
    actor_names_.erase(named);  // (the name is free again, as for an actor that died on one machine)
  answer_lookups(key, out);
}

void head::cancel_routed(const connection& driver, std::string_view body, std::vector<outgoing>& out) {
  std::uint64_t driver_id = 0;
  if (body.size() != sizeof driver_id) throw wire_error("manta bridge: a malformed cancel_task");
  std::memcpy(&driver_id, body.data(), sizeof driver_id);
  for (auto& [id, r] : routed_) {
    if (r.driver_id != driver_id || r.driver.lock().get() != &driver) continue;
    r.retries_left = 0;  // nobody waits for it: not run again if its node is lost
    if (r.node.empty()) {  // held for its restarting actor: it never goes
      drop_route(routed_.find(id));
      return;
    }
    if (auto node = r.node_connection.lock(); node && !node->done) {
      auto cancel = std::make_shared<std::string>(sizeof id, '\0');
      std::memcpy(cancel->data(), &id, sizeof id);
      out.push_back({node, frame_type::cancel_task, std::move(cancel)});
    }
    return;
  }
}

void head::host(const placed_actor& a) {
  ++hosted_[a.node];
  auto& held = held_[a.node];
  held["CPU"] += a.ctor.num_cpus;
  held["GPU"] += a.ctor.num_gpus;
  held["memory"] += static_cast<double>(a.ctor.memory);
  for (const auto& [name, amount] : a.ctor.resources) held[name] += amount;
}

void head::unhost(placed_actor& a) {
  if (!a.gone.empty() || a.on_driver) return;
  if (auto it = hosted_.find(a.node); it != hosted_.end()) --it->second;
  if (auto it = held_.find(a.node); it != held_.end()) {
    it->second["CPU"] -= a.ctor.num_cpus;
    it->second["GPU"] -= a.ctor.num_gpus;
    it->second["memory"] -= static_cast<double>(a.ctor.memory);
    for (const auto& [name, amount] : a.ctor.resources) it->second[name] -= amount;
  }
}

std::map<std::string, head::placed_actor>::iterator head::forget_actor(std::map<std::string, placed_actor>::iterator it,
                                                                   std::vector<outgoing>& out) {
  for (const auto& lent : it->second.lenders)
    if (auto lender = lent.lock(); lender && !lender->done)
      out.push_back({lender, frame_type::actor_returned, std::make_shared<const std::string>(it->first)});
  unhost(it->second);
  if (auto named = actor_names_.find(it->second.name); named != actor_names_.end() && named->second == it->first)
    actor_names_.erase(named);
  kept_bytes_ -= it->second.ctor.kept;
  return actors_.erase(it);
}

void head::tell_drivers(std::vector<outgoing>& out) {
  shared_body table;
  for (auto& c : connections_) {
    if (!c->driver || c->done) continue;
    if (!table) table = std::make_shared<const std::string>(nodes_json_locked());
    out.push_back({c, frame_type::cluster_update, table});
  }
}

std::vector<node_state> head::nodes() const {
  std::lock_guard lock(mu_);
  return nodes_;
}

std::string head::nodes_json() const {
  std::lock_guard lock(mu_);
  return nodes_json_locked();
}

std::string head::nodes_json_locked() const {
  json rows = json::array();
  for (const auto& n : nodes_) {
    auto running = running_.find(n.id);
    json r = {{"id", n.id},
              {"address", n.address},
              {"host", n.info.host},
              {"pid", n.info.pid},
              {"resources", n.info.resources},
              {"alive", n.alive},
              {"tasks_running", running == running_.end() ? 0 : running->second},
              {"actors", hosted_.count(n.id) ? hosted_.at(n.id) : 0},
              {"objects", std::count_if(directory_.begin(), directory_.end(),
                                        [&](const auto& o) { return o.second.count(n.id) != 0; })}};
    if (!n.alive) r["lost_why"] = n.lost_why;
    rows.push_back(std::move(r));
  }
  // Frames to one driver may leave from different threads: the version orders them.
  return json{{"nodes", std::move(rows)}, {"version", ++table_version_}}.dump(-1, ' ', false,
                                                                               json::error_handler_t::replace);
}

void head::stop_cluster() {
  std::vector<std::shared_ptr<connection>> nodes;
  {
    std::lock_guard lock(mu_);
    for (auto& c : connections_)
      if (!c->done && !c->node_id.empty()) nodes.push_back(c);
  }
  // Drivers first: told the cluster stopped before their nodes leave, their
  // tasks fail saying so, not "lost with <node>".
  std::stable_partition(nodes.begin(), nodes.end(), [](const auto& c) { return c->driver; });
  for (auto& c : nodes) {
    try {
      c->send(frame_type::stop, "the cluster was stopped");
    } catch (const std::exception&) {  // already gone
    }
  }
}

// ---- a node's link

node_link::node_link(const std::string& address, const std::string& token, node_info info,
                     std::function<void(const std::string&)> on_end, std::function<void(std::vector<frame>&&)> on_frames,
                     frame_lander lander)
    : parts_(2 * max_long_body, std::move(lander)), on_end_(std::move(on_end)), on_frames_(std::move(on_frames)) {
  auto [host, port] = split_address(address);
  try {
    fd_ = connect_to(host, port, std::chrono::seconds(5));
  } catch (const io_error& e) {
    throw join_error(e.what());
  }
  try {
    if (auto tls = member_tls_from_env()) start_tls(fd_, *tls, false, host, io_clock::now() + handshake_timeout);
    authenticate_to_head(fd_, token, in_);
    std::sort(info.functions.begin(), info.functions.end());
    json j = {{"host", info.host},           {"pid", info.pid},   {"resources", info.resources},
              {"functions", info.functions}, {"role", info.role}, {"id", info.id}};
    auto until = io_clock::now() + std::chrono::seconds(5);
    send_all(fd_, encode(frame_type::join, j.dump()), until);
    frame f;
    if (receive(fd_, in_, until, f) != receive_status::frame) throw join_error("manta: the head did not answer the join");
    if (f.type == frame_type::refused)  // (a driver is told it is the driver: it joins under the role "driver")
      throw join_error("manta: the head refused this " + std::string(info.role == "driver" ? "driver" : "node") + ": " +
                       f.body);
    if (f.type == frame_type::stop) throw join_error("manta: the cluster is stopping: " + f.body);
    if (f.type != frame_type::joined) throw join_error("manta: the head answered the join with something else");
    id_ = f.body;
  } catch (const join_error&) {
    close_socket(fd_);
    throw;
  } catch (const std::exception& e) {
    close_socket(fd_);
    throw join_error(e.what());
  }
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    close_socket(fd_);
    throw join_error(std::string("manta: eventfd: ") + std::strerror(errno));
  }
  thread_ = std::thread([this] {
    observe::name_runtime_thread("manta-link");
    run();
  });
}

node_link::~node_link() {
  wake(wake_fd_);
  // Destroyed from its own on_end: run() touches nothing after the callback.
  if (thread_.get_id() == std::this_thread::get_id()) thread_.detach();
  else thread_.join();
  close_socket(fd_);
  ::close(wake_fd_);
}

void node_link::send(frame_type type, std::span<const std::string_view> pieces) {
  total_size(pieces);  // (a body over the limit throws here, unsent)
  const std::uint64_t stream = ++next_stream_;
  bool started = false;
  try {
    for_each_frame(type, pieces, stream, [&](const std::string& header, std::string_view bytes) {
      if (closing_.load(std::memory_order_acquire)) throw io_error("manta bridge: the link is closing");
      std::lock_guard lock(send_mu_);  // released between parts: heartbeats and other frames go between
      send_locked(header, bytes);
      started = true;
    });
  } catch (const wire_error&) {
    // A part over the frame limit (a header piece too long): the head drops what began.
    if (started) {
      std::lock_guard lock(send_mu_);
      send_locked(part_frame_header({stream, false, false, true}, 0), {});
    }
    throw;
  }
}

void node_link::send_encoded(std::string_view frames) {
  if (closing_.load(std::memory_order_acquire)) throw io_error("manta bridge: the link is closing");
  std::lock_guard lock(send_mu_);
  send_locked(frames, {});
}

void node_link::send_locked(std::string_view header, std::string_view body) {
  sending_.store(true, std::memory_order_release);
  try {
    send_all(fd_, header, body, io_clock::now() + send_limit_for(body.size()));
  } catch (const io_error&) {
    // Part of a frame may have left: the link cannot go on. Its reader sees it
    // closed and ends it (on_end), so nothing waits on a frame that never arrives.
    sending_.store(false, std::memory_order_release);
    ::shutdown(fd_, SHUT_RDWR);
    throw;
  }
  sending_.store(false, std::memory_order_release);
}

void node_link::run() {
  std::string why;
  std::vector<frame> batch;  // frames for on_frames_ that came together
  try {
    frame_decoder& in = in_;  // (what came with `joined` is in it already)
    auto last_heard = io_clock::now();
    auto next_beat = io_clock::now();
    std::size_t seen = in.pending();
    for (;;) {
      if (io_clock::now() >= next_beat) {
        // Never behind another thread's long frame: that frame says this member
        // lives (the head counts its bytes), and this thread must keep reading.
        std::unique_lock lock(send_mu_, std::try_to_lock);
        if (lock) send_locked(frame_header(frame_type::heartbeat, 0), {});
        next_beat = io_clock::now() + heartbeat_every;
      }
      frame_view v;  // parts go from the read buffer into their long frame: one copy
      receive_status st = receive_view(fd_, in, next_beat, v, wake_fd_);
      if (st == receive_status::woken) return;  // the link is being destroyed: no callback
      if (st == receive_status::closed) {
        why = "the head was lost (its connection closed)";
        break;
      }
      if (st != receive_status::frame && in.pending() != seen) last_heard = io_clock::now();  // a long frame arrives
      // While a frame of ours streams out, the head's answers wait behind it: silence is no sign of loss.
      if (sending_.load(std::memory_order_acquire)) last_heard = io_clock::now();
      seen = in.pending();
      if (st == receive_status::frame) {
        last_heard = io_clock::now();
        if (v.type == frame_type::stop) {
          why = v.body.empty() ? "the cluster was stopped" : std::string(v.body);
          if (on_frames_ && !batch.empty()) on_frames_(std::exchange(batch, {}));  // (what came before the stop)
          break;
        }
        if (v.type == frame_type::part) {
          if (std::optional<frame> whole = parts_.take(v.body))  // malformed: throws, and the link ends
            batch.push_back(std::move(*whole));
        } else if (v.type != frame_type::heartbeat) {
          batch.push_back(frame{v.type, std::string(v.body)});
        }
        // Frames that came together are handed on together, once no whole one is left.
        if (!batch.empty() && !in.has_frame() && on_frames_) on_frames_(std::exchange(batch, {}));
      } else if (io_clock::now() - last_heard > silence_limit_) {
        why = "the head was lost (no heartbeat for " + std::to_string(silence_limit_.count()) + " ms)";
        break;
      }
    }
  } catch (const std::exception& e) {
    why = std::string("the head was lost: ") + e.what();
  }
  // What arrived of long frames never finishes now: its room (arena extents, for a landing) goes at once.
  parts_.clear();
  // Whole frames that came before a malformed one still count (outcomes of finished tasks).
  if (!batch.empty() && on_frames_) {
    try {
      on_frames_(std::exchange(batch, {}));
    } catch (const std::exception&) {  // (the link ends anyway)
    }
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
    if (auto tls = member_tls_from_env()) start_tls(fd, *tls, false, host, io_clock::now() + handshake_timeout);
    authenticate_to_head(fd, token);
    auto until = io_clock::now() + std::chrono::seconds(10);
    send_all(fd, encode(request == "stop" ? frame_type::stop_request : frame_type::status_request, ""), until);
    frame_decoder in;
    frame f;
    const receive_status st = receive(fd, in, until, f);
    if (st != receive_status::frame)
      throw join_error("manta: the head at " + address + " did not answer (" +
                       (st == receive_status::closed ? "it closed the connection" : "not within 10 s") + ")");
    if (f.type != frame_type::status_reply)
      throw join_error("manta: the head at " + address + " answered with a frame of type " +
                       std::to_string(static_cast<int>(f.type)) + (f.type == frame_type::refused ? ": " + f.body : ""));
    close_socket(fd);
    return f.body;
  } catch (const join_error&) {
    close_socket(fd);
    throw;
  } catch (const std::exception& e) {
    close_socket(fd);
    throw join_error(e.what());
  }
}

}  // namespace manta::bridge

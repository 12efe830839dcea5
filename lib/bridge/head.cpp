// bridge/head.cpp: the head on the network: the accepting thread, a reading
// and a writing thread per connection, the silence watcher. What members send
// goes to the head's state (head_state.cpp), under mu_.
#include "bridge/head.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <utility>
#include <deque>
#include <stdexcept>
#include <system_error>

#include "bridge/auth.hpp"
#include "bridge/socket_io.hpp"
#include "bridge/wire.hpp"
#include "observe/thread_name.hpp"

namespace manta::bridge {

namespace {

/// How long a frame may take to leave: 5 s, and a second more per 8 MiB (a
/// peer that reads slower than that is dropped rather than holding a thread).
io_clock::duration send_limit_for(std::size_t bytes) {
  return std::chrono::seconds(5) + std::chrono::seconds(bytes >> 23);
}
/// Bytes at most waiting to go to one peer (not counting tasks' frames the head keeps anyway).
constexpr std::size_t max_queued = 512u << 20;
/// How often a reader looks whether bytes arrived (a long frame on its way
/// counts as a sign of life, not only whole frames).
constexpr auto progress_every = std::chrono::milliseconds(250);
/// Connections at most that have not proved the token yet, overall and from
/// one address: past either, the oldest such one is dropped for the new one.
constexpr std::size_t max_handshakes = 32, max_handshakes_per_address = 8;

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
  std::string text = "[";  // (built in steps: GCC 12 warns falsely of "[" + std::string)
  text += host;
  text += "]:";
  text += std::to_string(ntohs(v6->sin6_port));
  return text;
}

void wake(int fd) {
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(fd, &one, sizeof one);
}

}  // namespace
struct head::connection : head_state::member {
  /// Read by its server and writer threads; closed by the server thread (under
  /// fd_mu, set to -1) only once its writer has ended; shut down by any thread.
  int fd = -1;
  std::mutex fd_mu;
  std::thread thread;
  std::atomic<bool> finished{false};  ///< its thread has ended: join it
  /// Its handshake: under way, done (the peer proved the token), or dropped
  /// for a newer connection; the serve thread and the acceptor race for it.
  enum : int { handshaking, proved, dropped };
  std::atomic<int> stage{handshaking};
  std::string address;  ///< the peer's address (HOST:PORT)
  std::string host;     ///< the peer's address without its port
  /// A peer reading slowly is waited for while it reads or speaks; one that
  /// does neither for this long is dropped (the head's silence limit).
  std::chrono::milliseconds stall{};
  heard_time heard{io_clock::now()};  ///< when its server thread last read from it
  io_clock::time_point accepted = io_clock::now();

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
  std::size_t queued = 0;         // bytes in outq, under out_mu
  std::size_t unkept = 0;         // of them, bytes of frames the head does not keep anyway (under out_mu)
  bool writing = false;           // the writer holds a frame it took (under out_mu)
  bool out_closed = false;        // nothing more is queued (under out_mu)
  std::string send_failed;        // why the writer gave up, if it did (under out_mu)
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
  void send(frame_type type, std::string_view body) { send(type, std::make_shared<const std::string>(body)); }
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
          send_all(fd, pieces, io_clock::now() + send_limit_for(bytes), stall, &heard);
        } catch (const send_timeout&) {  // the head's decision: said in its log and in the node table
          ok = false;
          const auto quiet = std::chrono::duration_cast<std::chrono::milliseconds>(io_clock::now() - heard.load());
          std::lock_guard lock(out_mu);
          send_failed = "a send to it timed out: it had read nothing and said nothing for " +
                        std::to_string(quiet.count()) + " ms";
          std::fprintf(stderr, "manta head: dropped %s: %s\n", address.c_str(), send_failed.c_str());
        } catch (const std::exception&) {  // (the connection broke: its reader sees it closed)
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
  /// Why the connection ended, seen from its reader: the writer's failure if it had one.
  std::string closed_why() {
    std::lock_guard lock(out_mu);
    return send_failed.empty() ? "its connection closed (the process ended, or its machine)" : send_failed;
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

head::head(config c)
    : cfg_(std::move(c)), port_(cfg_.port), state_({.lost_after = cfg_.lost_after, .node_wait = cfg_.node_wait}) {
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
  for (auto& c : all) c->shut();        // ends each server's read (no new ones: the acceptor is gone)
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
    c->stall = cfg_.lost_after;
    std::lock_guard lock(mu_);
    // Connections that ended (tools' requests, lost nodes) go: their threads are joined.
    std::erase_if(connections_, [](const std::shared_ptr<connection>& old) {
      if (!old->finished.load(std::memory_order_acquire)) return false;
      old->thread.join();
      return true;
    });
    // A thread per connection, but only so many before the token is proved:
    // strangers opening sockets cannot pile threads up. Nor can they lock
    // members and tools out by holding those few: past a limit, the oldest
    // unproved connection goes for the new one (from its own address first,
    // so one address cannot crowd out others), if it had a second for its
    // handshake (a burst of members starting together is not cut short).
    const std::string where = peer_address(fd);
    c->address = where;
    c->host = where.substr(0, where.rfind(':'));
    const auto now = io_clock::now();
    std::size_t unproved = 0, same_host = 0;
    connection *oldest = nullptr, *oldest_here = nullptr;  // of those a second old or more
    for (const auto& old : connections_) {
      if (old->stage.load(std::memory_order_acquire) != connection::handshaking) continue;
      ++unproved;
      const bool here = old->host == c->host;
      same_host += here;
      if (now - old->accepted < std::chrono::seconds(1)) continue;
      if (!oldest) oldest = old.get();
      if (here && !oldest_here) oldest_here = old.get();
    }
    connection* drop = same_host >= max_handshakes_per_address && oldest_here ? oldest_here
                       : unproved >= max_handshakes                          ? oldest
                                                                             : nullptr;
    if (!drop && unproved >= max_handshakes) {  // all of them young: this one waits for none
      ::close(fd);
      continue;
    }
    int expected = connection::handshaking;
    if (drop && drop->stage.compare_exchange_strong(expected, connection::dropped)) {
      drop->shut();  // its handshake read ends: its thread finishes
      if (now - last_drop_logged_ > std::chrono::seconds(10)) {  // (said once in a while, not per connection)
        last_drop_logged_ = now;
        std::fprintf(stderr,
                     "manta head: dropped a connection from %s that had not proved the token, for a new one from %s "
                     "(%zu connections were in their handshake, %zu from that address)\n",
                     drop->host.c_str(), c->host.c_str(), unproved, same_host);
      }
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

void head::serve(std::shared_ptr<connection> c) {
  const std::string where = peer_address(c->fd);
  auto finish = [&](const std::string& why) {
    std::vector<head_state::outgoing> out;
    std::lock_guard lock(mu_);  // queued under it: frames for one peer go in the order they were made
    state_.lose(*c, why, io_clock::now(), out);
    c->done = true;
    send_all_of(out);
  };
  try {
    frame_decoder in;  // one for the connection's life: nothing that arrives early is lost
    if (cfg_.tls) start_tls(c->fd, *cfg_.tls, /*as_head=*/true, {}, io_clock::now() + handshake_timeout);
    authenticate_peer(c->fd, cfg_.token, in);
    if (int expected = connection::handshaking;
        !c->stage.compare_exchange_strong(expected, connection::proved, std::memory_order_acq_rel))
      return finish("dropped during its handshake for a newer connection");
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
    std::vector<head_state::outgoing> out;
    {
      // Queued under the lock, as the serve threads send: a call routed to a
      // restarted actor by another thread once the lock is free must not
      // overtake its start.
      std::lock_guard lock(mu_);
      const bool joined = state_.join(c, f.body, where, io_clock::now(), out);
      send_all_of(out);
      if (!joined) return;
    }
    // Heartbeats, tasks and outcomes, until the connection ends or the watcher drops it.
    std::size_t seen = in.pending();
    for (;;) {
      receive_status st = receive(c->fd, in, io_clock::now() + progress_every, f, -1);
      if (st == receive_status::closed) return finish(c->closed_why());
      if (st == receive_status::frame || in.pending() != seen)
        c->heard.store(io_clock::now(), std::memory_order_release);
      if (st != receive_status::frame) {
        if (in.pending() != seen) {  // part of a long frame: the peer is alive
          seen = in.pending();
          std::lock_guard lock(mu_);
          state_.heard(*c, io_clock::now());
        }
        continue;
      }
      out.clear();
      std::vector<std::shared_ptr<connection>> forwarded_to;
      {
        std::lock_guard lock(mu_);
        if (c->done) return;  // the watcher declared it lost
        const auto now = io_clock::now();
        // Frames that came together (a driver's tasks come in bursts) are
        // routed under one hold of the lock, up to a part (this thread then
        // waits for its receiver) or 64 of them.
        std::size_t before = 0;
        try {
          for (int taken = 1;; ++taken) {
            before = out.size();
            const bool part = f.type == frame_type::part;
            state_.take(c, std::move(f), now, out);  // malformed: the connection ends
            // Queued under the lock: a part forwarded here cannot overtake the
            // parts another thread sent again to the same node, nor an abort.
            if (part) {
              for (std::size_t i = before; i < out.size(); ++i)
                forwarded_to.push_back(std::static_pointer_cast<connection>(out[i].to));
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
      // A long frame is read no faster than its receiver takes it: the head
      // holds a few parts per receiver, not the whole frame. Meanwhile the
      // sender counts as alive (its bytes wait in the socket).
      for (auto& to : forwarded_to) {
        const auto until = io_clock::now() + send_limit_for(max_queued);
        while (!to->wait_below(max_queued / 4, std::min(until, io_clock::now() + progress_every)) &&
               io_clock::now() < until && !stopping_) {
          std::lock_guard lock(mu_);
          if (c->done) return;
          state_.heard(*c, io_clock::now());
          c->heard.store(io_clock::now(), std::memory_order_release);  // (its bytes wait for us: it speaks)
        }
      }
    }
  } catch (const std::exception& e) {
    if (c->stage.load(std::memory_order_acquire) != connection::dropped)  // (those the acceptor logs, rate-limited)
      std::fprintf(stderr, "manta head: dropped %s (%s): %s\n", c->node_id.empty() ? "a peer" : c->node_id.c_str(),
                   where.c_str(), e.what());
    finish(e.what());
  }
}

void head::watch_heartbeats() {
  auto next_beat = io_clock::now();
  for (;;) {
    pollfd w{wake_fd_, POLLIN, 0};
    ::poll(&w, 1, 100);
    if (stopping_) return;
    std::vector<head_state::outgoing> out;
    std::vector<head_state::member_ptr> silent;
    {
      std::lock_guard lock(mu_);
      silent = state_.drop_silent(io_clock::now(), out);
      send_all_of(out);  // under the lock, as the serve threads do: in order per peer
      // Every member hears the head beat on its writer, whatever the head
      // reads from it: a member whose long frame the head paces (behind a
      // slow receiver), its own beats queued behind it, still hears the head.
      if (io_clock::now() >= next_beat) {
        next_beat = io_clock::now() + heartbeat_every;
        for (const auto& c : connections_) {
          if (c->node_id.empty() || c->done) continue;  // (not joined, or lost)
          try {
            c->send(frame_type::heartbeat, "");
          } catch (const std::exception&) {  // its connection is gone: its server thread sees to it
          }
        }
      }
    }
    for (auto& m : silent) {
      auto& c = static_cast<connection&>(*m);
      std::fprintf(stderr, "manta head: lost %s (%s): nothing from it for %lld ms; last read from it %lld ms ago\n",
                   m->node_id.c_str(), c.address.c_str(), static_cast<long long>(state_.lost_after().count()),
                   static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                              io_clock::now() - c.heard.load(std::memory_order_acquire))
                                              .count()));
      // A member that was only frozen (or cut off a while) reads why when it wakes, not "the head was lost".
      try {
        c.send(frame_type::stop, "the head dropped it: no heartbeat for " +
                                     std::to_string(state_.lost_after().count()) + " ms (frozen, or cut off?)");
      } catch (const std::exception&) {  // (closed already, or too much waits for it)
      }
      c.shut_reads();  // its server thread ends
    }
  }
}

void head::send_all_of(std::vector<head_state::outgoing>& out) {
  for (auto& o : out) {
    try {
      static_cast<connection&>(*o.to).send(o.type, o.body, o.kept);
    } catch (const std::exception&) {  // its connection is gone: its server thread sees to it
    }
  }
  out.clear();
}

std::vector<node_state> head::nodes() const {
  std::lock_guard lock(mu_);
  return state_.nodes();
}

std::string head::nodes_json() const {
  std::lock_guard lock(mu_);
  return state_.nodes_json();
}

void head::stop_cluster() {
  std::lock_guard lock(mu_);
  std::vector<head_state::outgoing> out;
  state_.stop(out);
  send_all_of(out);
}

}  // namespace manta::bridge

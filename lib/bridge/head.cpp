// bridge/head.cpp: the head on the network: the accept loop (with the limits
// that keep strangers from crowding members out), the silence watcher and
// the threads that run every session (head_session.cpp). What members send
// goes to the head's state (head_state.cpp), under mu_.
#include "bridge/head.hpp"

#include <fcntl.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <system_error>
#include <utility>

#include <boost/asio/post.hpp>

#include "bridge/head_session.hpp"
#include "bridge/socket_io.hpp"
#include "observe/thread_name.hpp"

namespace manta::bridge {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

namespace {

/// Connections at most that have not proved the token yet, overall and from
/// one address: past either, the oldest such one is dropped for the new one.
constexpr std::size_t max_handshakes = 32, max_handshakes_per_address = 8;
/// How often the watcher looks for silent members and stalled writes.
constexpr auto watch_every = std::chrono::milliseconds(100);

/// Threads running the sessions: a few, whatever the number of peers (a
/// session's work is short: TLS, copies into the kernel, routing under the
/// lock). They share one io_context, and each session's handlers run on its
/// own strand: the session a relay reads and the one it writes run on two
/// threads at once. (Sessions dealt to one io_context per thread put both on
/// one thread half the time: strace saw a whole 1 GiB relay on one thread.)
unsigned session_threads() { return std::clamp(std::thread::hardware_concurrency(), 2u, 4u); }

/// An SSL_CTX shared with `tls` (the head's Asio context takes a reference of its own).
asio::ssl::context asio_context_of(const tls_context& tls) {
  SSL_CTX_up_ref(tls.native());
  return asio::ssl::context(tls.native());
}

}  // namespace

head::head(config c)
    : cfg_(std::move(c)),
      io_(static_cast<int>(session_threads())),
      control_(asio::make_strand(io_)),
      acceptor_(control_),
      accept_pause_(control_),
      watch_timer_(control_),
      port_(cfg_.port),
      state_({.lost_after = cfg_.lost_after, .node_wait = cfg_.node_wait}) {
  if (cfg_.token.empty()) throw std::invalid_argument("manta bridge: a head needs the cluster token");
  if (cfg_.tls) ssl_.emplace(asio_context_of(*cfg_.tls));
  const int fd = listen_on(cfg_.bind, port_);  // (names the address when it cannot)
  error_code ec;
  acceptor_.assign(asio::ip::make_address(cfg_.bind).is_v6() ? tcp::v6() : tcp::v4(), fd, ec);
  if (ec) {
    ::close(fd);
    throw std::system_error(ec, "manta bridge: cannot listen on " + cfg_.bind);
  }
  accept_next();
  next_beat_ = io_clock::now();
  watch();
  try {
    for (unsigned i = session_threads(); i > 0; --i)
      threads_.emplace_back([io = &io_] {
        observe::name_runtime_thread("manta-head-io");  // (names what top -H and perf show)
        for (;;) {
          try {
            io->run();
            return;
          } catch (const std::exception& e) {  // a handler's bug must not take the head's thread with it
            std::fprintf(stderr, "manta head: a session's handler failed: %s\n", e.what());
          }
        }
      });
  } catch (...) {  // no thread to be had: nothing runs, and the caller hears why
    io_.stop();
    for (auto& t : threads_) t.join();
    throw;
  }
}

head::~head() {
  stopping_ = true;  // no node joins from here on...
  asio::post(control_, [this] {
    error_code ignored;
    acceptor_.close(ignored);
    accept_pause_.cancel();
    watch_timer_.cancel();
  });
  stop_cluster();  // ...and every node that did is told
  std::vector<std::shared_ptr<connection>> all;
  {
    std::lock_guard lock(mu_);
    all = connections_;
  }
  const auto until = io_clock::now() + std::chrono::seconds(2);
  for (auto& c : all) c->flush(until);  // the stops leave before the connections close
  for (auto& c : all) c->shut();
  io_.stop();  // (handlers still queued are dropped with the sessions they hold)
  for (auto& t : threads_) t.join();
  std::lock_guard lock(mu_);
  connections_.clear();
}

void head::accept_next() {
  acceptor_.async_accept(asio::make_strand(io_), [this](const error_code& ec, tcp::socket socket) {
    if (stopping_ || ec == asio::error::operation_aborted) return;
    if (ec == asio::error::no_descriptors || ec.value() == ENFILE) {  // it stays pending: do not spin on it
      accept_pause_.expires_after(std::chrono::milliseconds(100));
      accept_pause_.async_wait([this](const error_code& e) {
        if (!e && !stopping_) accept_next();
      });
      return;
    }
    if (!ec) {
      try {
        admit(std::move(socket));
      } catch (const std::exception& e) {  // (no memory, no TLS session): this peer goes, the head accepts on
        std::fprintf(stderr, "manta head: could not take a connection: %s\n", e.what());
      }
    }
    accept_next();
  });
}

void head::admit(tcp::socket socket) {
  // Not inherited by programs this process starts (the head may live in rank
  // 0's own process): a connection the head closes must close.
  ::fcntl(socket.native_handle(), F_SETFD, FD_CLOEXEC);
  error_code ignored;  // frames go out at once: small ones must not wait for the peer's delayed ACK (Nagle)
  socket.set_option(tcp::no_delay(true), ignored);
  auto c = std::make_shared<connection>(*this, std::move(socket));
  std::lock_guard lock(mu_);
  std::erase_if(connections_, [](const std::shared_ptr<connection>& old) {
    return old->finished.load(std::memory_order_acquire);  // (tools' requests, lost nodes)
  });
  // Only so many connections before the token is proved: strangers opening
  // sockets cannot pile work up. Nor can they lock members and tools out by
  // holding those few: past a limit, the oldest unproved connection goes for
  // the new one (from its own address first, so one address cannot crowd out
  // others), if it had a second for its handshake (a burst of members starting
  // together is not cut short).
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
  if (!drop && unproved >= max_handshakes) return;  // all of them young: this one waits for none (it closes)
  int expected = connection::handshaking;
  if (drop && drop->stage.compare_exchange_strong(expected, connection::dropped)) {
    drop->shut();  // its handshake ends
    if (now - last_drop_logged_ > std::chrono::seconds(10)) {  // (said once in a while, not per connection)
      last_drop_logged_ = now;
      std::fprintf(stderr,
                   "manta head: dropped a connection from %s that had not proved the token, for a new one from %s "
                   "(%zu connections were in their handshake, %zu from that address)\n",
                   drop->host.c_str(), c->host.c_str(), unproved, same_host);
    }
  }
  connections_.push_back(c);
  c->start();
}

void head::watch() {
  watch_timer_.expires_after(watch_every);
  watch_timer_.async_wait([this](const error_code& ec) {
    if (ec || stopping_) return;
    try {
      watch_once();
    } catch (const std::exception& e) {  // (no memory): the next turn tries again
      std::fprintf(stderr, "manta head: the silence watcher failed: %s\n", e.what());
    }
    watch();
  });
}

void head::watch_once() {
  {
    const auto now = io_clock::now();
    std::vector<head_state::outgoing> out;
    std::vector<head_state::member_ptr> silent;
    std::vector<std::shared_ptr<connection>> stalled;
    {
      std::lock_guard lock(mu_);
      silent = state_.drop_silent(now, out);
      send_all_of(out);  // under the lock, as the sessions do: in order per peer
      // Every member hears the head beat, whatever the head reads from it: a
      // member whose long frame the head paces (behind a slow receiver), its
      // own beats queued behind it, still hears the head.
      const bool beat = now >= next_beat_;
      if (beat) next_beat_ = now + heartbeat_every;
      for (const auto& c : connections_) {
        if (c->write_stalled(now)) stalled.push_back(c);
        if (!beat || c->node_id.empty() || c->done) continue;  // (not joined, or lost)
        try {
          c->send(frame_type::heartbeat, "");
        } catch (const std::exception&) {  // its connection is gone: its session sees to it
        }
      }
    }
    for (auto& c : stalled) c->shut();  // its reads end: lost as its failed write says
    for (auto& m : silent) {
      auto& c = static_cast<connection&>(*m);
      std::fprintf(stderr, "manta head: lost %s (%s): nothing from it for %lld ms\n", m->node_id.c_str(),
                   c.address.c_str(), static_cast<long long>(state_.lost_after().count()));
      // A member that was only frozen (or cut off a while) reads why when it wakes, not "the head was lost".
      try {
        c.send(frame_type::stop, "the head dropped it: no heartbeat for " +
                                     std::to_string(state_.lost_after().count()) + " ms (frozen, or cut off?)");
      } catch (const std::exception&) {  // (closed already, or too much waits for it)
      }
      c.end_reads("");  // (lost already: the stop goes, then the connection closes)
    }
  }
}

void head::send_all_of(std::vector<head_state::outgoing>& out) {
  for (auto& o : out) {
    try {
      static_cast<connection&>(*o.to).send(o.type, o.body, o.kept);
    } catch (const std::exception&) {  // its connection is gone: its session sees to it
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

std::size_t head::connections() const {
  std::lock_guard lock(mu_);
  return static_cast<std::size_t>(std::ranges::count_if(
      connections_, [](const auto& c) { return !c->finished.load(std::memory_order_acquire); }));
}

void head::stop_cluster() {
  std::lock_guard lock(mu_);
  std::vector<head_state::outgoing> out;
  state_.stop(out);
  send_all_of(out);
}

}  // namespace manta::bridge

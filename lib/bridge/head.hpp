// bridge/head.hpp: the cluster's head on the network. It listens, proves each
// peer's token (bridge/auth, over TLS when configured), and serves the
// members that join: what they send goes to the head's state
// (bridge/head_state.hpp, free of sockets), and the frames it returns go out
// through each peer's own write queue. A tool's connection asks for the node
// table, or stops the cluster (every member is told).
//
// Every connection is a Boost.Asio session (bridge/head_session.hpp): its
// reads, its writes and its deadlines run on its strand, on whichever of a few
// threads is free, so no connection holds a thread and no thread ever waits on
// a slow peer. The accept loop and the silence watcher are Asio handlers too,
// on a strand of their own. The state is under one mutex, and frames are
// queued under it: frames for one peer go in the order they were made.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "bridge/head_state.hpp"
#include "bridge/tls.hpp"

namespace manta::bridge {

class head {
 public:
  struct config {
    std::string bind = "127.0.0.1";  ///< loopback unless told otherwise
    unsigned short port = 0;         ///< 0: any free port
    std::string token;
    /// TLS on every connection (bridge/tls), when set.
    std::shared_ptr<tls_context> tls;
    std::chrono::milliseconds lost_after = silence_limit();
    /// How long work lost with its node waits for a node that has what it
    /// asks, when no alive one has (0: it fails at once).
    std::chrono::milliseconds node_wait = bridge::node_wait;
    /// Called (on a head thread) when a tool asks to stop the cluster, after
    /// every node was told.
    std::function<void()> on_stop_request;
  };

  /// Listens and serves. @throws std::system_error if it cannot listen or start its threads.
  explicit head(config c);
  /// Tells every node to stop, then closes every connection.
  ~head();
  head(const head&) = delete;
  head& operator=(const head&) = delete;

  unsigned short port() const noexcept { return port_; }
  std::vector<node_state> nodes() const;
  /// The node table as JSON (what `status_reply` carries).
  std::string nodes_json() const;
  /// Tells every node to stop.
  void stop_cluster();
  /// Connections open now (joined or not): what the limits bound.
  std::size_t connections() const;

 private:
  struct connection;
  void accept_next();
  void admit(boost::asio::ip::tcp::socket socket);
  void watch();       ///< arms the silence watcher's next turn (every 100 ms)
  void watch_once();  ///< its turn: silent members lost, stalled writes shut, heartbeats sent
  /// Queues each frame on its member's connection (mu_ held).
  void send_all_of(std::vector<head_state::outgoing>& out);

  config cfg_;
  boost::asio::io_context io_;  ///< (first: destroyed last, after everything bound to it)
  /// The accept loop's and the watcher's: their handlers never run at once.
  boost::asio::strand<boost::asio::io_context::executor_type> control_;
  /// Keeps the threads running while no session is under way.
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> keep_running_{io_.get_executor()};
  std::optional<boost::asio::ssl::context> ssl_;  ///< cfg_.tls's, for the sessions' streams
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer accept_pause_;  ///< out of descriptors: accept again a little later
  boost::asio::steady_timer watch_timer_;
  unsigned short port_ = 0;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mu_;  // state_, connections_
  head_state state_;
  std::vector<std::shared_ptr<connection>> connections_;  ///< every open one, joined or not
  std::chrono::steady_clock::time_point last_drop_logged_{};  ///< (the accept handler's)
  std::chrono::steady_clock::time_point next_beat_{};        ///< (the watcher's)
  std::vector<std::thread> threads_;                          ///< running io_
};

}  // namespace manta::bridge

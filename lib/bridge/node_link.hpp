// bridge/node_link.hpp: a member's one connection to the head (a node's, or
// a driver's): it proves the token (bridge/auth), joins (its host, pid,
// resources and the names its binary registered), sends a heartbeat every
// half second (from a thread of its own: landing a long frame's part can take
// seconds under load) and hands on what the head sends. The head's silence
// past silence_limit() (it beats every half second too), or its connection's
// end, ends the link, saying why.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "bridge/head_state.hpp"
#include "bridge/socket_io.hpp"
#include "bridge/tls.hpp"
#include "bridge/wire.hpp"

namespace manta::bridge {

/// Could not join: the head refused (wrong token, registry differs) or is not there.
class join_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A member's link to the head (a node's, or a driver's): joined in the
/// constructor, heartbeats on a thread of its own.
class node_link {
 public:
  /// Connects to `address` (HOST:PORT), proves `token`, joins as `info`.
  /// @param on_end  called once, on the link's thread, when the cluster stops
  ///                or the head is lost, with why; it may destroy the link, and
  ///                may run while another thread's destructor waits for it
  /// @param on_frames  called on the link's thread with the frames that are not
  ///                   membership's own (tasks, outcomes, the node table), in
  ///                   order, those that came together in one call (so a
  ///                   receiver hands them on together); it must not block.
  ///                   An exception from it ends the link.
  /// @param lander  where long frames from the head land (on the link's thread), if not joined
  /// @throws join_error saying why it could not join
  node_link(const std::string& address, const std::string& token, node_info info,
            std::function<void(const std::string& why)> on_end,
            std::function<void(std::vector<frame>&&)> on_frames = {}, frame_lander lander = {});
  ~node_link();
  node_link(const node_link&) = delete;
  node_link& operator=(const node_link&) = delete;

  const std::string& node_id() const noexcept { return id_; }
  /// Sends a frame to the head (any thread). @throws io_error if the link is down.
  void send(frame_type type, std::string_view body) { send(type, std::span<const std::string_view>(&body, 1)); }
  /// Sends a frame whose body is `pieces` joined, a long one in parts (other
  /// senders and heartbeats go between them). @throws io_error if the link is
  /// down, wire_error if it is over max_long_body (then nothing was sent)
  void send(frame_type type, std::span<const std::string_view> pieces);
  /// Sends frames already encoded (several small ones in one call). @throws io_error
  void send_encoded(std::string_view frames);
  /// Makes a long send under way, and every later one, fail (io_error) at its
  /// next part: a leaving member does not wait for gigabytes to go out.
  void stop_sending() noexcept { closing_.store(true, std::memory_order_release); }

 private:
  void run();   ///< reads what the head sends (the link's thread)
  void beat();  ///< heartbeats, until stop_beats (a thread of its own)
  void stop_beats();

  /// Sends a frame (send_mu_ held); a failure shuts the connection down.
  void send_locked(std::string_view header, std::string_view body);
  /// The connection, with its TLS session if it has one.
  socket_ref peer() const noexcept { return {fd_, tls_.get()}; }
  /// Closes the socket, then forgets its session (no thread uses either any more).
  void close_connection() noexcept;

  int fd_ = -1;
  std::unique_ptr<tls_session> tls_;
  std::mutex send_mu_;  ///< the beat thread and senders
  /// When the link's thread last heard the head: a send the head paces (it
  /// reads us no faster than our frame's receiver takes it) waits while the
  /// head still speaks.
  heard_time last_heard_{io_clock::now()};
  heard_time reader_looped_{io_clock::now()};  ///< the reader's last turn: a stuck one stops the beats
  std::mutex why_mu_;
  std::string send_failed_;  ///< why a send failed and closed the link (under why_mu_)
  int wake_fd_ = -1;
  frame_decoder in_;      ///< the connection's, from the handshake on
  part_assembler parts_;  ///< long frames from the head (the link's thread)
  std::atomic<std::uint64_t> next_stream_{0};
  std::atomic<bool> closing_{false};  ///< stop_sending was called
  std::string id_;
  std::function<void(const std::string&)> on_end_;
  std::function<void(std::vector<frame>&&)> on_frames_;
  const std::chrono::milliseconds silence_limit_ = silence_limit();  ///< the head's silence that loses it
  std::mutex beat_mu_;
  std::condition_variable beat_cv_;
  bool beats_stopped_ = false;  ///< under beat_mu_
  std::thread beats_;
  std::thread thread_;
};

/// A tool's request to the head at `address`: "status" (the node table as
/// JSON) or "stop" (stop the cluster; answers "{}").
/// @throws join_error if the head cannot be reached or refuses the token
std::string ask_head(const std::string& address, const std::string& token, const std::string& request);

/// Splits "HOST:PORT" ("[v6]:PORT" too). @throws join_error if malformed.
std::pair<std::string, unsigned short> split_address(const std::string& address);

}  // namespace manta::bridge

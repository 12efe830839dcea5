// bridge/head_session.hpp: one peer's connection to the head, as a
// Boost.Asio session: the handshake (TLS, then the token), the first frame (a
// join, or a tool's request), then every frame it sends, handed to the head's
// state; and a write queue of what the head sends it. Everything a session
// does with its socket runs on its strand (its handlers never run at once,
// on whichever of the head's threads is free); frames are queued from any thread.
//
// Private to the head (head.cpp, head_session.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>

#include "bridge/auth.hpp"
#include "bridge/head.hpp"
#include "bridge/socket_io.hpp"
#include "bridge/wire.hpp"

namespace manta::bridge {

/// Bytes at most waiting to go to one peer (not counting tasks' frames the head keeps anyway).
inline constexpr std::size_t max_queued = 512u << 20;
/// How often a paused reader notes that its sender is alive (its bytes wait for us).
inline constexpr auto progress_every = std::chrono::milliseconds(250);

struct head::connection : head_state::member, std::enable_shared_from_this<connection> {
  using tcp = boost::asio::ip::tcp;

  connection(head& owner, tcp::socket socket);

  /// Starts the handshake (on its strand).
  void start();
  /// Queues a frame; never blocks. @throws io_error if the connection is
  /// closed, or its peer reads so slowly that max_queued bytes wait for it
  /// (it is then dropped, and the head logs why)
  /// @param kept  the head keeps the body anyway (a task's, to send again):
  ///               it does not count against max_queued
  void send(frame_type type, std::shared_ptr<const std::string> body, bool kept = false);
  void send(frame_type type, std::string_view body) { send(type, std::make_shared<const std::string>(body)); }
  /// Ends its reads (any thread): what is queued still goes out, within the
  /// write limit, then the connection closes. Lost as `why` if not lost yet.
  void end_reads(std::string why);
  /// Closes the connection now (any thread).
  void shut();
  /// Waits until what was queued has been written (or `until`).
  void flush(io_clock::time_point until);
  /// Whether a write has waited past its limit on a peer that reads nothing
  /// and says nothing (the watcher asks; it then shuts the connection).
  bool write_stalled(io_clock::time_point now);

  // Its handshake: under way, done (the peer proved the token), or dropped
  // for a newer connection; its strand and the accept handler race for it.
  enum : int { handshaking, proved, dropped };
  std::atomic<int> stage{handshaking};
  std::atomic<bool> finished{false};  ///< closed: the head forgets it
  std::string address;                ///< the peer's address (HOST:PORT)
  std::string host;                   ///< the peer's address without its port
  io_clock::time_point accepted = io_clock::now();

 private:
  enum class phase { securing, proving, asking, joined, ended };

  template <class Op>
  void on_stream(Op&& op) {
    if (tls_)
      op(*tls_);
    else
      op(socket_);
  }
  void read_more();
  void on_read(const boost::system::error_code& ec, std::size_t n);
  /// Hands on every whole frame read, by phase; reads on unless paused.
  void take_frames();
  void take_handshake_frame(frame&& f);
  void take_first_frame(frame&& f);
  /// Routes what came (joined): false if it paused behind a receiver.
  bool route_frames();
  /// Stops reading while a receiver of its part is far behind: true if it did.
  bool pause_behind(const std::vector<std::shared_ptr<connection>>& receivers);
  void on_pace(const boost::system::error_code& ec);
  void resume();
  void arm_deadline(io_clock::duration after, const char* why);
  void disarm_deadline();
  /// Logs why (unless the accept handler dropped it, and logged that), then end(why).
  void drop(const std::string& why);
  /// Whether its queue is past what pauses a sender: then `sender` is woken once it drains.
  bool wait_for_room(std::weak_ptr<connection> sender);
  /// Its reads are over (on its strand): lost as `why` unless it was, then
  /// closed once its queue has gone out.
  void end(const std::string& why, bool lose = true);
  void write_next();
  void on_written(const boost::system::error_code& ec);
  /// Tells the senders paused behind it that it took what waited (out_mu held: swaps them out).
  void wake_senders(std::vector<std::weak_ptr<connection>>& to);
  void close_now();
  std::string closed_why();

  head& owner_;
  tcp::socket socket_;
  std::optional<boost::asio::ssl::stream<tcp::socket&>> tls_;
  boost::asio::steady_timer deadline_, pace_;
  const char* deadline_why_ = "";
  std::uint64_t deadline_armed_ = 0;  ///< which arming of deadline_ is current
  phase phase_ = phase::securing;  // (its strand's, as every field below up to out_mu)
  frame_decoder in_{max_handshake_body};
  std::optional<token_check> check_;
  std::size_t seen_ = 0;                  ///< bytes of a long frame already noted as a sign of life
  io_clock::time_point noted_{};          ///< when it was last noted
  std::vector<std::weak_ptr<connection>> paced_by_;  ///< receivers it waits for while paused
  io_clock::time_point pace_until_{};
  bool closed_ = false;
  /// A peer reading slowly is waited for while it reads or speaks; one that
  /// does neither for this long is dropped (the head's silence limit).
  std::chrono::milliseconds stall_;
  heard_time heard_{io_clock::now()};     ///< when its strand last read from it
  heard_time progress_{io_clock::now()};  ///< when bytes last left for it

  struct queued_frame {
    std::string header;
    std::shared_ptr<const std::string> body;
    bool kept = false;
  };
  std::mutex out_mu_;
  std::condition_variable out_cv_;
  std::deque<queued_frame> outq_;   // under out_mu_
  std::vector<queued_frame> batch_; // being written (its strand's)
  std::size_t queued_ = 0;          // bytes in outq_, under out_mu_
  std::size_t unkept_ = 0;          // of them, bytes of frames the head does not keep anyway
  bool writing_ = false;            // a write is posted or under way (under out_mu_)
  io_clock::time_point write_limit_ = io_clock::time_point::max();  ///< the write's own limit (under out_mu_)
  bool out_closed_ = false;         // nothing more is queued (under out_mu_)
  std::string send_failed_;         // why the head gave up writing to it, if it did (under out_mu_)
  std::vector<std::weak_ptr<connection>> paused_senders_;  ///< waiting for its queue to drain (under out_mu_)
};

}  // namespace manta::bridge

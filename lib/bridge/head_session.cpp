// bridge/head_session.cpp: one peer's connection to the head, on its strand:
// the handshake, the first frame, routing what it sends (paced behind slow
// receivers), and writing what the head queues for it.
#include "bridge/head_session.hpp"

#include <algorithm>
#include <cstdio>
#include <utility>

#include <boost/asio/defer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

namespace manta::bridge {

namespace asio = boost::asio;
using error_code = boost::system::error_code;

namespace {

/// How long a batch of frames may take to leave: 5 s, and a second more per
/// 8 MiB, or longer while the peer reads or speaks (then its silence limit counts).
io_clock::duration send_limit_for(std::size_t bytes) {
  return std::chrono::seconds(5) + std::chrono::seconds(bytes >> 23);
}

std::string address_of(const asio::ip::tcp::socket& s) {
  error_code ec;
  const auto end = s.remote_endpoint(ec);
  if (ec) return "?";
  const auto a = end.address();
  std::string text = a.is_v6() ? "[" : "";  // (built in steps: GCC 12 warns falsely of "[" + std::string)
  text += a.to_string();
  text += a.is_v6() ? "]:" : ":";
  text += std::to_string(end.port());
  return text;
}

}  // namespace

head::connection::connection(head& owner, tcp::socket socket)
    : owner_(owner),
      socket_(std::move(socket)),
      deadline_(socket_.get_executor()),
      pace_(socket_.get_executor()),
      stall_(owner.cfg_.lost_after) {
  address = address_of(socket_);
  host = address.substr(0, address.rfind(':'));
  if (owner_.ssl_) tls_.emplace(socket_, *owner_.ssl_);
}

void head::connection::start() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    auto secured = [self] {
      self->phase_ = phase::proving;
      self->check_.emplace(self->owner_.cfg_.token, self->tls_ ? tls_binding(self->tls_->native_handle()) : "");
      self->arm_deadline(handshake_timeout, "the handshake timed out");
      self->send(frame_type::challenge, self->check_->challenge());
      self->read_more();
    };
    if (!self->tls_) {
      try {
        return secured();
      } catch (const std::exception& e) {
        return self->drop(e.what());
      }
    }
    self->arm_deadline(handshake_timeout, "the TLS handshake timed out");
    self->tls_->async_handshake(asio::ssl::stream_base::server, [self, secured](const error_code& ec) {
      if (self->phase_ == phase::ended) return;
      if (ec)
        return self->drop("the TLS handshake with a peer failed (" +
                          (ec == asio::error::eof                  ? std::string("the other side closed the connection")
                           : ec == asio::error::operation_aborted ? std::string("it was cut short")
                                                                   : "the peer speaks no TLS: " + ec.message()) +
                          ")");
      try {
        secured();
      } catch (const std::exception& e) {
        self->drop(e.what());
      }
    });
  });
}

void head::connection::arm_deadline(io_clock::duration after, const char* why) {
  deadline_why_ = why;
  deadline_.expires_after(after);
  // A completion already queued when the step it bounded finished is stale:
  // cancel() cannot take it back, so each arming has its number.
  deadline_.async_wait([self = shared_from_this(), armed = ++deadline_armed_](const error_code& ec) {
    if (ec || armed != self->deadline_armed_ || self->phase_ == phase::ended) return;
    self->drop(self->deadline_why_);
  });
}

void head::connection::disarm_deadline() {
  ++deadline_armed_;
  deadline_.cancel();
}

void head::connection::drop(const std::string& why) {
  if (phase_ == phase::ended) return;
  if (stage.load(std::memory_order_acquire) != dropped)  // (those the accept handler logs, rate-limited)
    std::fprintf(stderr, "manta head: dropped %s (%s): %s\n", node_id.empty() ? "a peer" : node_id.c_str(),
                 address.c_str(), why.c_str());
  end(why);
}

void head::connection::read_more() {
  const std::span<char> room = in_.space(in_.wanted());
  on_stream([&](auto& stream) {
    stream.async_read_some(asio::buffer(room.data(), room.size()),
                           [self = shared_from_this()](const error_code& ec, std::size_t n) { self->on_read(ec, n); });
  });
}

void head::connection::on_read(const error_code& ec, std::size_t n) {
  if (phase_ == phase::ended) return;
  if (ec) {
    const bool closed = closed_ || ec == asio::error::operation_aborted || ec == asio::error::eof;
    const std::string why = closed ? closed_why() : "its connection broke: " + ec.message();
    if (phase_ == phase::joined) return end(why);
    return drop(closed ? "it closed the connection during the handshake" : why);  // (a member never does)
  }
  in_.commit(n);
  heard_.store(io_clock::now(), std::memory_order_release);
  try {
    take_frames();
  } catch (const std::exception& e) {
    drop(e.what());
  }
}

void head::connection::take_frames() {
  while (phase_ != phase::ended && in_.has_frame()) {
    if (phase_ == phase::joined) {
      if (!route_frames()) return;  // paused: resume() reads on
      continue;
    }
    frame f = std::move(*in_.next());  // malformed: the connection ends
    if (phase_ == phase::proving)
      take_handshake_frame(std::move(f));
    else
      take_first_frame(std::move(f));
  }
  if (phase_ == phase::ended) return;
  if (phase_ == phase::joined && in_.pending() != seen_) {  // part of a long frame: the peer is alive
    seen_ = in_.pending();
    if (const auto now = io_clock::now(); now - noted_ >= progress_every) {
      noted_ = now;
      std::lock_guard lock(owner_.mu_);
      owner_.state_.heard(*this, now);
    }
  }
  read_more();
}

void head::connection::take_handshake_frame(frame&& f) {
  std::string welcome;
  try {
    welcome = check_->welcome(f);
  } catch (const token_refused& e) {
    send(frame_type::refused, e.refusal());
    throw;
  }
  send(frame_type::welcome, welcome);
  if (int expected = handshaking; !stage.compare_exchange_strong(expected, proved, std::memory_order_acq_rel))
    return end("dropped during its handshake for a newer connection");
  in_.set_limit(max_frame_body);
  phase_ = phase::asking;
  arm_deadline(std::chrono::seconds(5), "it said nothing after the handshake");
}

void head::connection::take_first_frame(frame&& f) {
  disarm_deadline();
  if (f.type == frame_type::status_request) {
    send(frame_type::status_reply, owner_.nodes_json());
    return end("");
  }
  if (f.type == frame_type::stop_request) {
    owner_.stop_cluster();
    send(frame_type::status_reply, "{}");
    if (owner_.cfg_.on_stop_request) owner_.cfg_.on_stop_request();
    return end("");
  }
  if (f.type != frame_type::join) {
    send(frame_type::refused, "the first frame after the handshake must be a join or a request");
    return end("");
  }
  std::vector<head_state::outgoing> out;
  // Queued under the lock, as every session routes: a call routed to a
  // restarted actor by another session once the lock is free must not
  // overtake its start.
  std::lock_guard lock(owner_.mu_);
  const bool joined = owner_.state_.join(shared_from_this(), f.body, address, io_clock::now(), out);
  owner_.send_all_of(out);
  if (!joined) return end("", /*lose=*/false);
  phase_ = phase::joined;
  seen_ = in_.pending();
}

bool head::connection::route_frames() {
  std::vector<head_state::outgoing> out;
  std::vector<std::shared_ptr<connection>> forwarded_to;
  {
    std::lock_guard lock(owner_.mu_);
    if (done) {  // the watcher declared it lost
      end_reads("");
      return false;
    }
    const auto now = io_clock::now();
    // Frames that came together (a driver's tasks come in bursts) are routed
    // under one hold of the lock, up to a part (it may then wait for its
    // receiver) or 64 of them.
    std::size_t before = 0;
    try {
      for (int taken = 1;; ++taken) {
        frame f = std::move(*in_.next());  // malformed: the connection ends
        before = out.size();
        const bool part = f.type == frame_type::part;
        owner_.state_.take(shared_from_this(), std::move(f), now, out);
        // Queued under the lock: a part forwarded here cannot overtake the
        // parts another session sent again to the same node, nor an abort.
        if (part) {
          for (std::size_t i = before; i < out.size(); ++i)
            forwarded_to.push_back(std::static_pointer_cast<connection>(out[i].to));
          break;
        }
        before = out.size();
        if (taken == 64 || !in_.has_frame()) break;
      }
    } catch (...) {
      out.resize(before);  // what came before it still goes
      owner_.send_all_of(out);
      throw;
    }
    owner_.send_all_of(out);
  }
  seen_ = in_.pending();
  return !pause_behind(forwarded_to);
}

// A long frame is read no faster than its receivers take it: the head holds
// a few parts per receiver, not the whole frame. Meanwhile the sender counts
// as alive (its bytes wait in the socket), for as long as a write to the
// slowest receiver may take.
bool head::connection::pause_behind(const std::vector<std::shared_ptr<connection>>& receivers) {
  for (const auto& to : receivers)
    if (to.get() != this && to->wait_for_room(weak_from_this())) paced_by_.push_back(to);
  if (paced_by_.empty()) return false;
  pace_until_ = io_clock::now() + send_limit_for(max_queued);
  pace_.expires_after(progress_every);
  pace_.async_wait([self = shared_from_this()](const error_code& ec) { self->on_pace(ec); });
  return true;
}

void head::connection::on_pace(const error_code& ec) {
  if (ec || phase_ == phase::ended || paced_by_.empty()) return;
  const auto now = io_clock::now();
  {
    std::lock_guard lock(owner_.mu_);
    if (done) return end_reads("");
    owner_.state_.heard(*this, now);
  }
  heard_.store(now, std::memory_order_release);  // (its bytes wait for us: it speaks)
  resume();  // (looks again at every turn: a wake-up may have been taken by another sender)
  if (paced_by_.empty() || phase_ == phase::ended) return;
  pace_.expires_after(progress_every);
  pace_.async_wait([self = shared_from_this()](const error_code& e) { self->on_pace(e); });
}

void head::connection::resume() {
  if (phase_ == phase::ended || paced_by_.empty()) return;
  if (io_clock::now() < pace_until_ && !owner_.stopping_) {
    // Still waiting for one: asks each such receiver again to be told (the
    // wake-up that brought it here went to every sender, and another one may
    // have filled the queue since).
    bool waiting = false;
    for (const auto& weak : paced_by_)
      if (auto to = weak.lock()) waiting |= to->wait_for_room(weak_from_this());
    if (waiting) return;
  }
  paced_by_.clear();
  pace_.cancel();
  try {
    take_frames();
  } catch (const std::exception& e) {
    drop(e.what());
  }
}

bool head::connection::wait_for_room(std::weak_ptr<connection> sender) {
  std::lock_guard lock(out_mu_);
  if (out_closed_ || queued_ <= max_queued / 4) return false;
  paused_senders_.push_back(std::move(sender));
  return true;
}

void head::connection::end_reads(std::string why) {
  asio::post(socket_.get_executor(), [self = shared_from_this(), why = std::move(why)] { self->end(why); });
}

void head::connection::end(const std::string& why, bool lose) {
  if (phase_ == phase::ended) return;
  phase_ = phase::ended;
  disarm_deadline();
  pace_.cancel();
  paced_by_.clear();
  if (lose) {
    std::vector<head_state::outgoing> out;
    std::lock_guard lock(owner_.mu_);  // queued under it: frames for one peer go in the order they were made
    if (!done) owner_.state_.lose(*this, why, io_clock::now(), out);
    done = true;
    owner_.send_all_of(out);
  }
  std::vector<std::weak_ptr<connection>> paused;
  bool idle;
  {
    std::lock_guard lock(out_mu_);
    out_closed_ = true;  // what was queued (a reply, a refusal, a stop) goes first, within its limit
    idle = !writing_;
    wake_senders(paused);
  }
  if (idle) close_now();
}

void head::connection::send(frame_type type, std::shared_ptr<const std::string> body, bool kept) {
  queued_frame f{frame_header(type, body->size()), std::move(body), kept};
  const std::size_t bytes = f.header.size() + f.body->size();
  bool start;
  {
    std::lock_guard lock(out_mu_);
    if (out_closed_) throw io_error("manta bridge: the connection is closed");
    if (!kept && unkept_ + bytes > max_queued) {  // the head's decision: said in its log and in the node table
      send_failed_ = "it reads too slowly: " + std::to_string(unkept_ >> 20) + " MiB waited for it";
      std::fprintf(stderr, "manta head: dropped %s: %s\n", address.c_str(), send_failed_.c_str());
      out_closed_ = true;
      shut();
      throw io_error("manta bridge: the peer reads too slowly (" + std::to_string(unkept_ >> 20) +
                     " MiB wait for it); dropped");
    }
    queued_ += bytes;
    if (!kept) unkept_ += bytes;
    outq_.push_back(std::move(f));
    start = !writing_;
    if (start) {
      writing_ = true;
      write_limit_ = io_clock::time_point::max();
    }
  }
  // Deferred, not posted: from a session's handler (a relay) the write starts
  // on this thread once the handler returns, instead of waking another thread
  // for it (posting made the head switch threads 40% more often than the
  // pre-Asio head; the write's later steps still run on any thread).
  if (start) asio::defer(socket_.get_executor(), [self = shared_from_this()] { self->write_next(); });
}

void head::connection::write_next() {
  batch_.clear();
  std::size_t bytes = 0;
  {
    std::lock_guard lock(out_mu_);
    if (outq_.empty() || closed_) {
      writing_ = false;
      out_cv_.notify_all();
      std::vector<std::weak_ptr<connection>> paused;
      wake_senders(paused);
      if (!out_closed_) return;
    } else {
      // What waits goes in one write (a few MiB at most): a burst of small
      // frames costs one system call, not one each.
      while (!outq_.empty() && batch_.size() < 32 && (batch_.empty() || bytes < (1u << 20))) {
        queued_frame& f = outq_.front();
        const std::size_t n = f.header.size() + f.body->size();
        queued_ -= n;
        if (!f.kept) unkept_ -= n;
        bytes += n;
        batch_.push_back(std::move(f));
        outq_.pop_front();
      }
      write_limit_ = io_clock::now() + send_limit_for(bytes);
      if (queued_ <= max_queued / 4) {
        std::vector<std::weak_ptr<connection>> paused;
        wake_senders(paused);
      }
    }
  }
  if (batch_.empty()) return close_now();  // (ended, and everything written)
  std::vector<asio::const_buffer> buffers;
  buffers.reserve(batch_.size() * 2);
  for (const auto& f : batch_) {
    buffers.emplace_back(asio::buffer(f.header));
    buffers.emplace_back(asio::buffer(*f.body));
  }
  progress_.store(io_clock::now(), std::memory_order_release);
  // Each step of the write notes that bytes left: a slow reader that keeps
  // reading is waited for. A step takes what the kernel takes (a few MiB on
  // loopback; steps of 1 MiB made 3.4 times the system calls of a relay, measured).
  auto step = [self = shared_from_this()](const error_code& ec, std::size_t) -> std::size_t {
    if (ec) return 0;
    self->progress_.store(io_clock::now(), std::memory_order_release);
    return std::size_t{64} << 20;  // (above what one sendmsg takes; Asio would stop at 64 KiB)
  };
  on_stream([&](auto& stream) {
    asio::async_write(stream, buffers, step,
                      [self = shared_from_this()](const error_code& ec, std::size_t) { self->on_written(ec); });
  });
}

void head::connection::on_written(const error_code& ec) {
  batch_.clear();
  if (!ec) return write_next();
  {  // half a frame may have left: the connection cannot go on
    std::lock_guard lock(out_mu_);
    writing_ = false;
    out_closed_ = true;
    outq_.clear();
    queued_ = unkept_ = 0;
    out_cv_.notify_all();
    std::vector<std::weak_ptr<connection>> paused;
    wake_senders(paused);
  }
  close_now();  // (its reads then end: lost as closed_why() says)
}

bool head::connection::write_stalled(io_clock::time_point now) {
  std::lock_guard lock(out_mu_);
  if (!writing_ || !send_failed_.empty()) return false;
  const auto last = std::max(progress_.load(std::memory_order_acquire), heard_.load(std::memory_order_acquire));
  if (now < write_limit_ || now < last + stall_) return false;
  send_failed_ = send_timeout_why(heard_.load(), now);
  std::fprintf(stderr, "manta head: dropped %s: %s\n", address.c_str(), send_failed_.c_str());
  return true;
}

void head::connection::wake_senders(std::vector<std::weak_ptr<connection>>& to) {
  to.swap(paused_senders_);
  for (auto& weak : to)
    if (auto sender = weak.lock())
      asio::post(sender->socket_.get_executor(), [sender] { sender->resume(); });
  to.clear();
}

void head::connection::flush(io_clock::time_point until) {
  std::unique_lock lock(out_mu_);
  out_cv_.wait_until(lock, until, [&] { return outq_.empty() && !writing_; });
}

void head::connection::shut() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] { self->close_now(); });
}

void head::connection::close_now() {
  if (closed_) return;
  closed_ = true;
  error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);  // a read or write under way ends
  // Lost now, with the reason its writes gave (a session paced behind a
  // receiver has no read under way to see the close).
  if (phase_ != phase::ended) end(closed_why());
  disarm_deadline();
  pace_.cancel();
  finished.store(true, std::memory_order_release);
}

std::string head::connection::closed_why() {
  std::lock_guard lock(out_mu_);
  return send_failed_.empty() ? "its connection closed (the process ended, or its machine)" : send_failed_;
}

}  // namespace manta::bridge

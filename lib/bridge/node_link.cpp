// bridge/node_link.cpp: a member's link to the head, and a tool's request.
#include "bridge/node_link.hpp"

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
#include "bridge/tls.hpp"
#include "observe/thread_name.hpp"

namespace manta::bridge {

using nlohmann::json;

namespace {

/// How long a frame may take to leave: 5 s, and a second more per 8 MiB.
io_clock::duration send_limit_for(std::size_t bytes) {
  return std::chrono::seconds(5) + std::chrono::seconds(bytes >> 23);
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

node_link::node_link(const std::string& address, const std::string& token, node_info info,
                     std::function<void(const std::string&)> on_end,
                     std::function<void(std::vector<frame>&&)> on_frames, frame_lander lander)
    : parts_(2 * max_long_body, std::move(lander)), on_end_(std::move(on_end)), on_frames_(std::move(on_frames)) {
  auto [host, port] = split_address(address);
  try {
    fd_ = connect_to(host, port, std::chrono::seconds(5));
  } catch (const io_error& e) {
    throw join_error(e.what());
  }
  try {
    if (auto tls = member_tls_from_env()) tls_ = start_tls(fd_, *tls, false, host, io_clock::now() + handshake_timeout);
    authenticate_to_head(peer(), token, in_);
    std::sort(info.functions.begin(), info.functions.end());
    json j = {{"host", info.host},           {"pid", info.pid},   {"resources", info.resources},
              {"functions", info.functions}, {"role", info.role}, {"id", info.id}};
    auto until = io_clock::now() + std::chrono::seconds(5);
    send_all(peer(), encode(frame_type::join, j.dump()), until);
    frame f;
    if (receive(peer(), in_, until, f) != receive_status::frame)
      throw join_error("manta: the head did not answer the join");
    if (f.type == frame_type::refused)  // (a driver is told it is the driver: it joins under the role "driver")
      throw join_error("manta: the head refused this " + std::string(info.role == "driver" ? "driver" : "node") + ": " +
                       f.body);
    if (f.type == frame_type::stop) throw join_error("manta: the cluster is stopping: " + f.body);
    if (f.type != frame_type::joined) throw join_error("manta: the head answered the join with something else");
    id_ = f.body;
  } catch (const join_error&) {
    close_connection();
    throw;
  } catch (const std::exception& e) {
    close_connection();
    throw join_error(e.what());
  }
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    close_connection();
    throw join_error(std::string("manta: eventfd: ") + std::strerror(errno));
  }
  try {
    beats_ = std::thread([this] {
      observe::name_runtime_thread("manta-beat");
      beat();
    });
    thread_ = std::thread([this] {
      observe::name_runtime_thread("manta-link");
      run();
    });
  } catch (const std::exception& e) {  // no thread to be had
    stop_beats();
    close_connection();
    ::close(wake_fd_);
    throw join_error(std::string("manta: cannot start the link's threads: ") + e.what());
  }
}

node_link::~node_link() {
  wake(wake_fd_);
  stop_beats();
  // Destroyed from its own on_end: run() touches nothing after the callback.
  if (thread_.get_id() == std::this_thread::get_id())
    thread_.detach();
  else
    thread_.join();
  close_connection();
  ::close(wake_fd_);
}

void node_link::close_connection() noexcept {
  if (fd_ >= 0) ::close(std::exchange(fd_, -1));
  tls_.reset();
}

void node_link::stop_beats() {
  {
    std::lock_guard lock(beat_mu_);
    beats_stopped_ = true;
  }
  beat_cv_.notify_all();
  if (beats_.joinable()) beats_.join();
}

void node_link::beat() {
  std::unique_lock lock(beat_mu_);
  while (!beat_cv_.wait_for(lock, heartbeat_every, [&] { return beats_stopped_; })) {
    // A reader stuck past the silence limit (a callback that never returns)
    // silences the member: the head loses it, as it would a frozen one.
    if (io_clock::now() - reader_looped_.load(std::memory_order_acquire) > silence_limit_) continue;
    lock.unlock();  // (stop_beats never waits on a send)
    {
      // Never behind another thread's long frame, nor into a full socket (the
      // head paces us): either says this member lives (the head counts the
      // bytes it reads, and its pauses).
      std::unique_lock sending(send_mu_, std::try_to_lock);
      if (sending && writable_now(fd_)) {
        try {
          send_locked(frame_header(frame_type::heartbeat, 0), {});
        } catch (const io_error&) {  // the link is down: its reader ends it
          return;
        }
      }
    }
    lock.lock();
  }
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
  try {
    // A head that reads slowly (it paces a long frame by its receiver's speed)
    // is waited for while it reads or beats; one silent both ways for the silence limit is lost.
    const std::string_view pieces[] = {header, body};
    send_all(peer(), pieces, io_clock::now() + send_limit_for(body.size()), silence_limit_, &last_heard_);
  } catch (const send_timeout&) {
    // Part of a frame may have left: the link cannot go on. Its reader sees it
    // closed and ends it (on_end, saying why), so nothing waits on a frame that never arrives.
    {
      std::lock_guard lock(why_mu_);
      if (send_failed_.empty()) send_failed_ = send_timeout_why(last_heard_.load());
    }
    ::shutdown(fd_, SHUT_RDWR);
    throw;
  } catch (const io_error&) {  // (broken: its reader sees why)
    ::shutdown(fd_, SHUT_RDWR);
    throw;
  }
}

void node_link::run() {
  std::string why;
  std::vector<frame> batch;  // frames for on_frames_ that came together
  try {
    frame_decoder& in = in_;  // (what came with `joined` is in it already)
    auto last_heard = io_clock::now();
    std::size_t seen = in.pending();
    for (;;) {
      reader_looped_.store(io_clock::now(), std::memory_order_release);
      frame_view v;  // parts go from the read buffer into their long frame: one copy
      receive_status st = receive_view(peer(), in, io_clock::now() + heartbeat_every, v, wake_fd_);
      if (st == receive_status::woken) return;  // the link is being destroyed: no callback
      if (st == receive_status::closed) {
        why = "the head was lost (its connection closed)";
        break;
      }
      // The head beats on its own (not in answer to ours, which may wait behind
      // a long frame of ours): only its silence loses it, whatever we send.
      if (st != receive_status::frame && in.pending() != seen) last_heard = io_clock::now();  // a long frame arrives
      seen = in.pending();
      if (st == receive_status::frame) last_heard = io_clock::now();
      last_heard_.store(last_heard, std::memory_order_release);
      if (st == receive_status::frame) {
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
  {
    std::lock_guard lock(why_mu_);  // (a failed send closed the connection: that is why)
    if (!send_failed_.empty() && why.rfind("the head was lost", 0) == 0) why = "the head was lost: " + send_failed_;
  }
  // A send under way (a long frame to a frozen head) fails now, not at its own deadline.
  ::shutdown(fd_, SHUT_RDWR);
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
    std::unique_ptr<tls_session> tls;
    if (auto context = member_tls_from_env()) tls = start_tls(fd, *context, false, host, io_clock::now() + handshake_timeout);
    const socket_ref head{fd, tls.get()};
    authenticate_to_head(head, token);
    auto until = io_clock::now() + std::chrono::seconds(10);
    send_all(head, encode(request == "stop" ? frame_type::stop_request : frame_type::status_request, ""), until);
    frame_decoder in;
    frame f;
    const receive_status st = receive(head, in, until, f);
    if (st != receive_status::frame)
      throw join_error("manta: the head at " + address + " did not answer (" +
                       (st == receive_status::closed ? "it closed the connection" : "not within 10 s") + ")");
    if (f.type != frame_type::status_reply)
      throw join_error("manta: the head at " + address + " answered with a frame of type " +
                       std::to_string(static_cast<int>(f.type)) + (f.type == frame_type::refused ? ": " + f.body : ""));
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

// runtime/output_forwarder.cpp: the forwarding thread.
#include "runtime/output_forwarder.hpp"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <vector>

#include "ipc/channel.hpp"
#include "ipc/owned_fds.hpp"

namespace manta::runtime {

output_forwarder::output_forwarder(std::string log_dir) : log_dir_(std::move(log_dir)) {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  ipc::make_pipe(wake_, 0);
  for (int fd : {epoll_fd_, wake_[0], wake_[1]}) ipc::own_fd(fd);
  ipc::set_nonblocking(wake_[0], true);
  epoll_event ev{EPOLLIN, {.fd = wake_[0]}};
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_[0], &ev);
  thread_ = std::thread([this] { run(); });
}

output_forwarder::~output_forwarder() {
  stop();
  std::lock_guard lock(mu_);
  for (auto& [fd, s] : streams_) {
    ipc::disown_fd(fd);
    ::close(fd);
  }
  streams_.clear();
  for (auto& [pid, fd] : logs_)
    if (fd >= 0) ::close(fd);
  for (int fd : {epoll_fd_, wake_[0], wake_[1]})
    if (fd >= 0) {
      ipc::disown_fd(fd);
      ::close(fd);
    }
}

void output_forwarder::add(pid_t pid, int out_fd, int err_fd) {
  std::lock_guard lock(mu_);
  for (int fd : {out_fd, err_fd}) {
    ipc::own_fd(fd);
    ipc::set_nonblocking(fd, true);
    streams_[fd] = stream{pid, fd == err_fd, {}};
    epoll_event ev{EPOLLIN, {.fd = fd}};
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }
}

void output_forwarder::stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  char one = 1;
  [[maybe_unused]] auto n = ::write(wake_[1], &one, 1);
  thread_.join();
}

bool output_forwarder::forward(int fd, stream& s) {
  const std::string prefix = "(pid=" + std::to_string(s.pid) + ") ";
  std::string out;
  char buf[8192];
  bool open = true;
  for (int rounds = 0; rounds < 16; ++rounds) {  // bounded: one chatty process must not starve the rest
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) {
      open = false;
      break;
    }
    keep(s.pid, buf, static_cast<std::size_t>(n));
    s.partial.append(buf, static_cast<std::size_t>(n));
    std::size_t start = 0, nl;
    while ((nl = s.partial.find('\n', start)) != std::string::npos) {
      out += prefix;
      out.append(s.partial, start, nl - start + 1);
      start = nl + 1;
    }
    s.partial.erase(0, start);
    if (s.partial.size() >= max_line) {  // no newline in sight: write it as a line of its own
      out += prefix + s.partial + "\n";
      s.partial.clear();
    }
  }
  if (!open && !s.partial.empty()) {
    out += prefix + s.partial + "\n";
    s.partial.clear();
  }
  if (!out.empty()) queue(s.err ? 1 : 0, std::move(out));
  return open;
}

void output_forwarder::keep(pid_t pid, const char* data, std::size_t n) {
  if (log_dir_.empty()) return;
  auto [it, fresh] = logs_.try_emplace(pid, -1);
  if (fresh) {
    std::string path = log_dir_ + "/worker-" + std::to_string(pid) + ".log";
    it->second = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
  }
  // A full disk loses log lines, never the output on the driver's terminal.
  if (it->second < 0) return;
  [[maybe_unused]] auto written = ::write(it->second, data, n);
}

void output_forwarder::queue(int which, std::string&& lines) {
  if (pending_[which].size() + lines.size() > max_pending) {
    dropped_[which] += lines.size();
    return;
  }
  if (pending_[which].empty()) pending_[which] = std::move(lines);
  else pending_[which] += lines;
}

bool output_forwarder::write_pending() {
  bool all = true;
  for (int which = 0; which < 2; ++which) {
    const int fd = which == 0 ? STDOUT_FILENO : STDERR_FILENO;
    std::string& p = pending_[which];
    if (p.empty() && dropped_[which]) {
      p = "(manta) " + std::to_string(dropped_[which]) +
          " bytes of worker output were dropped: the driver's " + (which ? "stderr" : "stdout") +
          " was not being read\n";
      dropped_[which] = 0;
    }
    std::size_t done = 0;
    while (done < p.size()) {
      // A pipe that polls writable takes PIPE_BUF bytes without blocking; a file
      // or terminal always does.
      pollfd q{fd, POLLOUT, 0};
      if (::poll(&q, 1, 0) <= 0 || !(q.revents & POLLOUT)) break;
      ssize_t n = ::write(fd, p.data() + done, std::min<std::size_t>(p.size() - done, PIPE_BUF));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        done = p.size();  // stdout is closed or broken: nothing to write to
        break;
      }
      done += static_cast<std::size_t>(n);
    }
    p.erase(0, done);
    all = all && p.empty() && !dropped_[which];
  }
  return all;
}

void output_forwarder::run() {
  epoll_event evs[64];
  std::chrono::steady_clock::time_point give_up{};
  for (;;) {
    bool stopping, drained;
    {
      std::lock_guard lock(mu_);
      stopping = stopping_;
      drained = streams_.empty();
    }
    if (stopping && give_up == std::chrono::steady_clock::time_point{})
      give_up = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    // Stopping, the rest is drained until every stream ends and what waits is
    // written, bounded should a stray process hold a pipe or nobody read stdout.
    if (stopping && (std::chrono::steady_clock::now() > give_up || (drained && write_pending()))) return;
    // While output waits for the driver's stdout, look again every 10 ms.
    const bool waiting = !write_pending();
    int n = ::epoll_wait(epoll_fd_, evs, 64, waiting ? 10 : stopping ? 100 : -1);
    for (int i = 0; i < n; ++i) {
      int fd = evs[i].data.fd;
      if (fd == wake_[0]) {
        char sink[64];
        while (::read(wake_[0], sink, sizeof sink) > 0) {
        }
        continue;
      }
      stream s;
      {
        std::lock_guard lock(mu_);
        auto it = streams_.find(fd);
        if (it == streams_.end()) continue;
        s = std::move(it->second);
      }
      bool open = forward(fd, s);
      write_pending();
      std::lock_guard lock(mu_);
      if (open) {
        streams_[fd] = std::move(s);
      } else {
        ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
        ipc::disown_fd(fd);
        ::close(fd);
        streams_.erase(fd);
        // Its log closes with the last of its streams.
        bool more = std::any_of(streams_.begin(), streams_.end(), [&](auto& kv) { return kv.second.pid == s.pid; });
        if (auto log = logs_.find(s.pid); !more && log != logs_.end()) {
          if (log->second >= 0) ::close(log->second);
          logs_.erase(log);
        }
      }
    }
  }
}

}  // namespace manta::runtime

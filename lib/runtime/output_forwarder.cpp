// runtime/output_forwarder.cpp: the forwarding thread.
#include "runtime/output_forwarder.hpp"
#include "observe/thread_name.hpp"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <tuple>
#include <vector>

#include "ipc/channel.hpp"
#include "ipc/owned_fds.hpp"
#include "observe/log.hpp"

#include <manta/detail/progress.hpp>

namespace manta::runtime {

namespace {

/// Writes what `fd` takes of `text` without blocking: a pipe that polls
/// writable takes PIPE_BUF bytes, a file or terminal always takes them.
/// @returns the bytes written, or all of them when `fd` is closed or broken
std::size_t write_some(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    pollfd q{fd, POLLOUT, 0};
    if (::poll(&q, 1, 0) <= 0 || !(q.revents & POLLOUT)) break;
    ssize_t n = ::write(fd, text.data() + done, std::min<std::size_t>(text.size() - done, PIPE_BUF));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return text.size();  // nothing to write to: dropped
    done += static_cast<std::size_t>(n);
  }
  return done;
}

std::size_t megabytes_from(const char* name, std::size_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  unsigned long long mb = std::strtoull(v, &end, 10);
  if (*end || mb == 0 || mb > (1ull << 30)) {
    MANTA_WARN << name << "=" << v << " is not a number of mebibytes (MiB) from 1: using " << (fallback >> 20) << " MiB";
    return fallback;
  }
  return static_cast<std::size_t>(mb) << 20;
}

bool is_worker_log(const std::string& name) {
  return name.rfind("worker-", 0) == 0 &&
         (name.ends_with(".log") || name.ends_with(".log.old"));
}

}  // namespace

log_limits log_limits::from_environment() {
  log_limits l;
  l.file_bytes = megabytes_from("MANTA_LOG_FILE_MB", l.file_bytes);
  l.dir_bytes = megabytes_from("MANTA_LOG_DIR_MB", l.dir_bytes);
  return l;
}

std::size_t prune_worker_logs(const std::string& dir, std::size_t dir_bytes) {
  struct found {
    std::string path;
    std::size_t bytes;
    timespec mtime;
  };
  std::vector<found> logs;
  std::size_t total = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename();
    struct stat st;
    if (!is_worker_log(name) || ::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
        st.st_uid != ::geteuid())
      continue;
    total += static_cast<std::size_t>(st.st_size);
    logs.push_back({it->path(), static_cast<std::size_t>(st.st_size), st.st_mtim});
  }
  if (total <= dir_bytes) return 0;
  std::sort(logs.begin(), logs.end(), [](const found& a, const found& b) {
    return std::tie(a.mtime.tv_sec, a.mtime.tv_nsec) < std::tie(b.mtime.tv_sec, b.mtime.tv_nsec);
  });
  std::size_t removed = 0;
  for (const found& log : logs) {
    if (total <= dir_bytes) break;
    int fd = ::open(log.path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) continue;
    // A writer holds a shared lock for as long as it has the file open, and
    // the lock goes with its process, however that ends. The name must still
    // be the file locked (another runtime's log may have turned old onto it).
    struct stat locked, named;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0 && ::fstat(fd, &locked) == 0 && ::lstat(log.path.c_str(), &named) == 0 &&
        locked.st_dev == named.st_dev && locked.st_ino == named.st_ino && ::unlink(log.path.c_str()) == 0) {
      total -= log.bytes;
      removed += log.bytes;
    }
    ::close(fd);
  }
  return removed;
}

output_forwarder::output_forwarder(std::string log_dir, log_limits limits)
    : log_dir_(std::move(log_dir)), limits_(limits) {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  ipc::make_pipe(wake_, 0);
  for (int fd : {epoll_fd_, wake_[0], wake_[1]}) ipc::own_fd(fd);
  ipc::set_nonblocking(wake_[0], true);
  ipc::set_nonblocking(wake_[1], true);
  epoll_event ev{EPOLLIN, {.fd = wake_[0]}};
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_[0], &ev);
  thread_ = std::thread([this] {
    observe::name_runtime_thread("manta-output");  // (names what top -H and perf show)
    run();
  });
}

output_forwarder::~output_forwarder() {
  stop();
  std::lock_guard lock(mu_);
  for (auto& [fd, s] : streams_) {
    ipc::disown_fd(fd);
    ::close(fd);
  }
  streams_.clear();
  for (auto& [pid, log] : logs_) close_log(log);
  // Once more, with every log closed: processes ending together at shutdown
  // find the prune they ask for rate-limited.
  if (!log_dir_.empty()) prune_worker_logs(log_dir_, limits_.dir_bytes);
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

void output_forwarder::set_sink(line_sink sink) {
  std::lock_guard lock(mu_);
  sink_ = sink ? std::make_shared<const line_sink>(std::move(sink)) : nullptr;
}

void output_forwarder::print(bool err, std::string lines) {
  bool was_empty;
  {
    std::lock_guard lock(mu_);
    std::string& to = printed_[err ? 1 : 0];
    if (to.size() + lines.size() > max_pending) return;  // (queue() counts what it drops; this is rarer still)
    was_empty = printed_[0].empty() && printed_[1].empty();
    to += lines;
  }
  char one = 1;  // (the pipe does not block: a full one is awake already)
  if (was_empty) [[maybe_unused]] auto n = ::write(wake_[1], &one, 1);
}

bool output_forwarder::forward(int fd, stream& s, const line_sink* sink) {
  const std::string prefix = "(pid=" + std::to_string(s.pid) + ") ";
  std::string out, raw;  // prefixed for this terminal; as written, for the sink
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
      if (sink) raw.append(s.partial, start, nl - start + 1);
      start = nl + 1;
    }
    s.partial.erase(0, start);
    if (s.partial.size() >= max_line) {  // no newline in sight: write it as a line of its own
      out += prefix + s.partial + "\n";
      if (sink) raw += s.partial + "\n";
      s.partial.clear();
    }
  }
  if (!open && !s.partial.empty()) {
    out += prefix + s.partial + "\n";
    if (sink) raw += s.partial + "\n";
    s.partial.clear();
  }
  if (!raw.empty()) (*sink)(s.pid, s.err, raw);
  if (!out.empty()) queue(s.err ? 1 : 0, std::move(out));
  return open;
}

void output_forwarder::keep(pid_t pid, const char* data, std::size_t n) {
  if (log_dir_.empty()) return;
  auto [it, fresh] = logs_.try_emplace(pid);
  log_file& log = it->second;
  if (fresh) log = open_log(pid);
  // A full disk loses log lines, never the output on the driver's terminal.
  auto append = [&log](const char* from, std::size_t count) {
    if (log.fd < 0 || count == 0) return;
    if (auto written = ::write(log.fd, from, count); written > 0) log.bytes += static_cast<std::size_t>(written);
  };
  const std::size_t room = limits_.file_bytes > log.bytes ? limits_.file_bytes - log.bytes : 0;
  if (log.fd >= 0 && n > room && log.bytes > 0) {
    // The file ends with the last whole line that fits in this read (else
    // where the read before ended); the next one begins the new file.
    const void* newline = room ? ::memrchr(data, '\n', room) : nullptr;
    const std::size_t cut = newline ? static_cast<std::size_t>(static_cast<const char*>(newline) - data) + 1 : 0;
    append(data, cut);
    data += cut;
    n -= cut;
    const std::string path = log_dir_ + "/worker-" + std::to_string(pid) + ".log";
    ::rename(path.c_str(), (path + ".old").c_str());
    close_log(log);
    log = open_log(pid);
    prune_now_and_then();
  }
  append(data, n);
}

output_forwarder::log_file output_forwarder::open_log(pid_t pid) const {
  const std::string path = log_dir_ + "/worker-" + std::to_string(pid) + ".log";
  for (int tries = 0; tries < 2; ++tries) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return {};
    // Waits only while a pruner holds the file to remove it; then it is opened anew.
    struct stat st;
    if (::flock(fd, LOCK_SH) == 0 && ::fstat(fd, &st) == 0 && st.st_nlink > 0)
      return {fd, static_cast<std::size_t>(st.st_size)};
    ::close(fd);
  }
  return {};
}

void output_forwarder::close_log(log_file& log) {
  if (log.fd >= 0) ::close(log.fd);
  log = {};
}

void output_forwarder::prune_now_and_then() {
  if (log_dir_.empty()) return;
  auto now = std::chrono::steady_clock::now();
  if (last_prune_ != std::chrono::steady_clock::time_point{} && now - last_prune_ < std::chrono::seconds(2)) return;
  last_prune_ = now;
  prune_worker_logs(log_dir_, limits_.dir_bytes);
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
    std::string& p = pending_[which];
    if (p.empty() && dropped_[which]) {
      p = "(manta) " + std::to_string(dropped_[which]) +
          " bytes of worker output were dropped: the driver's " + (which ? "stderr" : "stdout") +
          " was not being read\n";
      dropped_[which] = 0;
    }
    if (!p.empty()) {
      // Above a progress bar, if one is drawn, never on its line.
      std::pair<std::string*, int> what{&p, which == 0 ? STDOUT_FILENO : STDERR_FILENO};
      detail::write_around_progress([](void* c) {
        auto& [text, fd] = *static_cast<std::pair<std::string*, int>*>(c);
        text->erase(0, write_some(fd, *text));
      }, &what);
    }
    all = all && p.empty() && !dropped_[which];
  }
  return all;
}

void output_forwarder::run() {
  prune_now_and_then();  // the logs of earlier runs
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
        char bytes[64];
        while (::read(wake_[0], bytes, sizeof bytes) > 0) {
        }
        std::string printed[2];
        {
          std::lock_guard lock(mu_);
          printed[0].swap(printed_[0]);
          printed[1].swap(printed_[1]);
        }
        for (int which = 0; which < 2; ++which)
          if (!printed[which].empty()) queue(which, std::move(printed[which]));
        write_pending();
        continue;
      }
      stream s;
      std::shared_ptr<const line_sink> sink;
      {
        std::lock_guard lock(mu_);
        auto it = streams_.find(fd);
        if (it == streams_.end()) continue;
        s = std::move(it->second);
        sink = sink_;
      }
      bool open = forward(fd, s, sink.get());
      write_pending();
      bool closed_log = false;
      {
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
            close_log(log->second);
            logs_.erase(log);
            closed_log = true;
          }
        }
      }
      if (closed_log) prune_now_and_then();  // (not under mu_: add() must not wait for a directory scan)
    }
  }
}

}  // namespace manta::runtime

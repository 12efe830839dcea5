// observe/control_socket.cpp: the runtime's Unix socket, and the client side the tools use.
#include "observe/control_socket.hpp"
#include "observe/thread_name.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include <nlohmann/json.hpp>

#include "observe/log.hpp"

namespace manta::observe {
namespace {

constexpr std::size_t max_request = 4096;
constexpr int client_timeout_ms = 5000;  ///< a client that stops reading or writing is dropped

sockaddr_un address_of(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path)
    throw std::system_error(ENAMETOOLONG, std::generic_category(),
                            "manta: socket path '" + path + "' is longer than a Unix socket allows");
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  return a;
}

/// Waits for `events` on `fd` until `until`; false on timeout, or once `stop_fd` is readable.
bool wait_for(int fd, short events, std::chrono::steady_clock::time_point until, int stop_fd = -1) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p[2] = {{fd, events, 0}, {stop_fd, POLLIN, 0}};
    int n = ::poll(p, stop_fd >= 0 ? 2 : 1, static_cast<int>(left.count()));
    if (n > 0) return !(stop_fd >= 0 && p[1].revents);
    if (n < 0 && errno != EINTR) return false;
  }
}

/// Writes all of `data` (a non-blocking fd) before `until`.
bool write_all(int fd, std::string_view data, std::chrono::steady_clock::time_point until, int stop_fd = -1) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(fd, POLLOUT, until, stop_fd)) return false;
    } else {
      return false;
    }
  }
  return true;
}

bool same_user(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  return cred.uid == ::geteuid() || cred.uid == 0;
}

std::string error_reply(const std::string& what) { return nlohmann::json{{"error", what}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

}  // namespace

void check_private_dir(const std::string& dir) {
  struct stat st {};  // (a link is followed: what it leads to must be ours)
  if (::stat(dir.c_str(), &st) != 0)
    throw std::system_error(errno, std::generic_category(), "manta: " + dir);
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)))
    throw std::system_error(EPERM, std::generic_category(),
                            "manta: " + dir + " is not a directory of this user that only it can write to");
}

std::string socket_path(const std::string& log_dir, pid_t pid, std::uint32_t epoch) {
  char name[64];
  std::snprintf(name, sizeof name, "/runtime-%d-%08x.sock", static_cast<int>(pid), epoch);
  return log_dir + name;
}

control_server::control_server(std::string path, handler answer)
    : path_(std::move(path)), answer_(std::move(answer)) {
  sockaddr_un a = address_of(path_);
  check_private_dir(path_.substr(0, path_.rfind('/')));
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) throw std::system_error(errno, std::generic_category(), "manta: socket");
  ::unlink(path_.c_str());  // a leftover of a driver with this pid and epoch: gone
  // Bound, then narrowed to 0600 before listen: nobody can connect in between.
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::chmod(path_.c_str(), 0600) != 0 || ::listen(listen_fd_, 16) != 0) {
    int e = errno;
    ::close(listen_fd_);
    ::unlink(path_.c_str());
    throw std::system_error(e, std::generic_category(), "manta: cannot listen on " + path_);
  }
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    int e = errno;
    ::close(listen_fd_);
    ::unlink(path_.c_str());
    throw std::system_error(e, std::generic_category(), "manta: eventfd");
  }
  thread_ = std::thread([this] {
    observe::name_runtime_thread("manta-control");  // (names what top -H and perf show)
    run();
  });
}

control_server::~control_server() {
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
  thread_.join();  // which joined every client's
  ::close(listen_fd_);
  ::close(wake_fd_);
  ::unlink(path_.c_str());
}

void control_server::run() {
  // Signals meant for the program go to its own threads.
  sigset_t all;
  sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, nullptr);
  for (;;) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) continue;
    if (p[1].revents) break;
    reap(false);
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // Out of descriptors (or memory): the pending client stays pending, so
      // wait a little instead of spinning on a listener that stays readable.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        pollfd w{wake_fd_, POLLIN, 0};
        ::poll(&w, 1, 100);
      }
      continue;
    }
    if (clients_.size() >= max_clients) {
      write_all(fd, error_reply("busy: " + std::to_string(max_clients) + " requests are being answered"),
                std::chrono::steady_clock::now() + std::chrono::milliseconds(100));
      ::close(fd);
      continue;
    }
    auto c = std::make_unique<client>();
    client* raw = c.get();
    try {
      c->thread = std::thread([this, fd, raw] {
        observe::name_runtime_thread("manta-control-c");
        serve(fd);
        ::close(fd);
        raw->done.store(true, std::memory_order_release);
      });
    } catch (const std::system_error&) {  // no thread to be had: the client is dropped
      ::close(fd);
      continue;
    }
    clients_.push_back(std::move(c));
  }
  reap(true);
}

void control_server::reap(bool all) {
  for (auto it = clients_.begin(); it != clients_.end();) {
    if (all || (*it)->done.load(std::memory_order_acquire)) {
      (*it)->thread.join();
      it = clients_.erase(it);
    } else {
      ++it;
    }
  }
}

void control_server::serve(int client) {
  // (Signals stay blocked here: the thread inherits the accepting thread's mask.)
  if (!same_user(client)) {
    MANTA_WARN << "control socket: refused a peer of another user";
    return;
  }
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(client_timeout_ms);
  std::string request;
  char buf[512];
  while (request.find('\n') == std::string::npos) {
    if (request.size() > max_request) {
      write_all(client, error_reply("request longer than " + std::to_string(max_request) + " bytes"), until, wake_fd_);
      return;
    }
    if (!wait_for(client, POLLIN, until, wake_fd_)) return;
    ssize_t n = ::recv(client, buf, sizeof buf, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;  // a request without its newline: taken as it is
    request.append(buf, static_cast<std::size_t>(n));
  }
  request.resize(std::min(request.find('\n'), request.size()));
  std::string reply;
  try {
    reply = answer_(request);
  } catch (const std::exception& e) {
    reply = error_reply(e.what());
  }
  write_all(client, reply, std::chrono::steady_clock::now() + std::chrono::milliseconds(client_timeout_ms), wake_fd_);
}

std::vector<runtime_address> find_runtimes(const std::string& log_dir) {
  std::vector<runtime_address> found;
  DIR* d = ::opendir(log_dir.c_str());
  if (!d) return found;
  while (dirent* ent = ::readdir(d)) {
    int pid = 0;
    unsigned epoch = 0;
    char tail[8] = {};
    if (std::sscanf(ent->d_name, "runtime-%d-%8x.%5s", &pid, &epoch, tail) != 3 ||
        std::strcmp(tail, "sock") != 0 || pid <= 0)
      continue;
    std::string path = log_dir + "/" + ent->d_name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    if (st.st_uid != ::geteuid() && ::geteuid() != 0) continue;  // another user's runtime
    if (::kill(pid, 0) != 0 && errno == ESRCH) {  // its driver is gone
      ::unlink(path.c_str());
      continue;
    }
    found.push_back({path, pid});
  }
  ::closedir(d);
  std::sort(found.begin(), found.end(), [](auto& a, auto& b) { return a.pid < b.pid; });
  return found;
}

std::string ask(const std::string& socket, const std::string& request, int timeout_ms) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  sockaddr_un a = address_of(socket);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "manta: socket");
  // Non-blocking: a full backlog answers EAGAIN, tried again until `until`.
  while (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    int e = errno;
    if ((e == EAGAIN || e == EINTR) && std::chrono::steady_clock::now() < until) {
      ::usleep(10000);
      continue;
    }
    ::close(fd);
    throw std::runtime_error("manta: no runtime answers at " + socket + ": " + std::strerror(e));
  }
  if (!same_user(fd)) {
    ::close(fd);
    throw std::runtime_error("manta: the socket " + socket + " is served by another user: not asked");
  }
  std::string reply;
  bool sent = write_all(fd, request + "\n", until);
  char buf[1 << 16];
  while (sent) {
    if (!wait_for(fd, POLLIN, until)) {
      ::close(fd);
      throw std::runtime_error("manta: the runtime at " + socket + " did not answer in time");
    }
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;
    reply.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  if (!sent) throw std::runtime_error("manta: could not send to the runtime at " + socket);
  if (reply.empty()) throw std::runtime_error("manta: the runtime at " + socket + " closed without answering");
  return reply;
}

std::string default_log_dir() {
  const char* dir = std::getenv("MANTA_LOG_DIR");
  return dir && *dir ? dir : "/tmp/manta";
}

}  // namespace manta::observe

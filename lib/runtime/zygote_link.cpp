// runtime/zygote_link.cpp: spawn requests and replies on the zygote's socket.
#include "runtime/zygote_link.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "ipc/channel.hpp"
#include "ipc/fd_passing.hpp"
#include "ipc/owned_fds.hpp"

namespace manta::runtime {

zygote_link::zygote_link(process::zygote_handle h) : h_(h) { ipc::own_fd(h_.socket); }

zygote_link::~zygote_link() {
  if (h_.socket >= 0) {
    ipc::disown_fd(h_.socket);
    ::close(h_.socket);
  }
}

void zygote_link::request(int slot, std::uint64_t process_number) {
  queue_.push_back({process::zygote_request::spawn_worker, slot, process_number});
  send_queued();
}

bool zygote_link::send_queued() {
  while (!queue_.empty()) {
    auto st = ipc::send_packet(h_.socket, &queue_.front(), sizeof queue_.front());
    if (st == ipc::send_status::full) return false;
    // Sent, or the zygote is gone (its EOF is handled where replies are read).
    queue_.pop_front();
  }
  return true;
}

std::optional<zygote_link::reply> zygote_link::next() {
  process::zygote_reply r{};
  std::vector<int> fds;
  long n = ipc::recv_packet(h_.socket, &r, sizeof r, &fds);
  if (n < 0) return std::nullopt;  // nothing now
  reply out;
  if (n == 0) return out;  // closed
  out.slot = r.slot;
  out.pid = r.pid;
  if (r.kind == process::zygote_reply::spawned) {
    if (fds.size() == 4) {
      out.kind = reply::spawned;
      for (int i = 0; i < 4; ++i) out.fds[i] = fds[static_cast<std::size_t>(i)];
      return out;
    }
    // The kernel could not hand us the pipes: this process has no descriptors left.
    for (int fd : fds) ::close(fd);
    ::kill(r.pid, SIGKILL);  // its exit is reported like any other
    out.kind = reply::spawn_failed;
    out.why = "the driver has no file descriptors left for its pipes (raise the open-file limit, ulimit -n)";
    return out;
  }
  for (int fd : fds) ::close(fd);
  if (r.pid < 0) {
    out.kind = reply::spawn_failed;
    out.status = r.status;
    out.why = std::string("the zygote could not start it: ") + std::strerror(r.status) +
              (r.status == EMFILE || r.status == ENFILE ? " (raise the open-file limit, ulimit -n)" : "");
    return out;
  }
  out.kind = reply::exited;
  out.status = r.status;
  return out;
}

int zygote_link::stop(int seconds) {
  if (h_.pid <= 0) return -1;
  process::zygote_request stop{process::zygote_request::stop, -1, 0};
  ipc::set_nonblocking(h_.socket, false);
  ipc::send_packet(h_.socket, &stop, sizeof stop);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int status = -1;
  for (;;) {
    pid_t r = ::waitpid(h_.pid, &status, WNOHANG);
    if (r == h_.pid) break;
    if (r < 0 && errno != EINTR) {
      status = -1;  // reaped already (SIGCHLD ignored by the program)
      break;
    }
    if (std::chrono::steady_clock::now() > until) {
      ::kill(h_.pid, SIGKILL);
      ::waitpid(h_.pid, &status, 0);
      break;
    }
    ipc::set_nonblocking(h_.socket, true);
    ipc::wait_readable(h_.socket, 10);
    char sink[64];
    while (ipc::recv_packet(h_.socket, sink, sizeof sink, nullptr) > 0) {
    }
  }
  h_.pid = -1;
  return status;
}

int zygote_link::reap() {
  if (h_.pid <= 0) return -1;
  int status = -1;
  // It closed its socket as it died: bounded, in case it is only closing.
  for (int i = 0; i < 100; ++i) {
    pid_t r = ::waitpid(h_.pid, &status, WNOHANG);
    if (r == h_.pid) break;
    if (r < 0 && errno != EINTR) {
      status = -1;
      break;
    }
    if (i == 99) {
      ::kill(h_.pid, SIGKILL);
      ::waitpid(h_.pid, &status, 0);
    }
    ::usleep(1000);
  }
  h_.pid = -1;
  return status;
}

}  // namespace manta::runtime

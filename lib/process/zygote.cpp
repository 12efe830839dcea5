// process/zygote.cpp: the zygote's loop. It forks processes on request, hands
// their pipes to the driver, reaps them and reports how they ended. When the
// driver goes away (socket EOF, or its death signal) it kills every child, reaps
// them and exits, so nothing is left behind.
#include "process/zygote.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <set>
#include <system_error>

#include "ipc/channel.hpp"
#include "ipc/fd_passing.hpp"
#include "process/worker.hpp"

namespace manta::process {
namespace {

[[noreturn]] void stop_all(const std::set<pid_t>& children) {
  for (pid_t p : children) ::kill(p, SIGKILL);
  for (pid_t p : children)
    while (::waitpid(p, nullptr, 0) < 0 && errno == EINTR) {
    }
  ::_exit(0);
}

/// Dies with the parent; returns false if the parent is already gone.
bool follow_parent(pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  return ::getppid() == parent;
}

void spawn(const zygote_config& cfg, int sock, int sigfd, const zygote_request& req,
           std::set<pid_t>& children) {
  int to_proc[2], from_proc[2], out[2], err[2];
  ipc::make_pipe(to_proc, cfg.pipe_capacity);
  ipc::make_pipe(from_proc, cfg.pipe_capacity);
  ipc::make_pipe(out, 0);
  ipc::make_pipe(err, 0);
  pid_t self = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(sock);
    ::close(sigfd);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (!follow_parent(self)) ::_exit(0);
    ::close(to_proc[1]);
    ::close(from_proc[0]);
    ::close(out[0]);
    ::close(err[0]);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    ::close(out[1]);
    ::close(err[1]);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) {
      ::dup2(devnull, STDIN_FILENO);
      ::close(devnull);
    }
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    worker_config w;
    w.from_driver = to_proc[0];
    w.to_driver = from_proc[1];
    w.doorbell = cfg.doorbell_write;
    w.slot = req.slot;
    w.process_number = req.process_number;
    w.epoch = cfg.epoch;
    w.num_workers = cfg.num_workers;
    w.control = cfg.control;
    w.arena_base = cfg.arena_base;
    run_worker(w);
  }
  int fds[4] = {to_proc[1], from_proc[0], out[0], err[0]};
  if (pid > 0) {
    children.insert(pid);
    zygote_reply r{zygote_reply::spawned, req.slot, pid, 0};
    if (!ipc::send_packet(sock, &r, sizeof r, fds)) stop_all(children);
  } else {
    zygote_reply r{zygote_reply::exited, req.slot, -1, errno};
    ipc::send_packet(sock, &r, sizeof r);
  }
  for (int fd : {to_proc[0], to_proc[1], from_proc[0], from_proc[1], out[0], out[1], err[0], err[1]})
    ::close(fd);
}

[[noreturn]] void zygote_main(const zygote_config& cfg, int sock, pid_t driver) {
  if (!follow_parent(driver)) ::_exit(0);
  if (cfg.doorbell_read >= 0) ::close(cfg.doorbell_read);
  ::prctl(PR_SET_NAME, "manta-zygote");
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &chld, nullptr);
  int sigfd = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  std::set<pid_t> children;
  for (;;) {
    pollfd p[2] = {{sock, POLLIN, 0}, {sigfd, POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      stop_all(children);
    }
    if (p[1].revents) {
      signalfd_siginfo info;
      while (::read(sigfd, &info, sizeof info) > 0) {
      }
      for (;;) {
        int status = 0;
        pid_t pid = ::waitpid(-1, &status, WNOHANG);
        if (pid <= 0) break;
        children.erase(pid);
        zygote_reply r{zygote_reply::exited, -1, pid, status};
        if (!ipc::send_packet(sock, &r, sizeof r)) stop_all(children);
      }
    }
    if (p[0].revents) {
      zygote_request req{};
      long n = ipc::recv_packet(sock, &req, sizeof req, nullptr);
      if (n <= 0) stop_all(children);  // the driver is gone
      if (n != sizeof req || req.kind == zygote_request::stop) stop_all(children);
      if (req.kind == zygote_request::spawn_worker) spawn(cfg, sock, sigfd, req, children);
    }
  }
}

}  // namespace

zygote_handle start_zygote(const zygote_config& config) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    throw std::system_error(errno, std::generic_category(), "socketpair");
  std::fflush(nullptr);  // buffered output must not be written twice by the children
  pid_t driver = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    ::close(sv[0]);
    ::close(sv[1]);
    throw std::system_error(e, std::generic_category(), "fork zygote");
  }
  if (pid == 0) {
    ::close(sv[0]);
    zygote_main(config, sv[1], driver);
  }
  ::close(sv[1]);
  return {pid, sv[0]};
}

}  // namespace manta::process

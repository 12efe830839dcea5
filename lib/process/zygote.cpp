// process/zygote.cpp: the zygote's loop. It forks processes on request, hands
// their pipes to the driver, reaps them and reports how they ended. When the
// driver goes away (socket EOF, or its pidfd says it exited) it kills every
// child, reaps them and exits, so nothing is left behind.
#include "process/zygote.hpp"
#include "observe/thread_name.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <set>
#include <system_error>
#include <vector>

#include "ipc/channel.hpp"
#include "ipc/fd_passing.hpp"
#include "ipc/owned_fds.hpp"
#include "process/context.hpp"
#include "process/worker.hpp"

namespace manta::process {
namespace {

/// The driver's control socket, and a pidfd of the driver (or -1).
char control_socket[256] = {};
int driver_pidfd = -1;
fork_hooks hooks;

/// fork() between the embedding interpreter's hooks (see fork_hooks).
pid_t hooked_fork() {
  if (hooks.before) hooks.before();
  pid_t pid = ::fork();
  const int saved = errno;
  if (pid == 0 && hooks.after_in_child) hooks.after_in_child();
  if (pid != 0 && hooks.after_in_parent) hooks.after_in_parent();
  errno = saved;
  return pid;
}

/// Ends every process, then the zygote. `driver_lost`: the driver's end failed
/// or it exited, so it may not have removed its control socket: the socket goes
/// once the driver has exited (the name carries the runtime's epoch, so a later
/// runtime of the same driver never has this one's). A driver still alive after
/// a while keeps it: the zygote failed, not the driver.
/// The pids whose parent is this process, read from /proc.
std::vector<pid_t> children_now() {
  std::vector<pid_t> out;
  const pid_t self = ::getpid();
  DIR* proc = ::opendir("/proc");
  if (!proc) return out;
  while (dirent* d = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(d->d_name, &end, 10);
    if (pid <= 0 || *end) continue;
    char path[64], stat[512];
    std::snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    const ssize_t n = ::read(fd, stat, sizeof stat - 1);
    ::close(fd);
    if (n <= 0) continue;
    stat[n] = 0;
    // "pid (comm) state ppid ...": the name may hold spaces and parentheses.
    const char* after = std::strrchr(stat, ')');
    char state = 0;
    long ppid = 0;
    if (after && std::sscanf(after + 1, " %c %ld", &state, &ppid) == 2 && ppid == self) out.push_back(pid);
  }
  ::closedir(proc);
  return out;
}

[[noreturn]] void stop_all(const std::set<pid_t>& children, bool driver_lost = false) {
  for (pid_t p : children) ::kill(p, SIGKILL);
  for (pid_t p : children)
    while (::waitpid(p, nullptr, 0) < 0 && errno == EINTR) {
    }
  // What tasks forked came to this process (a subreaper) as their workers
  // died: killed too, round after round, since each death hands on its own.
  for (int round = 0; round < 64; ++round) {
    const std::vector<pid_t> adopted = children_now();
    if (adopted.empty()) break;
    for (pid_t p : adopted) ::kill(p, SIGKILL);
    for (pid_t p : adopted)
      while (::waitpid(p, nullptr, 0) < 0 && errno == EINTR) {
      }
  }
  if (driver_lost && control_socket[0]) {
    pollfd p{driver_pidfd, POLLIN, 0};
    if (driver_pidfd < 0 || ::poll(&p, 1, 2000) > 0) ::unlink(control_socket);
  }
  ::_exit(0);
}

/// The children of the zygote die with it.
bool follow_parent(pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  return ::getppid() == parent;
}

/// A descriptor that becomes readable when the driver process exits, whichever
/// of its threads forked the zygote (PR_SET_PDEATHSIG would follow that thread:
/// `init` from a thread that later exits would take the zygote with it).
int watch_driver(pid_t driver) {
  int fd = static_cast<int>(::syscall(SYS_pidfd_open, driver, 0));
  if (fd < 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // an old kernel: the next best thing
  } else {
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  return fd;
}

/// Forks one process for `req`; a fork that fails is reported, not thrown.
void spawn(const zygote_config& cfg, int sock, int sigfd, int driver_fd, const zygote_request& req,
           std::set<pid_t>& children) {
  int to_proc[2] = {-1, -1}, from_proc[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  auto close_all = [&] {
    for (int fd : {to_proc[0], to_proc[1], from_proc[0], from_proc[1], out[0], out[1], err[0], err[1]})
      if (fd >= 0) ::close(fd);
  };
  int error = 0;
  try {
    ipc::make_pipe(to_proc, cfg.pipe_capacity);
    ipc::make_pipe(from_proc, cfg.pipe_capacity);
    ipc::make_pipe(out, 0);
    ipc::make_pipe(err, 0);
  } catch (const std::system_error& e) {
    error = e.code().value();  // most likely EMFILE: too many processes for the open-file limit
  }
  pid_t pid = -1;
  if (!error) {
    pid_t self = ::getpid();
    pid = hooked_fork();
    if (pid < 0) error = errno;
    if (pid == 0) {
      ::close(sock);
      ::close(sigfd);
      if (driver_fd >= 0) ::close(driver_fd);
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
      w.worker_setup = cfg.worker_setup;
      w.crash_dir = cfg.crash_dir.c_str();
      run_worker(w);
    }
  }
  if (pid > 0) {
    children.insert(pid);
    zygote_reply r{zygote_reply::spawned, req.slot, pid, 0};
    int fds[4] = {to_proc[1], from_proc[0], out[0], err[0]};
    if (ipc::send_packet(sock, &r, sizeof r, fds) != ipc::send_status::sent) stop_all(children, true);
  } else {
    zygote_reply r{zygote_reply::exited, req.slot, -1, error};
    if (ipc::send_packet(sock, &r, sizeof r) != ipc::send_status::sent) stop_all(children, true);
  }
  close_all();
}

[[noreturn]] void zygote_main(const zygote_config& cfg, int sock, pid_t driver) {
  // Nothing may unwind out of here: below is init(), and below that the user's
  // main, which must never run a second time in this process.
  std::set<pid_t> children;
  try {
    mark_spawned_by_runtime();
    std::snprintf(control_socket, sizeof control_socket, "%s", cfg.control_socket.c_str());
    ipc::forget_owned_fds();  // the driver's, not the zygote's
    int driver_fd = watch_driver(driver);
    driver_pidfd = driver_fd;
    if (::getppid() != driver) ::_exit(0);  // the driver is gone already
    if (cfg.doorbell_read >= 0) ::close(cfg.doorbell_read);
    observe::name_runtime_thread("manta-zygote");
    // Processes a task forks outlive their worker: they come here, not to init,
    // and end with the runtime (stop_all).
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    // Children are reaped here, whatever the driver set: SIG_IGN would reap them
    // unseen (no exit status, so crashed tasks would never fail).
    ::signal(SIGCHLD, SIG_DFL);
    // Ctrl-C is for the driver to handle; its processes go when it goes.
    ::signal(SIGINT, SIG_IGN);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    ::sigprocmask(SIG_BLOCK, &chld, nullptr);
    int sigfd = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    for (;;) {
      pollfd p[3] = {{sock, POLLIN, 0}, {sigfd, POLLIN, 0}, {driver_fd, POLLIN, 0}};
      if (::poll(p, driver_fd >= 0 ? 3 : 2, -1) < 0) {
        if (errno == EINTR) continue;
        stop_all(children);
      }
      if (driver_fd >= 0 && p[2].revents) stop_all(children, true);  // the driver exited
      if (p[1].revents) {
        signalfd_siginfo info;
        while (::read(sigfd, &info, sizeof info) > 0) {
        }
        for (;;) {
          int status = 0;
          pid_t pid = ::waitpid(-1, &status, WNOHANG);
          if (pid <= 0) break;
          if (children.erase(pid) == 0) continue;  // one it adopted: the driver never knew it
          zygote_reply r{zygote_reply::exited, -1, pid, status};
          if (ipc::send_packet(sock, &r, sizeof r) != ipc::send_status::sent) stop_all(children, true);
        }
      }
      if (p[0].revents) {
        zygote_request req{};
        long n = ipc::recv_packet(sock, &req, sizeof req, nullptr);
        if (n <= 0) stop_all(children, true);  // the driver is gone
        if (n != sizeof req || req.kind == zygote_request::stop) stop_all(children);
        if (req.kind == zygote_request::spawn_worker) spawn(cfg, sock, sigfd, driver_fd, req, children);
      }
    }
  } catch (...) {
    stop_all(children);
  }
}

}  // namespace

void set_fork_hooks(const fork_hooks& h) noexcept { hooks = h; }

zygote_handle start_zygote(const zygote_config& config) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    throw std::system_error(errno, std::generic_category(), "socketpair");
  std::fflush(nullptr);  // buffered output must not be written twice by the children
  pid_t driver = ::getpid();
  pid_t pid = hooked_fork();
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

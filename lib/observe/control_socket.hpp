// observe/control_socket.hpp: a runtime's address on this machine. Every driver
// runtime listens on a Unix socket in its log_dir, mode 0600, and answers only
// peers of its own user (or root). A client sends one request line ("status",
// "memory", "timeline 5") and reads the answer, one JSON document, to the end.
// The tools find the runtimes of a log_dir by listing the sockets there.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace manta::observe {

/// "<log_dir>/runtime-<pid>-<epoch in hex>.sock": a second runtime of the same
/// driver (after shutdown and init) gets a name of its own.
std::string socket_path(const std::string& log_dir, pid_t pid, std::uint32_t epoch);

/// Serves requests on the socket at `path` until destroyed (which removes the
/// socket file): a thread accepts, and each client gets a thread of its own
/// (at most max_clients at once), so a slow answer (a timeline capture) holds
/// up no other.
class control_server {
 public:
  /// Answers one request line; runs on the server's thread.
  using handler = std::function<std::string(const std::string& request)>;
  static constexpr std::size_t max_clients = 8;

  /// Binds and listens. The directory must be this user's and writable by no
  /// one else (nobody can swap the socket for a link). @throws std::system_error naming the path.
  control_server(std::string path, handler answer);
  ~control_server();
  control_server(const control_server&) = delete;
  control_server& operator=(const control_server&) = delete;

  const std::string& path() const noexcept { return path_; }

 private:
  struct client {
    std::thread thread;
    std::atomic<bool> done{false};
  };
  void run();
  void serve(int fd);
  /// Joins the client threads that ended (all of them with `all`).
  void reap(bool all);

  std::string path_;
  handler answer_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  ///< eventfd: stop
  std::thread thread_;
  std::vector<std::unique_ptr<client>> clients_;  ///< only the accepting thread touches the vector
};

/// Throws std::system_error unless `dir` is a directory of this user that
/// nobody else may write to (files made there by name cannot be swapped for links).
void check_private_dir(const std::string& dir);

/// A runtime answering in a log_dir.
struct runtime_address {
  std::string socket;  ///< path of its socket
  pid_t pid = 0;       ///< the driver's pid, from the name
};

/// The runtimes of this user answering in `log_dir`, oldest pid first. Sockets
/// left by a driver that is gone (SIGKILLed before its zygote could remove
/// them) are removed; other users' sockets are skipped.
std::vector<runtime_address> find_runtimes(const std::string& log_dir);

/// Sends `request` to the runtime at `socket` and returns its answer; the
/// server must run as this user (or root).
/// @throws std::runtime_error saying what failed (no such runtime, no answer in time)
std::string ask(const std::string& socket, const std::string& request, int timeout_ms = 10000);

/// Where runtimes put logs, spilled objects and sockets when options.log_dir
/// is empty, and where the tools look: MANTA_LOG_DIR if set, else /tmp/manta.
std::string default_log_dir();

}  // namespace manta::observe

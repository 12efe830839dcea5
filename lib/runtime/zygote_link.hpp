// runtime/zygote_link.hpp: the driver's end of the zygote's socket. Spawn
// requests wait in a queue while the socket is full (hundreds of actors started
// at once), and every reply is read whole, with the pipes it carries.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "process/zygote.hpp"

namespace manta::runtime {

class zygote_link {
 public:
  zygote_link() = default;
  explicit zygote_link(process::zygote_handle h);
  zygote_link(const zygote_link&) = delete;
  zygote_link& operator=(const zygote_link&) = delete;
  ~zygote_link();

  int socket() const noexcept { return h_.socket; }
  pid_t pid() const noexcept { return h_.pid; }

  /// Asks for a process in `slot`; queued if the socket is full. Not thread-safe
  /// (the scheduler calls it under its mutex, as it does send_queued).
  void request(int slot, std::uint64_t process_number);
  /// Sends what waits. @returns false if some still waits (wait for the socket
  /// to be writable, then call again).
  bool send_queued();
  bool has_queued() const noexcept { return !queue_.empty(); }

  struct reply {
    enum kind_t { spawned, spawn_failed, exited, closed } kind = closed;
    int slot = -1;
    pid_t pid = -1;
    int status = 0;      ///< waitpid status (exited) or errno (spawn_failed)
    int fds[4] = {-1, -1, -1, -1};  ///< spawned: to the process, from it, its stdout, its stderr
    std::string why;     ///< spawn_failed
  };
  /// The next reply, if one is there (non-blocking). `closed`: the zygote is gone.
  std::optional<reply> next();

  /// Stops the zygote (it kills and reaps every process) and reaps it, waiting
  /// at most `seconds` before killing it. Returns its wait status, or -1.
  int stop(int seconds);
  /// Reaps the zygote after it died on its own; its wait status, or -1.
  int reap();

 private:
  process::zygote_handle h_;
  std::deque<process::zygote_request> queue_;
};

}  // namespace manta::runtime

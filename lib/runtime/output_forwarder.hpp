// runtime/output_forwarder.hpp: what workers and actor hosts print reaches the
// driver's stdout and stderr line by line, prefixed "(pid=N) ". A thread of its
// own does it and never blocks on the driver's stdout: when that is not read
// (`| less` waiting), lines wait in a bounded buffer while workers go on, and
// what does not fit is counted and reported instead of stalling them. Each
// process's output is also kept, as written, in log_dir/worker-<pid>.log.
#pragma once

#include <sys/types.h>

#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

namespace manta::runtime {

class output_forwarder {
 public:
  /// A line longer than this is written in pieces (a process printing without
  /// newlines must not grow the driver's memory).
  static constexpr std::size_t max_line = 64 << 10;
  /// Output waiting for the driver's stdout (or stderr) to be read, at most.
  static constexpr std::size_t max_pending = 8 << 20;

  /// @param log_dir  where each process's log file goes; empty: none
  explicit output_forwarder(std::string log_dir);
  ~output_forwarder();
  output_forwarder(const output_forwarder&) = delete;
  output_forwarder& operator=(const output_forwarder&) = delete;

  /// Forwards what process `pid` writes on `out_fd` and `err_fd` (read ends,
  /// now owned here) until they end.
  void add(pid_t pid, int out_fd, int err_fd);
  /// Forwards what is left (every writer is gone or going), then stops the thread.
  void stop();

 private:
  struct stream {
    pid_t pid = 0;
    bool err = false;
    std::string partial;  ///< bytes after the last newline
  };
  void run();
  /// Reads what `fd` has; false at its end.
  bool forward(int fd, stream& s);
  /// Appends complete lines for stdout (0) or stderr (1), or counts them dropped.
  void queue(int which, std::string&& lines);
  /// Writes what the driver's stdout and stderr take without blocking.
  /// @returns true if everything went out.
  bool write_pending();
  /// Appends what process `pid` wrote to its log file (opened at its first output).
  void keep(pid_t pid, const char* data, std::size_t n);

  int epoll_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::mutex mu_;  // streams_
  std::unordered_map<int, stream> streams_;
  std::thread thread_;
  bool stopping_ = false;
  // Only the forwarding thread touches these.
  std::string pending_[2];
  std::size_t dropped_[2] = {0, 0};
  std::string log_dir_;
  std::unordered_map<pid_t, int> logs_;  ///< open log files by pid; -1: could not be opened
};

}  // namespace manta::runtime

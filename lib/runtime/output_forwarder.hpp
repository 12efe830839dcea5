// runtime/output_forwarder.hpp: what workers and actor hosts print reaches the
// driver's stdout and stderr line by line, prefixed "(pid=N) ". A thread of its
// own does it, so a driver whose terminal or pipe blocks (`| less`) stalls only
// this thread, never the handling of results.
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

  output_forwarder();
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

  int epoll_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::mutex mu_;  // streams_
  std::unordered_map<int, stream> streams_;
  std::thread thread_;
  bool stopping_ = false;
};

}  // namespace manta::runtime

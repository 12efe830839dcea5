// runtime/output_forwarder.hpp: what workers and actor hosts print reaches the
// driver's stdout and stderr line by line, prefixed "(pid=N) ". A thread of its
// own does it and never blocks on the driver's stdout: when that is not read
// (`| less` waiting), lines wait in a bounded buffer while workers go on, and
// what does not fit is counted and reported instead of stalling them. Each
// process's output is also kept, as written, in log_dir/worker-<pid>.log; the
// logs are bounded per file and per directory (see log_limits).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <string>
#include <thread>
#include <unordered_map>

namespace manta::runtime {

/// How much worker output log_dir keeps. A log reaching `file_bytes` becomes
/// worker-<pid>.log.old (replacing the one before), so a process keeps at most
/// twice that. Logs nobody writes any more (their runtime ended or crashed:
/// a writer holds a shared flock on each) are removed, oldest first, while all
/// worker logs in log_dir take more than `dir_bytes`.
struct log_limits {
  std::size_t file_bytes = std::size_t{64} << 20;  ///< MANTA_LOG_FILE_MB
  std::size_t dir_bytes = std::size_t{1} << 30;    ///< MANTA_LOG_DIR_MB
  /// The defaults, or the environment's where set.
  static log_limits from_environment();
};

/// Removes logs nobody writes from `dir`, oldest first, until its worker logs
/// take at most `dir_bytes`. @returns the bytes removed.
std::size_t prune_worker_logs(const std::string& dir, std::size_t dir_bytes);

class output_forwarder {
 public:
  /// A line longer than this is written in pieces (a process printing without
  /// newlines must not grow the driver's memory).
  static constexpr std::size_t max_line = 64 << 10;
  /// Output waiting for the driver's stdout (or stderr) to be read, at most.
  static constexpr std::size_t max_pending = 8 << 20;

  /// @param log_dir  where each process's log file goes; empty: none
  explicit output_forwarder(std::string log_dir, log_limits limits = log_limits::from_environment());
  ~output_forwarder();
  output_forwarder(const output_forwarder&) = delete;
  output_forwarder& operator=(const output_forwarder&) = delete;

  /// Forwards what process `pid` writes on `out_fd` and `err_fd` (read ends,
  /// now owned here) until they end.
  void add(pid_t pid, int out_fd, int err_fd);
  /// Forwards what is left (every writer is gone or going), then stops the thread.
  void stop();
  /// Also hands each process's complete lines, as written, to `sink` (on the
  /// forwarding thread; it must not block): a node of a cluster sends them to
  /// the driver whose task wrote them. Set before any process is added.
  using line_sink = std::function<void(pid_t pid, bool err, std::string_view lines)>;
  void set_sink(line_sink sink);
  /// Prints `lines` (whole lines, prefixed already) on stdout, or stderr
  /// (`err`), as workers' output is: bounded, never blocking. Any thread.
  void print(bool err, std::string lines);

 private:
  struct stream {
    pid_t pid = 0;
    bool err = false;
    std::string partial;  ///< bytes after the last newline
  };
  void run();
  /// Reads what `fd` has (its lines to `sink` too, if any); false at its end.
  bool forward(int fd, stream& s, const line_sink* sink);
  /// Appends complete lines for stdout (0) or stderr (1), or counts them dropped.
  void queue(int which, std::string&& lines);
  /// Writes what the driver's stdout and stderr take without blocking.
  /// @returns true if everything went out.
  bool write_pending();
  struct log_file {
    int fd = -1;  ///< -1: could not be opened
    std::size_t bytes = 0;
  };
  /// Appends what process `pid` wrote to its log file (opened at its first output).
  void keep(pid_t pid, const char* data, std::size_t n);
  /// Opens process `pid`'s log for appending, holding a shared flock on it.
  log_file open_log(pid_t pid) const;
  void close_log(log_file& log);
  /// Prunes log_dir if it was not pruned in the last few seconds.
  void prune_now_and_then();

  int epoll_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::mutex mu_;  // streams_
  std::unordered_map<int, stream> streams_;
  std::shared_ptr<const line_sink> sink_;  // under mu_
  std::string printed_[2];       ///< print's lines, until the forwarding thread queues them (under mu_)
  std::thread thread_;
  bool stopping_ = false;
  // Only the forwarding thread touches these.
  std::string pending_[2];
  std::size_t dropped_[2] = {0, 0};
  std::string log_dir_;
  log_limits limits_;
  std::unordered_map<pid_t, log_file> logs_;  ///< open log files by pid
  std::chrono::steady_clock::time_point last_prune_{};
};

}  // namespace manta::runtime

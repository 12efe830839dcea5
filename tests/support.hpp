// support.hpp: helpers shared by the tests: a runtime per test, bounded waits on
// real events, and checks that no process or segment is left behind.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <manta/detail/introspect.hpp>
#include <manta/manta.hpp>

namespace manta::testing {

/// Starts a runtime with `workers` workers for one test and shuts it down after,
/// checking that every process it started is gone.
class runtime_fixture : public ::testing::Test {
 protected:
  void start(int workers = 2, manta::options o = {});
  void TearDown() override;
  std::vector<int> pids_;
};

/// Parameterised by worker count.
class runtime_per_workers : public runtime_fixture, public ::testing::WithParamInterface<int> {
 protected:
  void SetUp() override { start(GetParam()); }
};

/// True if `pid` names a live (not zombie) process.
bool alive(pid_t pid);
/// True if `pid` names no process at all (neither live nor zombie).
bool gone(pid_t pid);
/// Polls `cond` until it holds or `limit` passes (for events with no handle to wait on,
/// like a process disappearing from /proc).
bool eventually(const std::function<bool()>& cond,
                std::chrono::milliseconds limit = std::chrono::seconds(10));
/// True if thread `tid` of this process sleeps in a futex wait (a blocked get).
bool blocked_in_futex(pid_t tid);
/// Names of entries in /dev/shm.
std::vector<std::string> shm_entries();
/// Open file descriptors of this process.
int open_fd_count();
/// Resident memory of this process, in bytes.
long resident_bytes();
/// Temporary path unique to this test process.
std::string temp_path(const std::string& stem);
/// Runs a shell command under timeout(1) (`limit_s` seconds); its stdout, and
/// its stderr too when `with_stderr`.
std::string shell_output(const std::string& cmd, int limit_s = 60, bool with_stderr = true);
/// The whole text of a file ("" if it cannot be read).
std::string file_text(const std::string& path);

/// Returned by an in_child body to say the test cannot run here.
inline const std::string skip_child = "SKIP";

/// How a child run by in_child ended.
struct child_result {
  bool finished = false;  ///< exited or died before the bound
  int status = 0;
  double seconds = 0;
  std::string report;  ///< what its body returned (empty: success)

  bool ok() const;
  bool skipped() const;
  std::string what() const;
};

/// Runs `body` in a forked child (which then _exits without running atexit
/// handlers): 0 if it returns "", 77 for skip_child, 1 with its text as the report
/// otherwise. Waits at most `limit`, then kills the child. For cases whose failure
/// is a crash or hang of the driver, or that change process-wide state.
child_result in_child(const std::function<std::string()>& body, std::chrono::milliseconds limit);

/// Waits at most `limit` for the child `pid` to end (its wait status in `status`);
/// past that, kills and reaps it. @returns whether it ended by itself.
bool reap_within(pid_t pid, std::chrono::milliseconds limit, int& status);

/// Time left until `until`, at least 1 ms (so a late get still returns at once).
std::chrono::milliseconds left(std::chrono::steady_clock::time_point until);
/// Seconds since `t0`.
double seconds_since(std::chrono::steady_clock::time_point t0);

/// A named pipe that holds a task or actor call back until the test lets it go:
/// the call runs `wait_at_gate(path)`, which returns once the test calls `open()`.
class fifo_gate {
 public:
  fifo_gate();
  ~fifo_gate();
  fifo_gate(const fifo_gate&) = delete;
  fifo_gate& operator=(const fifo_gate&) = delete;
  const std::string& path() const noexcept { return path_; }
  /// Lets the call waiting at the gate go; false if none arrived within `limit`.
  bool open(std::chrono::milliseconds limit = std::chrono::seconds(30)) const;

 private:
  std::string path_;
};
/// In a task or actor: returns once the test opens the gate at `path`.
/// @throws std::runtime_error if the pipe cannot be read.
void wait_at_gate(const std::string& path);

/// Sets MANTA_SILENCE_LIMIT_S for this scope (members made in it read it).
class silence_limit_of {
 public:
  explicit silence_limit_of(const char* seconds) {
    if (const char* was = std::getenv("MANTA_SILENCE_LIMIT_S")) before_ = was;
    ::setenv("MANTA_SILENCE_LIMIT_S", seconds, 1);
  }
  ~silence_limit_of() {
    if (before_.empty()) ::unsetenv("MANTA_SILENCE_LIMIT_S");
    else ::setenv("MANTA_SILENCE_LIMIT_S", before_.c_str(), 1);
  }

 private:
  std::string before_;
};

}  // namespace manta::testing

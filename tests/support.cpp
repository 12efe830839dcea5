// support.cpp: test helpers.
#include "support.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <stdexcept>
#include <thread>

namespace manta::testing {

namespace {
// A test that ctest kills at its TIMEOUT still shows what it printed (its
// failures so far): stdout into ctest's pipe is otherwise kept in a block buffer.
[[maybe_unused]] const bool stdout_line_buffered = std::setvbuf(stdout, nullptr, _IOLBF, 0) == 0;
}  // namespace

void runtime_fixture::start(int workers, manta::options o) {
  o.num_workers = workers;
  manta::init(o);
  pids_ = manta::detail::runtime_process_ids();
  ASSERT_EQ(pids_.size(), static_cast<std::size_t>(workers) + 1);
}

void runtime_fixture::TearDown() {
  manta::shutdown();
  // Shutdown reaps the zygote and the zygote reaps the workers: nothing remains, not even a zombie.
  for (int pid : pids_) EXPECT_TRUE(gone(pid)) << "pid " << pid << " outlived shutdown";
}

namespace {
char proc_state(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return 0;
  auto close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() ? 0 : line[close + 2];
}
}  // namespace

bool alive(pid_t pid) {
  char s = proc_state(pid);
  return s != 0 && s != 'Z' && s != 'X';
}

bool gone(pid_t pid) { return proc_state(pid) == 0; }

bool eventually(const std::function<bool()>& cond, std::chrono::milliseconds limit) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

bool blocked_in_futex(pid_t tid) {
  // "<syscall number> <args...>" while the thread is inside a system call.
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/syscall");
  long nr = -1;
  return (f >> nr) && nr == SYS_futex;
}

std::vector<std::string> shm_entries() {
  std::vector<std::string> out;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') out.emplace_back(e->d_name);
    ::closedir(d);
  }
  return out;
}

int open_fd_count() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ++n;
    ::closedir(d);
  }
  return n - 1;  // the directory stream itself
}

std::string temp_path(const std::string& stem) {
  return "/tmp/manta-test-" + std::to_string(::getpid()) + "-" + stem;
}

std::string shell_output(const std::string& cmd, int limit_s, bool with_stderr) {
  std::string out;
  FILE* p = ::popen(("timeout " + std::to_string(limit_s) + " " + cmd + (with_stderr ? " 2>&1" : "")).c_str(), "r");
  if (!p) return out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

std::string file_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

fifo_gate::fifo_gate() {
  static std::atomic<int> n{0};
  path_ = temp_path("gate-" + std::to_string(n++));
  ::unlink(path_.c_str());
  if (::mkfifo(path_.c_str(), 0600) != 0) throw std::runtime_error("mkfifo " + path_ + " failed");
}

fifo_gate::~fifo_gate() { ::unlink(path_.c_str()); }

bool fifo_gate::open(std::chrono::milliseconds limit) const {
  int fd = -1;  // a write end opens without blocking only once a reader waits
  if (!eventually([&] { return (fd = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK)) >= 0; }, limit))
    return false;
  bool ok = ::write(fd, "x", 1) == 1;
  ::close(fd);
  return ok;
}

void wait_at_gate(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  char c = 0;
  bool ok = fd >= 0 && ::read(fd, &c, 1) == 1;
  if (fd >= 0) ::close(fd);
  if (!ok) throw std::runtime_error("cannot read the gate " + path);
}

long resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  long size = 0, resident = 0;
  statm >> size >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

bool child_result::ok() const { return finished && WIFEXITED(status) && WEXITSTATUS(status) == 0; }
bool child_result::skipped() const { return finished && WIFEXITED(status) && WEXITSTATUS(status) == 77; }
std::string child_result::what() const {
  std::string how = "exited with status " + std::to_string(WEXITSTATUS(status));
  if (!finished) {
    how = "did not end within the bound (killed)";
  } else if (WIFSIGNALED(status)) {
    const char* abbrev = sigabbrev_np(WTERMSIG(status));
    how = std::string("died by SIG") + (abbrev ? abbrev : "?");
  }
  return how + " after " + std::to_string(seconds) + " s" + (report.empty() ? "" : ": " + report);
}

// The report travels in a file, not a pipe: the child's own children (zygote,
// workers) would inherit a pipe and hold it open.
child_result in_child(const std::function<std::string()>& body, std::chrono::milliseconds limit) {
  static int n = 0;
  const std::string report = temp_path("child-report-" + std::to_string(n++));
  ::unlink(report.c_str());
  std::fflush(nullptr);
  auto t0 = std::chrono::steady_clock::now();
  pid_t pid = ::fork();
  if (pid < 0) return {true, 0, 0, "fork failed"};
  if (pid == 0) {
    std::string out;
    try {
      out = body();
    } catch (const std::exception& e) {
      out = std::string("uncaught exception: ") + e.what();
    } catch (...) {
      out = "uncaught exception";
    }
    if (!out.empty()) std::ofstream(report) << out;
    ::_exit(out.empty() ? 0 : out == skip_child ? 77 : 1);
  }
  child_result r;
  r.finished = reap_within(pid, limit, r.status);
  r.seconds = seconds_since(t0);
  std::ifstream in(report);
  std::getline(in, r.report, '\0');
  ::unlink(report.c_str());
  return r;
}

bool reap_within(pid_t pid, std::chrono::milliseconds limit, int& status) {
  if (eventually([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, limit)) return true;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return false;
}

std::chrono::milliseconds left(std::chrono::steady_clock::time_point until) {
  using namespace std::chrono;
  return std::max(duration_cast<milliseconds>(until - steady_clock::now()), milliseconds(1));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace manta::testing

// support.cpp: test helpers.
#include "support.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <thread>

namespace manta::testing {

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

long resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  long size = 0, resident = 0;
  statm >> size >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

}  // namespace manta::testing

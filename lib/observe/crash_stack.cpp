// observe/crash_stack.cpp: writing the frames in the dying worker, naming them in the driver.
#include "observe/crash_stack.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <thread>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <boost/stacktrace.hpp>

namespace manta::observe {
namespace {

constexpr std::size_t max_frames = 64;
// Set before the handler is installed, read in it.
char dump_path[512] = {};
pid_t dump_pid = 0;                    ///< the worker's: a child it forked writes nothing
std::atomic<bool> dumping{false};      ///< two threads faulting at once: the first one writes
void* frames[max_frames + 1];

void on_fatal_signal(int sig) {
  // Only what is async-signal-safe: safe_dump_to walks the stack into memory
  // we own, then open and write. Then the signal, back to its default, ends
  // the process as it would have without us (the driver sees the same status).
  if (::getpid() == dump_pid && !dumping.exchange(true)) {
    std::size_t n = boost::stacktrace::safe_dump_to(1, frames, sizeof frames);  // ends with a 0
    ::unlink(dump_path);  // a stale one of an earlier process with this pid
    int fd = ::open(dump_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) {
      [[maybe_unused]] auto w = ::write(fd, frames, n * sizeof(void*));
      ::close(fd);
    }
  }
  ::raise(sig);
}

char stack_dir[448] = {};  ///< where threads asked for their stacks write them

/// Appends the decimal digits of `v` at `at` (async-signal-safe).
char* put_number(char* at, long v) {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v > 0);
  while (n > 0) *at++ = digits[--n];
  return at;
}

/// A thread asked for its stack (manta stack): it writes its frames to
/// dir/stack-<pid>-<tid>.raw (through a temporary name, so the file appears whole).
void on_stack_request(int) {
  if (::getpid() != dump_pid) return;
  const int saved_errno = errno;
  void* mine[max_frames + 1];
  std::size_t n = boost::stacktrace::safe_dump_to(0, mine, sizeof mine);
  char path[512], done[512];
  char* at = path;
  for (const char* s = stack_dir; *s;) *at++ = *s++;
  for (const char* s = "/stack-"; *s;) *at++ = *s++;
  at = put_number(at, dump_pid);
  *at++ = '-';
  at = put_number(at, static_cast<long>(::gettid()));
  for (const char* s = ".raw"; *s;) *at++ = *s++;
  *at = '\0';
  std::memcpy(done, path, static_cast<std::size_t>(at - path) + 1);
  for (const char* s = ".tmp"; *s;) *at++ = *s++;
  *at = '\0';
  int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd >= 0) {
    [[maybe_unused]] auto w = ::write(fd, mine, n * sizeof(void*));
    ::close(fd);
    ::rename(path, done);
  }
  errno = saved_errno;
}

std::vector<const void*> read_frames(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream raw;
  raw << in.rdbuf();
  const std::string bytes = raw.str();
  std::vector<const void*> frames(bytes.size() / sizeof(void*));
  std::memcpy(frames.data(), bytes.data(), frames.size() * sizeof(void*));
  while (!frames.empty() && !frames.back()) frames.pop_back();  // the dump ends with a 0
  return frames;
}

}  // namespace

int stack_request_signal() noexcept { return SIGRTMIN + 5; }

bool stack_requests_fit(const std::string& dir) noexcept { return dir.size() < sizeof stack_dir; }

void install_crash_handler(const std::string& dir) {
  if (dir.empty()) return;
  dump_pid = ::getpid();
  int n = std::snprintf(dump_path, sizeof dump_path, "%s/crash-%d.stack", dir.c_str(), static_cast<int>(dump_pid));
  if (n <= 0 || static_cast<std::size_t>(n) >= sizeof dump_path) return;
  static char alt[1 << 16];  // SIGSEGV from a stack overflow needs a stack of its own
  stack_t ss{};
  ss.ss_sp = alt;
  ss.ss_size = sizeof alt;
  ::sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  sa.sa_flags = SA_ONSTACK | SA_RESETHAND | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  // A handler the program installed before init (inherited through the forks) stays.
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL)
      ::sigaction(sig, &sa, nullptr);
  }
  if (stack_requests_fit(dir)) {
    std::memcpy(stack_dir, dir.c_str(), dir.size() + 1);
    struct sigaction ask {};
    ask.sa_handler = on_stack_request;
    ask.sa_flags = SA_RESTART;  // the thread goes on as it was
    sigemptyset(&ask.sa_mask);
    struct sigaction old {};
    if (::sigaction(stack_request_signal(), nullptr, &old) == 0 && !(old.sa_flags & SA_SIGINFO) &&
        old.sa_handler == SIG_DFL)
      ::sigaction(stack_request_signal(), &ask, nullptr);
  }
}

std::string describe_frames(const void* const* frames, std::size_t count, std::string_view stop_at,
                            bool first_is_exact) {
  std::string out;
  std::size_t shown = 0;
  auto frame_at = [](std::uintptr_t a) {
    return boost::stacktrace::frame(reinterpret_cast<boost::stacktrace::frame::native_frame_ptr_t>(a));
  };
  for (std::size_t i = 0; i < count; ++i) {
    // A return address follows its call, and may lie past the end of the
    // caller (a call that never returns, as a throw's, is often the last
    // instruction): it is looked up one byte back, inside the call. The
    // instruction a signal interrupted is looked up where it is (a stack
    // overflow faults on a function's first byte), and one back if that
    // names nothing (the kernel's trampoline, skipped below).
    const auto at = reinterpret_cast<std::uintptr_t>(frames[i]);
    const bool exact = first_is_exact && shown == 0;
    boost::stacktrace::frame f = frame_at(exact || at == 0 ? at : at - 1);
    std::string name = f.name();
    if (name.empty() && exact && at > 0) {
      f = frame_at(at - 1);
      name = f.name();
    }
    if (!stop_at.empty() && name.find(stop_at) != std::string::npos) break;
    if (shown == 0 && name.empty()) continue;  // the kernel's signal trampoline
    std::string file = f.source_file();
    out += "  #" + std::to_string(shown++) + " " + (name.empty() ? "??" : name);
    if (!file.empty()) out += " at " + file + ":" + std::to_string(f.source_line());
    out += "\n";
  }
  return out;
}

std::string name_of_address(const void* address) {
  return boost::stacktrace::frame(reinterpret_cast<boost::stacktrace::frame::native_frame_ptr_t>(address)).name();
}

std::string take_crash_stack(const std::string& dir, pid_t pid) {
  if (dir.empty()) return {};
  const std::string path = dir + "/crash-" + std::to_string(pid) + ".stack";
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::stringstream raw;
  raw << in.rdbuf();
  in.close();
  std::remove(path.c_str());
  const std::string bytes = raw.str();
  std::vector<const void*> frames(bytes.size() / sizeof(void*));
  std::memcpy(frames.data(), bytes.data(), frames.size() * sizeof(void*));
  while (!frames.empty() && !frames.back()) frames.pop_back();  // the dump ends with a 0
  // Below the worker's loop lie the zygote's fork and the driver's init: not the task's story.
  return describe_frames(frames.data(), frames.size(), "manta::process::run_worker", /*first_is_exact=*/true);
}

std::vector<thread_stack> collect_stacks(const std::string& dir, pid_t pid, std::chrono::milliseconds wait) {
  const std::string task_dir = "/proc/" + std::to_string(pid) + "/task";
  std::vector<thread_stack> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(task_dir, ec)) {
    thread_stack t;
    t.tid = static_cast<pid_t>(std::atol(entry.path().filename().c_str()));
    std::ifstream comm(entry.path() / "comm");
    std::getline(comm, t.name);
    out.push_back(std::move(t));
  }
  auto path_of = [&](pid_t tid) { return dir + "/stack-" + std::to_string(pid) + "-" + std::to_string(tid) + ".raw"; };
  for (const auto& t : out) {
    std::filesystem::remove(path_of(t.tid), ec);
    ::syscall(SYS_tgkill, pid, t.tid, stack_request_signal());
  }
  const auto until = std::chrono::steady_clock::now() + wait;
  std::size_t answered = 0;
  while (answered < out.size() && std::chrono::steady_clock::now() < until) {
    answered = 0;
    for (const auto& t : out) answered += std::filesystem::exists(path_of(t.tid), ec);
    if (answered < out.size()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (auto& t : out) {
    const std::string path = path_of(t.tid);
    if (!std::filesystem::exists(path, ec)) {
      t.frames = "  (no answer: the thread blocks the signal, or the process is stopped)\n";
      continue;
    }
    std::vector<const void*> frames = read_frames(path);
    std::filesystem::remove(path, ec);
    // Shown from the frame the signal interrupted: the handler's own go.
    std::size_t from = 0;
    for (std::size_t i = 0; i < frames.size(); ++i)
      if (name_of_address(frames[i]).find("on_stack_request") != std::string::npos) from = i + 1;
    t.frames = describe_frames(frames.data() + from, frames.size() - from, "manta::process::run_worker", false);
  }
  return out;
}

}  // namespace manta::observe

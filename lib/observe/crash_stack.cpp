// observe/crash_stack.cpp: writing the frames in the dying worker, naming them in the driver.
#include "observe/crash_stack.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>

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

}  // namespace

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

}  // namespace manta::observe

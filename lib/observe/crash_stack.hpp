// observe/crash_stack.hpp: the stack of a worker's crashing thread. A worker's
// handler for fatal signals writes the raw frames (async-signal-safely, with
// Boost.Stacktrace) to log_dir/crash-<pid>.stack and dies of the signal; the
// driver, seeing it die, reads the file, names the frames (the worker is a fork
// of the driver: same binary, same addresses) and removes it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace manta::observe {

/// Installs the handler for SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT and
/// SIGTRAP in this process (a worker), with an alternate stack so a stack
/// overflow is reported too, for each of them still at its default (the
/// program's own handlers stay). `dir` empty: nothing is installed.
void install_crash_handler(const std::string& dir);

/// Frames (return addresses of this process, innermost first) as text, one
/// "  #n function at file:line" per line, ending before the first frame whose
/// name contains `stop_at` (the runtime's frames below the user's code).
/// `first_is_exact`: the first frame shown is the address of the instruction a
/// signal interrupted (a crash's), not a return address.
std::string describe_frames(const void* const* frames, std::size_t count, std::string_view stop_at,
                            bool first_is_exact);

/// The demangled name of the function at `address` in this process (from the
/// symbol table, exported or not), or "" if none is known.
std::string name_of_address(const void* address);

/// The stack process `pid` wrote before it died, one "#n name at file:line"
/// per line, or "" if it wrote none; the file is removed.
std::string take_crash_stack(const std::string& dir, pid_t pid);

/// `manta stack`: a worker's threads each write their stack when sent this
/// signal (SIGRTMIN+5; installed with the crash handler, if at its default).
int stack_request_signal() noexcept;

/// Whether workers answer stack requests with `dir` as their log_dir (it fits
/// the handler's buffer for the file's path).
bool stack_requests_fit(const std::string& dir) noexcept;

/// One thread's stack, as collect_stacks names it.
struct thread_stack {
  pid_t tid = 0;
  std::string name;    ///< the thread's name (/proc/.../comm)
  std::string frames;  ///< "  #n function at file:line" lines, innermost first
};

/// Asks every thread of `pid` (a worker of this process's runtime, a fork of
/// this binary, so its addresses name the same functions here) for its stack,
/// and waits up to `wait` for them. Threads that did not answer (blocked with
/// the signal masked) are listed with frames "(no answer)".
std::vector<thread_stack> collect_stacks(const std::string& dir, pid_t pid, std::chrono::milliseconds wait);

}  // namespace manta::observe

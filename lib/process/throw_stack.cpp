// process/throw_stack.cpp: the hook on __cxa_throw, and naming what it kept.
//
// The executable's own __cxa_throw (this one, linked from the static library)
// is found before libstdc++'s; it records the stack when armed and calls the
// next definition (libstdc++'s, or a sanitizer's interceptor), found once at
// start-up so a throw of bad_alloc never has to look it up.
#include "process/throw_stack.hpp"

#include <dlfcn.h>

#include <cstdlib>

#include <boost/stacktrace/safe_dump_to.hpp>

#include "observe/crash_stack.hpp"

namespace manta::process {
namespace {

constexpr std::size_t max_frames = 48;

struct thrown {
  bool armed = false;
  const std::type_info* type = nullptr;
  std::size_t frames = 0;
  const void* at[max_frames];
};
thread_local thrown last;

// As the compiler declares it (the type_info comes as void*).
using cxa_throw_fn = void (*)(void*, void*, void (*)(void*));
cxa_throw_fn next_throw = reinterpret_cast<cxa_throw_fn>(::dlsym(RTLD_NEXT, "__cxa_throw"));

}  // namespace

void arm_throw_stacks() noexcept {
  last.armed = true;
  last.type = nullptr;
  last.frames = 0;
}

void disarm_throw_stacks() noexcept { last.armed = false; }

std::string take_throw_stack(const std::type_info* escaping) {
  if (!last.type || !escaping || *last.type != *escaping) return {};
  last.type = nullptr;
  if (last.frames < 2) return {};
  // Frame 0 is the hook itself; below run_task_body lies the runtime.
  return observe::describe_frames(last.at + 1, last.frames - 1, "manta::process::run_task_body");
}

}  // namespace manta::process

extern "C" [[noreturn]] void __cxa_throw(void* object, void* type, void (*destroy)(void*)) {
  using namespace manta::process;
  if (last.armed) {
    last.type = static_cast<const std::type_info*>(type);
    std::size_t n = boost::stacktrace::safe_dump_to(last.at, sizeof last.at);  // with a closing 0
    last.frames = n ? n - 1 : 0;
  }
  if (!next_throw) std::abort();  // no libstdc++: cannot happen in a C++ program
  next_throw(object, type, destroy);
  __builtin_unreachable();
}

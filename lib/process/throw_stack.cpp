// process/throw_stack.cpp: the hook on __cxa_throw, and naming what it kept.
//
// The executable's own __cxa_throw (this one, linked from the static library)
// is found before libstdc++'s; it records the stack when armed and calls the
// next definition (libstdc++'s, or a sanitizer's interceptor). That one is
// looked up as early as the program starts, and again at a throw that comes
// before (another library's static initialiser).
#include "process/throw_stack.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>

#include <boost/stacktrace/safe_dump_to.hpp>

#include "observe/crash_stack.hpp"

namespace manta::process {
namespace {

constexpr std::size_t max_frames = 48;

struct thrown {
  bool armed = false;
  const void* object = nullptr;  ///< what the last recorded throw threw
  std::size_t frames = 0;
  const void* at[max_frames];
};
thread_local thrown last;

// As the compiler declares it (the type_info comes as void*).
using cxa_throw_fn = void (*)(void*, void*, void (*)(void*));
std::atomic<cxa_throw_fn> next_throw{nullptr};

cxa_throw_fn find_next_throw() noexcept {
  auto f = reinterpret_cast<cxa_throw_fn>(::dlsym(RTLD_NEXT, "__cxa_throw"));
  next_throw.store(f, std::memory_order_relaxed);
  return f;
}

[[gnu::constructor(101)]] void look_up_next_throw() { find_next_throw(); }

/// The thrown object behind the exception being handled (libstdc++'s
/// exception_ptr holds exactly its address), or null.
const void* current_object() noexcept {
  std::exception_ptr p = std::current_exception();
  static_assert(sizeof p == sizeof(void*), "exception_ptr holds one pointer (libstdc++)");
  const void* object = nullptr;
  std::memcpy(&object, static_cast<const void*>(&p), sizeof object);
  return object;
}

}  // namespace

throw_recording::throw_recording() noexcept : was_armed_(last.armed) {
  last.armed = true;
  last.object = nullptr;
  last.frames = 0;
}

throw_recording::~throw_recording() { last.armed = was_armed_; }

void throw_recording::stop() noexcept { last.armed = false; }

std::string take_throw_stack() {
  const void* object = current_object();
  if (!object || last.object != object || last.frames < 2) return {};
  last.object = nullptr;
  // Frame 0 is the hook itself; below run_task_body lies the runtime.
  return observe::describe_frames(last.at + 1, last.frames - 1, "manta::process::run_task_body",
                                  /*first_is_exact=*/false);
}

}  // namespace manta::process

extern "C" [[noreturn]] void __cxa_throw(void* object, void* type, void (*destroy)(void*)) {
  using namespace manta::process;
  if (last.armed) {
    last.object = object;
    std::size_t n = boost::stacktrace::safe_dump_to(last.at, sizeof last.at);  // with a closing 0
    last.frames = n ? n - 1 : 0;
  }
  cxa_throw_fn next = next_throw.load(std::memory_order_relaxed);
  if (!next) next = find_next_throw();
  if (!next) std::abort();  // no C++ runtime below us: cannot happen in a C++ program
  next(object, type, destroy);
  __builtin_unreachable();
}

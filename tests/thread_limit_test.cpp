// When the machine will not start another thread (its thread limit), init
// fails saying so and leaves nothing running: the threads the runtime
// started stop, its processes end, and the program goes on. The limit is
// made real here by this executable's own pthread_create, which the
// runtime's std::thread calls resolve to (it interposes libc's), refusing
// every new thread of the main thread once the runtime's I/O thread runs.
#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include <gtest/gtest.h>
#include <manta/manta.hpp>

#include "support.hpp"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
// The sanitizers intercept pthread_create themselves: no second interposer.
constexpr bool can_refuse_threads = false;
#else
constexpr bool can_refuse_threads = true;

namespace {
std::atomic<bool> refusing{false};  ///< refuse the main thread's new threads once manta-io runs

/// Whether a thread of this process is named `name`.
bool thread_named(const char* name) {
  const std::string want = std::string(name) + "\n";
  return manta::testing::shell_output("cat /proc/" + std::to_string(::getpid()) + "/task/*/comm 2>/dev/null")
             .find(want) != std::string::npos;
}
}  // namespace

extern "C" int pthread_create(pthread_t* thread, const pthread_attr_t* attr, void* (*start)(void*), void* arg) {
  using real_t = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  static real_t real = reinterpret_cast<real_t>(::dlsym(RTLD_NEXT, "pthread_create"));
  if (refusing.load() && ::gettid() == ::getpid() && thread_named("manta-io")) return EAGAIN;
  const int r = real(thread, attr, start, arg);
  if (r == 0 && refusing.load() && ::gettid() == ::getpid()) {
    // Until the new thread has named itself (the runtime's threads do so
    // first), so the next call knows whether the I/O thread runs. Bounded.
    char mine[16] = {}, its[16] = {};
    ::pthread_getname_np(::pthread_self(), mine, sizeof mine);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (std::chrono::steady_clock::now() < until && ::pthread_getname_np(*thread, its, sizeof its) == 0 &&
           std::strcmp(mine, its) == 0)
      ::usleep(1000);
  }
  return r;
}
#endif

namespace {

using namespace std::chrono_literals;

TEST(thread_limit, init_fails_saying_why_when_a_thread_cannot_start_and_leaves_nothing_running) {
  if (!can_refuse_threads) GTEST_SKIP() << "the sanitizers intercept pthread_create";
  auto r = manta::testing::in_child(
      []() -> std::string {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
        refusing = true;
#endif
        try {
          // (The memory monitor's thread starts after the I/O thread's.)
          manta::init({.num_workers = 2, .memory_threshold = 0.99});
          return "init succeeded although no thread could start after the I/O thread";
        } catch (const manta::error& e) {
          if (std::string(e.what()).find("could not start its threads") == std::string::npos)
            return std::string("the error does not say why: ") + e.what();
        }
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
        refusing = false;
#endif
        // Its processes (the zygote and its workers) ended with it: stop waited for them.
        // (The listing's own shell and ps are this process's children too.)
        const std::string children = manta::testing::shell_output(
            "ps -o comm= --ppid " + std::to_string(::getpid()) + " | grep -v -x -e sh -e ps || true");
        if (children.find_first_not_of(" \n") != std::string::npos)
          return "processes of the failed runtime are left: " + children;
        // The program goes on: a runtime starts again and works.
        manta::init({.num_workers = 2});
        const bool works = manta::get(manta::put(41)) == 41;
        manta::shutdown();
        return works ? "" : "a second runtime did not work";
      },
      60s);
  EXPECT_TRUE(r.ok()) << r.what();
}

}  // namespace

// regression_limits_test: defects 9-11 found in review (limits of the machine and
// smaller ones; regression_test has 1-8): one or more cases per defect, each with real
// processes through the public API. Every wait is bounded, so a hang fails the
// test instead of stalling it; where the failure mode is a crash or hang of the
// driver itself (or the case changes process-wide state), the driver runs in a
// forked child that the test waits for with a bound and kills when it passes.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <numeric>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support.hpp"

namespace {
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using manta::testing::runtime_fixture;
using manta::testing::temp_path;
using manta::testing::in_child;
using manta::testing::left;
using manta::testing::seconds_since;
using manta::testing::skip_child;

// ---- helpers

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
// AddressSanitizer keeps freed memory in quarantine, ThreadSanitizer shadows
// every byte: resident size grows by design.
constexpr bool resident_size_is_meaningful = false;
#else
constexpr bool resident_size_is_meaningful = true;
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
// Sanitizer runtimes need descriptors of their own (UBSan opens a pipe to test
// memory before reporting): tests that leave none skip under them.
constexpr bool sanitizers_need_descriptors = true;
#else
constexpr bool sanitizers_need_descriptors = false;
#endif
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
// The sanitizers run this code several times slower (ThreadSanitizer ten times
// or more): long tests do a tenth of their work there (still far past every
// limit they test; what they measure of memory is measured without them).
constexpr int scale_down = 10;
#else
constexpr int scale_down = 1;
#endif

// ---- remote functions and actors

int plus(int a, int b) { return a + b; }
int crash_always(int sig) {
  ::raise(sig);
  return 0;
}
int boom(int) { throw std::runtime_error("first link fails"); }
int inc(int x) { return x + 1; }
double half(int x) { return x * 0.5; }

int print_64k(int i) {
  std::string line(65535, 'x');
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
  return i;
}

/// Writes `mib` MiB to stdout with no newline anywhere.
int print_without_newline(int mib) {
  std::string chunk(1 << 20, 'y');
  for (int i = 0; i < mib; ++i)
    for (std::size_t done = 0; done < chunk.size();) {
      ssize_t n = ::write(STDOUT_FILENO, chunk.data() + done, chunk.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return -1;
      done += static_cast<std::size_t>(n);
    }
  return mib;
}

manta::buffer<double> big_buffer(std::size_t n) {
  auto b = manta::make_buffer<double>(n);
  std::fill(b.begin(), b.end(), 3.0);
  return b;
}

MANTA_REMOTE(plus, crash_always, boom, inc, half, print_64k, print_without_newline, big_buffer);

struct Tiny {
  int pid() const { return static_cast<int>(::getpid()); }
  std::size_t add(std::vector<char> a, int b) { return a.size() + static_cast<std::size_t>(b); }
};
MANTA_ACTOR(Tiny, &Tiny::pid, &Tiny::add);

/// A value holding a ref to the previous one: a linked list through the store.
struct Node {
  manta::object_ref<Node> prev;
  int depth = 0;
  template <class A>
  void serialize(A& a) {
    a(prev, depth);
  }
};

/// An actor whose process cannot start another thread: its constructor caps the
/// address space just above what the process maps, so no thread stack fits.
struct Cramped {
  Cramped() {
    std::ifstream status("/proc/self/status");
    std::string key;
    long kib = 0;
    while (status >> key && key != "VmSize:") status.ignore(1 << 10, '\n');
    status >> kib;
    rlimit cap{static_cast<rlim_t>(kib + 2048) << 10, RLIM_INFINITY};
    ::setrlimit(RLIMIT_AS, &cap);
  }
  int pid() const { return static_cast<int>(::getpid()); }
};
MANTA_ACTOR(Cramped, &Cramped::pid);

/// Runs the test regression_helper.`role`_child of this binary in a fresh process
/// (exec'd: nothing inherited from the tests before it, unlike a fork) with
/// MANTA_REGRESSION_CHILD=`role` and `env` set, its stderr in `log`; waits at most
/// 30 s. @returns whether it ended, and its status.
std::pair<bool, int> run_helper(const std::string& role, const std::string& log,
                                std::vector<std::pair<std::string, std::string>> env = {}) {
  std::fflush(nullptr);
  pid_t child = ::fork();
  if (child == 0) {
    int out = ::open("/dev/null", O_WRONLY);
    int err = ::open(log.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    ::setenv("MANTA_REGRESSION_CHILD", role.c_str(), 1);
    const std::string filter = "--gtest_filter=regression_helper." + role + "_child";
    ::execl("/proc/self/exe", "regression_limits_test", filter.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  const bool ended = manta::testing::reap_within(child, 30s, status);
  return {ended, status};
}

/// In a helper test: whether this process runs as the child for `role`.
bool is_helper_for(const std::string& role) {
  const char* r = std::getenv("MANTA_REGRESSION_CHILD");
  return r && role == r;
}

std::string read_file(const std::string& path) { return manta::testing::file_text(path); }

class regression : public runtime_fixture {};

// ---- 9. Hundreds of processes

// Defect 9: with the usual soft limit of 1024 descriptors (4 per process in the
// driver), spawn requests were dropped (the zygote's socket full) and descriptors
// ran out: calls hung. The fix raises the soft limit at init. (With requests not
// dropped, 280 of them answer in about 0.1 s here: 30 s is a generous bound.)
TEST(regression_process, three_hundred_actors_all_answer) {
  auto r = in_child(
      []() -> std::string {
        rlimit lim{};
        ::getrlimit(RLIMIT_NOFILE, &lim);
        // 300 actors take about 1,200 descriptors: a hard limit below that is the
        // case of actors_beyond_the_descriptor_limit_fail_clearly, not this one.
        if (lim.rlim_max < 2048) return skip_child;
        lim.rlim_cur = 1024;
        if (::setrlimit(RLIMIT_NOFILE, &lim) != 0)
          return std::string("setrlimit: ") + std::strerror(errno);
        manta::init({.num_workers = 2});
        auto t0 = clock_type::now();
        const auto until = t0 + 30s;
        std::vector<manta::actor_handle<Tiny>> actors;
        std::vector<manta::object_ref<int>> pids;
        for (int i = 0; i < 300; ++i) {
          actors.push_back(manta::actor<Tiny>().remote());
          pids.push_back(actors.back().task(&Tiny::pid).remote());
        }
        std::set<int> distinct;
        for (int i = 0; i < 300; ++i) {
          try {
            distinct.insert(manta::get(pids[i], left(until)));
          } catch (const manta::error& e) {
            return "actor " + std::to_string(i) + " after " + std::to_string(seconds_since(t0)) +
                   " s: " + e.what();
          }
        }
        if (distinct.size() != 300)
          return std::to_string(distinct.size()) + " distinct pids of 300";
        actors.clear();
        manta::shutdown();
        return "";
      },
      45s);
  if (r.skipped()) GTEST_SKIP() << "the hard open-file limit is below 2048";
  EXPECT_TRUE(r.ok()) << r.what();
}

// Defects 9 and 11 (a spawn that cannot happen; an exception escaping the
// zygote's loop): with a hard limit of 48 descriptors, actors that cannot get a
// process fail with an error saying why; a pipe the zygote could not create used
// to throw out of its loop, unwinding into the program's main in the zygote.
TEST(regression_process, actors_beyond_the_descriptor_limit_fail_clearly) {
  if (sanitizers_need_descriptors) GTEST_SKIP() << "needs the descriptors a sanitizer runtime takes";
  auto r = in_child(
      []() -> std::string {
        rlimit low{48, 48};
        if (::setrlimit(RLIMIT_NOFILE, &low) != 0) return std::string("setrlimit: ") + std::strerror(errno);
        const pid_t me = ::getpid();
        manta::init({.num_workers = 2});
        if (::getpid() != me) ::_exit(97);  // a second copy of main: an exception unwound out of the zygote
        const auto until = clock_type::now() + 30s;
        std::vector<manta::actor_handle<Tiny>> actors;
        for (int i = 0; i < 30; ++i) actors.push_back(manta::actor<Tiny>().remote());
        int answered = 0, refused = 0;
        for (auto& a : actors) {
          try {
            manta::get(a.task(&Tiny::pid).remote(), left(until));
            ++answered;
          } catch (const manta::actor_died_error& e) {
            if (std::string(e.what()).find("open-file limit") == std::string::npos)
              return std::string("an unclear refusal: ") + e.what();
            ++refused;
          } catch (const manta::error& e) {
            return std::string("not actor_died_error: ") + e.what();
          }
        }
        if (refused == 0) return "no actor was refused: the limit did not bite";
        if (answered == 0) return "no actor answered";
        actors.clear();
        if (manta::get(manta::task(plus).remote(2, 3), left(until)) != 5) return "the pool broke";
        manta::shutdown();
        return "";
      },
      45s);
  EXPECT_TRUE(r.ok()) << r.what();
}

// Defect 9, a pool that cannot start: with a hard limit of 12 descriptors the
// zygote cannot make a worker's pipes. init used to wait 10 s and say "timed
// out"; it fails at once saying why, leaves no process behind, and fails the
// same way when called again.
TEST(regression_process, init_says_why_no_worker_could_start) {
  if (sanitizers_need_descriptors) GTEST_SKIP() << "needs the descriptors a sanitizer runtime takes";
  auto r = in_child(
      []() -> std::string {
        rlimit low{12, 12};
        if (::setrlimit(RLIMIT_NOFILE, &low) != 0) return std::string("setrlimit: ") + std::strerror(errno);
        for (int attempt = 0; attempt < 2; ++attempt) {
          const auto t0 = clock_type::now();
          try {
            manta::init({.num_workers = 2});
            return "init succeeded with 12 descriptors";
          } catch (const manta::error& e) {
            if (!std::strstr(e.what(), "open-file limit")) return std::string("an unclear error: ") + e.what();
          }
          if (seconds_since(t0) > 5) return "init took " + std::to_string(seconds_since(t0)) + " s to fail";
          if (::waitpid(-1, nullptr, WNOHANG) != -1 || errno != ECHILD) return "a process was left behind";
        }
        return "";
      },
      30s);
  EXPECT_TRUE(r.ok()) << r.what();
}

// Defect 9, the pool lost after init: with no descriptor left in the driver, the
// workers that crash cannot be replaced. What waits, and every later call, fails
// with node_died_error saying why, instead of waiting for a pool that never comes.
TEST(regression_process, a_pool_that_cannot_be_replaced_fails_with_node_died) {
  if (sanitizers_need_descriptors) GTEST_SKIP() << "needs the descriptors a sanitizer runtime takes";
  auto r = in_child(
      []() -> std::string {
        manta::init({.num_workers = 2});
        if (manta::get(manta::task(plus).remote(1, 2), 10s) != 3) return "wrong sum";
        rlimit old{};
        ::getrlimit(RLIMIT_NOFILE, &old);
        rlimit none{3, old.rlim_max};  // every descriptor the driver has is above it
        if (::setrlimit(RLIMIT_NOFILE, &none) != 0) return std::string("setrlimit: ") + std::strerror(errno);
        std::vector<manta::object_ref<int>> crashes;
        for (int i = 0; i < 2; ++i) crashes.push_back(manta::task(crash_always).max_retries(0).remote(SIGKILL));
        auto waiting = manta::task(plus).remote(2, 3);
        for (auto& c : crashes) {
          try {
            manta::get(c, 10s);
            return "a crashing task returned";
          } catch (const manta::worker_crashed_error&) {
          }
        }
        for (int round = 0; round < 2; ++round) {
          try {
            manta::get(round == 0 ? waiting : manta::task(plus).remote(2, 3), 10s);
            return "a task ran with no worker";
          } catch (const manta::node_died_error& e) {
            if (!std::strstr(e.what(), "open-file limit")) return std::string("an unclear error: ") + e.what();
          } catch (const manta::error& e) {
            return std::string("not node_died_error: ") + e.what();
          }
        }
        manta::shutdown();
        ::setrlimit(RLIMIT_NOFILE, &old);
        manta::init({.num_workers = 2});
        if (manta::get(manta::task(plus).remote(1, 2), 10s) != 3) return "wrong sum after a new init";
        manta::shutdown();
        return "";
      },
      30s);
  EXPECT_TRUE(r.ok()) << r.what();
}

// ---- 10. A /dev/shm smaller than the arena

// Defect 10: the arena was sized and written without checking that /dev/shm can
// back it: with a small /dev/shm the driver died of SIGBUS instead of spilling or
// failing with object_store_full. (On an empty 64 MiB /dev/shm the 64 MiB minimum
// arena just fits; with part of it used by another program, it does not.)
TEST(regression_process, a_small_dev_shm_is_no_sigbus) {
  const std::string dir = temp_path("small-shm");
  auto r = in_child(
      [&]() -> std::string {
        if (::unshare(CLONE_NEWNS) != 0)
          return errno == EPERM ? skip_child : std::string("unshare: ") + std::strerror(errno);
        if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
          return std::string("mount private: ") + std::strerror(errno);
        if (::mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=64m") != 0)
          return errno == EPERM ? skip_child : std::string("mount tmpfs: ") + std::strerror(errno);
        // Another program's 16 MiB of shared memory: 48 MiB are left.
        {
          std::ofstream other("/dev/shm/another-program", std::ios::binary);
          std::string mib(1 << 20, 'o');
          for (int i = 0; i < 16; ++i) other << mib;
          if (!other) return "cannot write /dev/shm/another-program";
        }
        manta::init({.num_workers = 2, .log_dir = dir});
        constexpr std::size_t n50 = (50 << 20) / sizeof(double);
        std::vector<manta::object_ref<std::vector<double>>> refs;
        try {
          for (int i = 0; i < 4; ++i) refs.push_back(manta::put(std::vector<double>(n50, i)));
        } catch (const manta::object_store_full&) {
        }
        for (std::size_t i = 0; i < refs.size(); ++i)
          if (manta::get(refs[i], 10s)[n50 - 1] != double(i)) return "a put value came back wrong";
        try {
          auto b = manta::get(manta::task(big_buffer).remote(n50), 20s);
          if (b.size() != n50 || b.back() != 3.0) return "the task's buffer came back wrong";
        } catch (const manta::object_store_full&) {
        }
        refs.clear();
        manta::shutdown();
        return "";
      },
      40s);
  std::filesystem::remove_all(dir);
  if (r.skipped()) GTEST_SKIP() << "no permission to mount a tmpfs";
  EXPECT_TRUE(r.ok()) << r.what();
}

// ---- 11. Smaller ones

// Defect 11a: get_actor right after creating a named actor sometimes failed with
// "is a type#0": the name is taken at submission, but the actor's class recorded
// only once the submission is taken in, which is later when another thread holds
// the scheduler at that moment (here threads streaming small tasks). The actors
// wait for a resource another actor holds, so none of them starts a process.
TEST_F(regression, get_actor_right_after_creation) {
  start(2, {.resources = {{"token", 1}}});
  auto holder = manta::actor<Tiny>().resources({{"token", 1}}).remote();
  ASSERT_GT(manta::get(holder.task(&Tiny::pid).remote(), 10s), 0);
  std::atomic<bool> stop{false};
  std::atomic<int> batches{0};
  std::vector<std::thread> busy;
  for (int b = 0; b < 2; ++b)
    busy.emplace_back([&] {
      while (!stop.load()) {
        std::vector<manta::object_ref<int>> refs;
        for (int i = 0; i < 100; ++i) refs.push_back(manta::task(plus).remote(i, 1));
        try {
          manta::get(refs, 10s);
          ++batches;
        } catch (const manta::error&) {
        }
      }
    });
  EXPECT_TRUE(manta::testing::eventually([&] { return batches.load() > 0; }));
  // Cheap (no process per actor, about 3 us a try) and rare per try: tried for 3 s.
  const auto until = clock_type::now() + 3s;
  int failures = 0, tries = 0;
  std::string first;
  for (; clock_type::now() < until; ++tries) {
    const std::string name = "fresh-" + std::to_string(tries);
    auto made = manta::actor<Tiny>().name(name).resources({{"token", 1}}).remote();
    try {
      auto found = manta::get_actor<Tiny>(name);
      if (!(found == made) && failures++ == 0) first = name + ": another handle";
    } catch (const manta::error& e) {
      if (failures++ == 0) first = name + ": " + e.what();
    }
    manta::kill(made);
  }
  stop = true;
  for (auto& b : busy) b.join();
  EXPECT_EQ(failures, 0) << failures << " of " << tries << " lookups failed; first: " << first;
}

// Defect 11b: worker output was written to the driver's stdout under the poll
// lock: with stdout blocked, no result was handled any more.
TEST(regression_process, a_blocked_driver_stdout_does_not_stall_results) {
  auto r = in_child(
      []() -> std::string {
        int p[2];
        if (::pipe(p) != 0) return "pipe";
        ::fcntl(p[1], F_SETFL, O_NONBLOCK);
        std::string fill(4096, 'f');
        while (::write(p[1], fill.data(), fill.size()) > 0) {
        }
        ::fcntl(p[1], F_SETFL, 0);  // writes block from now on; nobody ever reads p[0]
        ::dup2(p[1], STDOUT_FILENO);
        manta::init({.num_workers = 2});
        const auto until = clock_type::now() + 15s;
        std::vector<manta::object_ref<int>> refs;
        for (int i = 0; i < 50; ++i) refs.push_back(manta::task(print_64k).remote(i));
        for (int i = 0; i < 50; ++i) {
          try {
            if (manta::get(refs[i], left(until)) != i) return "wrong result";
          } catch (const manta::error& e) {
            return "result " + std::to_string(i) + ": " + e.what();
          }
        }
        return "";  // no shutdown: it would forward output to the blocked stdout
      },
      20s);
  EXPECT_TRUE(r.ok()) << r.what();
}

// Defect 11c: worker output without a newline piled up in the driver (and was
// rescanned for a newline on every read): 200 MB of it took 200 MB and more.
TEST(regression_process, output_without_newlines_is_not_accumulated) {
  auto r = in_child(
      []() -> std::string {
        int devnull = ::open("/dev/null", O_WRONLY);
        ::dup2(devnull, STDOUT_FILENO);
        manta::init({.num_workers = 1});
        manta::get(manta::task(plus).remote(0, 0), 10s);
        const long before = manta::testing::resident_bytes();
        std::string err;
        try {
          // Under the sanitizers a tenth: the growth is only measured without them.
          const int mib = 200 / scale_down;
          if (manta::get(manta::task(print_without_newline).remote(mib), 30s) != mib)
            err = "the write failed";
        } catch (const manta::error& e) {
          err = e.what();
        }
        const long grown = manta::testing::resident_bytes() - before;
        if (resident_size_is_meaningful && grown > (32l << 20))
          err += " driver grew by " + std::to_string(grown >> 20) + " MiB";
        if (!err.empty()) return err;
        manta::shutdown();
        return "";
      },
      40s);
  EXPECT_TRUE(r.ok()) << r.what();
}

// Defect 11 (an exception escaping a loop), the worker's side: a threaded actor
// whose process cannot start its executor threads throws out of the worker loop.
// It must end that process (the actor dies, saying so), never unwind into the
// zygote's fork and on into a second copy of the program's main.
TEST(regression_process, an_exception_out_of_the_worker_loop_ends_only_that_process) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "sanitizer runtimes reserve address space far beyond the cap";
#endif
  // In a fresh process: one forked from this test binary after other tests
  // inherits their heap, whose trimming can free room under the cap later.
  const std::string log = temp_path("worker-loop-log");
  auto [ended, status] = run_helper("worker_loop", log);
  const std::string text = read_file(log);
  ::unlink(log.c_str());
  ASSERT_TRUE(ended) << "the child did not end";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status << "\n" << text;
  EXPECT_NE(text.find("cannot start executor thread"), std::string::npos) << text;
}

// Run only by the test above, in a process of its own.
TEST(regression_helper, worker_loop_child) {
  if (!is_helper_for("worker_loop")) GTEST_SKIP() << "runs only as a child of an_exception_out_of_the_worker_loop_...";
  const pid_t me = ::getpid();
  manta::init({.num_workers = 2});
  ASSERT_EQ(::getpid(), me) << "a second copy of main";
  // 64 threads: glibc reuses cached stacks of ended threads (a few) without a
  // new mapping; the rest need one, which the cap refuses.
  auto cramped = manta::actor<Cramped>().max_concurrency(64).remote();
  EXPECT_THROW(manta::get(cramped.task(&Cramped::pid).remote(), 10s), manta::actor_died_error);
  ASSERT_EQ(::getpid(), me) << "a second copy of main";
  EXPECT_EQ(manta::get(manta::task(plus).remote(2, 3), 10s), 5) << "the pool broke";
  cramped = {};
  manta::shutdown();
}

// Defect 11d: pool::map kept every chunk's result pinned until the whole map was
// done, so results larger than the arena failed with object_store_full instead of
// spilling.
TEST(regression_process, pool_map_results_larger_than_the_arena) {
  const std::string dir = temp_path("pool-spill");
  auto r = in_child(
      [&]() -> std::string {
        manta::init({.num_workers = 2, .object_store_bytes = 64 << 20, .log_dir = dir});
        // 4 MB of results per chunk, 160 MB in all: well over the 64 MiB arena.
        constexpr std::size_t per_chunk = 500000, chunks = 40;
        std::vector<int> xs(per_chunk * chunks);
        std::iota(xs.begin(), xs.end(), 0);
        auto out = manta::pool{}.map(half, xs, per_chunk);
        if (out.size() != xs.size()) return "size " + std::to_string(out.size());
        for (std::size_t i = 0; i < out.size(); i += 9973)
          if (out[i] != xs[i] * 0.5) return "wrong value at " + std::to_string(i);
        manta::shutdown();
        return "";
      },
      40s);
  std::filesystem::remove_all(dir);
  EXPECT_TRUE(r.ok()) << r.what();
}

// Defect 11e: a failure was copied into every dependent with the whole chain of
// names so far: a chain of 20,000 took memory quadratic in its length.
TEST(regression_process, a_long_failing_chain_costs_linear_memory) {
  auto r = in_child(
      []() -> std::string {
        manta::init({.num_workers = 2});
        const long before = manta::testing::resident_bytes();
        const auto until = clock_type::now() + 30s;
        std::vector<manta::object_ref<int>> chain{manta::task(boom).remote(0)};
        for (int i = 1; i < 20000 / scale_down; ++i) chain.push_back(manta::task(inc).remote(chain.back()));
        for (std::size_t i = 0; i < chain.size(); ++i) {
          try {
            manta::get(chain[i], left(until));
            return "link " + std::to_string(i) + " did not fail";
          } catch (const manta::task_error&) {
          } catch (const manta::error& e) {
            return "link " + std::to_string(i) + ": " + e.what();
          }
        }
        const long grown = manta::testing::resident_bytes() - before;
        if (resident_size_is_meaningful && grown > (100l << 20))
          return "driver grew by " + std::to_string(grown >> 20) + " MiB";
        chain.clear();
        manta::shutdown();
        return "";
      },
      45s);
  EXPECT_TRUE(r.ok()) << r.what();
}

// Defect 11f: releasing a ref released what its object held, recursively, one
// stack frame per level: dropping the head of a long chain overflowed the stack.
TEST(regression_process, dropping_a_deeply_nested_ref) {
  auto r = in_child(
      []() -> std::string {
        manta::init({.num_workers = 1});
        manta::object_ref<Node> head;
        for (int i = 0; i < 200000; ++i) head = manta::put(Node{head, i});
        if (manta::get(head, 10s).depth != 199999) return "wrong head";
        head = {};
        if (!manta::testing::eventually([] { return manta::detail::object_count() == 0; }, 10s))
          return std::to_string(manta::detail::object_count()) + " objects left";
        manta::shutdown();
        return "";
      },
      30s);
  EXPECT_TRUE(r.ok()) << r.what();
}

// Defect 11g: MANTA_LOG=debug printed nothing in Release builds (debug lines were
// compiled out). The check runs in a fresh process (the level is read once).
TEST(regression_process, manta_log_debug_prints_debug_lines) {
  const std::string log = temp_path("debug-log");
  auto [ended, status] = run_helper("debug_log", log, {{"MANTA_LOG", "debug"}});
  const std::string text = read_file(log);
  ::unlink(log.c_str());
  ASSERT_TRUE(ended) << "the child did not end";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status << "\n" << text;
  EXPECT_NE(text.find(" debug] worker pid"), std::string::npos) << "no debug line in:\n" << text;
}

// Run only by the test above, in a process of its own: a worker dies, which the
// runtime logs at debug level.
TEST(regression_helper, debug_log_child) {
  if (!is_helper_for("debug_log")) GTEST_SKIP() << "runs only as a child of manta_log_debug_prints_debug_lines";
  manta::init({.num_workers = 1});
  EXPECT_THROW(manta::get(manta::task(crash_always).max_retries(0).remote(SIGKILL), 10s),
               manta::worker_crashed_error);
  manta::shutdown();
}

}  // namespace

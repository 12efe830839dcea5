// regression_process_test: defects found in review whose failure is a crash or
// hang of the driver itself, or that change process-wide state (SIGCHLD,
// descriptors, fork, shutdown): the driver runs in a forked child that the test
// waits for with a bound (manta::testing::in_child). Split from
// regression_test, whose numbered sections they keep.
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
using manta::testing::temp_path;
using manta::testing::in_child;
using manta::testing::left;
using manta::testing::seconds_since;

// ---- helpers

/// Writes `bytes` into every pipe this process may write to besides stdout and
/// stderr (its pipe to the driver among them), as a corrupt or hostile worker would.
void write_to_every_pipe(const void* bytes, std::size_t size) {
  for (int f = 3; f < 1024; ++f) {
    int flags = ::fcntl(f, F_GETFL);
    struct stat st{};
    if (flags < 0 || (flags & O_ACCMODE) != O_WRONLY || ::fstat(f, &st) != 0 ||
        !S_ISFIFO(st.st_mode))
      continue;
    [[maybe_unused]] auto n = ::write(f, bytes, size);
  }
}

/// True the first time it is called for `marker` (in any process).
bool first_time(const std::string& marker) {
  int fd = ::open(marker.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

int plus(int a, int b) { return a + b; }
int slow(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
int crash_always(int sig) {
  ::raise(sig);
  return 0;
}

/// The first time: writes a `block` frame whose id count is 0xffffffff (and no ids).
int send_huge_block_count(std::string marker) {
  if (first_time(marker)) {
    struct {
      std::uint32_t size = 16;
      std::uint16_t type = 23;  // msg::block
      std::uint16_t flags = 0;
      std::uint64_t task_key = 0;
      std::uint32_t needed = 1;
      std::uint32_t count = 0xffffffffu;
    } frame;
    static_assert(sizeof frame == 24);
    write_to_every_pipe(&frame, sizeof frame);
  }
  return 7;
}

/// The first time: writes a `task_done` for task key 1 (the first task of a fresh
/// runtime: this one) whose result claims 0xffffffff contained ids.
int send_huge_contained_count(std::string marker) {
  if (first_time(marker)) {
    char frame[8 + 24] = {};
    std::uint32_t size = 8 + 1 + 8 + 4;
    std::uint16_t type = 16;  // msg::task_done
    std::uint64_t key = 1, ns = 0;
    std::uint8_t ok = 1;
    std::uint32_t count = 0xffffffffu;
    std::memcpy(frame, &size, 4);
    std::memcpy(frame + 4, &type, 2);
    std::memcpy(frame + 8, &key, 8);
    std::memcpy(frame + 16, &ok, 1);
    std::memcpy(frame + 17, &ns, 8);
    std::memcpy(frame + 25, &count, 4);
    write_to_every_pipe(frame, sizeof frame);
  }
  return 7;
}

int to_stderr(int i) {
  std::fprintf(stderr, "line %d from a task\n", i);
  return i;
}
int print_64k(int i) {
  std::string line(65535, 'x');
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
  return i;
}

MANTA_REMOTE(plus, slow, crash_always, send_huge_block_count, send_huge_contained_count, print_64k, to_stderr);

/// Two halves read with a pause between them: the second half is read from the
/// object store after the test shut the runtime down during the pause.
struct TwoHalves {
  std::vector<double> first, second;
  static inline std::atomic<bool> reading{false}, go_on{false};
  template <class A>
  void save(A& a) const {
    a(first, second);
  }
  template <class A>
  void load(A& a) {
    a(first);
    reading = true;
    for (int i = 0; i < 100000 && !go_on; ++i) std::this_thread::yield();  // bounded
    a(second);
  }
};

// ---- 3. SIGCHLD ignored by the program

// Defect 3: with SIGCHLD set to SIG_IGN before init (inherited by the zygote),
// worker deaths were never reported and get waited forever.
TEST(regression_process, a_crash_is_reported_with_sigchld_ignored) {
  auto r = in_child(
      []() -> std::string {
        ::signal(SIGCHLD, SIG_IGN);
        manta::init({.num_workers = 2});
        auto crashed = manta::task(crash_always).max_retries(0).remote(SIGKILL);
        try {
          manta::get(crashed, 10s);
          return "the crashing task returned";
        } catch (const manta::worker_crashed_error&) {
        } catch (const manta::error& e) {
          return std::string("wrong error for the crash: ") + e.what();
        }
        if (manta::get(manta::task(plus).remote(2, 3), 10s) != 5) return "wrong sum afterwards";
        manta::shutdown();
        return "";
      },
      30s);
  EXPECT_TRUE(r.ok()) << r.what();
}

// ---- 4. The zygote lost

// Defect 4a: with the zygote killed, tasks submitted before (running) and after
// waited forever. They must fail promptly with node_died_error naming the zygote;
// shutdown returns; a new init works.
TEST(regression_process, a_lost_zygote_fails_tasks_promptly) {
  auto r = in_child(
      []() -> std::string {
        manta::init({.num_workers = 2});
        auto before = manta::task(slow).remote(30000);
        ::kill(manta::detail::runtime_process_ids()[0], SIGKILL);
        auto t0 = clock_type::now();
        auto check = [&](const char* which, auto&& run) -> std::string {
          try {
            run();
            return std::string(which) + ": no error";
          } catch (const manta::timeout_error&) {
            return std::string(which) + ": still waiting after 5 s";
          } catch (const manta::node_died_error& e) {
            if (!std::strstr(e.what(), "zygote"))
              return std::string(which) + ": the error does not name the zygote: " + e.what();
          } catch (const manta::error& e) {
            return std::string(which) + ": not node_died_error: " + e.what();
          }
          return "";
        };
        std::string err = check("task submitted before", [&] { manta::get(before, 5s); });
        if (!err.empty()) return err;
        // Submitting may itself throw now: either place is fine.
        err =
            check("task submitted after", [&] { manta::get(manta::task(plus).remote(1, 2), 5s); });
        if (!err.empty()) return err;
        if (seconds_since(t0) > 6)
          return "failing took " + std::to_string(seconds_since(t0)) + " s";
        t0 = clock_type::now();
        manta::shutdown();
        if (seconds_since(t0) > 6)
          return "shutdown took " + std::to_string(seconds_since(t0)) + " s";
        manta::init({.num_workers = 2});
        if (manta::get(manta::task(plus).remote(1, 2), 10s) != 3) return "wrong sum after re-init";
        manta::shutdown();
        return "";
      },
      30s);
  EXPECT_TRUE(r.ok()) << r.what();
}

// Defect 4b: the zygote died with the thread that called init (PR_SET_PDEATHSIG
// follows the forking thread), so every task after that thread ended was lost.
TEST(regression_process, init_from_a_thread_that_ends) {
  auto r = in_child(
      []() -> std::string {
        std::string init_error;
        std::thread starter([&] {
          try {
            manta::init({.num_workers = 2});
          } catch (const std::exception& e) {
            init_error = e.what();
          }
        });
        starter.join();
        if (!init_error.empty()) return "init: " + init_error;
        std::vector<manta::object_ref<int>> refs;
        for (int i = 0; i < 10; ++i) refs.push_back(manta::task(plus).remote(i, 1));
        auto values = manta::get(refs, 10s);
        for (int i = 0; i < 10; ++i)
          if (values[i] != i + 1) return "wrong sum";
        manta::shutdown();
        return "";
      },
      30s);
  EXPECT_TRUE(r.ok()) << r.what();
}

// A fork after shutdown: threads of the parent may have been inside TBB's
// allocator, so the child takes its runtime's objects from malloc, and it never
// frees refs of its parent's runtimes (TBB's blocks: free() on one would
// corrupt the heap). Its own runtime works, and dropping the old refs is safe.
TEST(regression_process, a_child_forked_after_shutdown_runs_a_runtime_and_drops_old_refs) {
  auto r = in_child(
      []() -> std::string {
        manta::init({.num_workers = 1});
        auto old = manta::put(std::vector<int>(1000, 1));
        auto old_result = manta::task(plus).remote(1, 2);
        if (manta::get(old_result, 10s) != 3) return "the first runtime's task";
        manta::shutdown();
        std::fflush(nullptr);
        pid_t child = ::fork();
        if (child == 0) {
          manta::init({.num_workers = 1});
          auto mine = manta::put(std::vector<int>(1000, 2));
          const int sum = manta::get(manta::task(plus).remote(20, 22), 10s);
          old = {};  // refs of the parent's runtime: left unfreed
          old_result = {};
          mine = {};  // its own: freed
          manta::shutdown();
          ::_exit(sum == 42 ? 0 : 1);
        }
        int status = 0;
        if (!manta::testing::reap_within(child, 20s, status)) return "the child hung";
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "the child ended with status " + std::to_string(status);
        old = {};  // the parent frees them (through TBB's allocator)
        old_result = {};
        return "";
      },
      60s);
  EXPECT_TRUE(r.ok()) << r.what();
}

// Found by review of the restructuring: shutdown unmapped the object store while
// another thread was still decoding a get from it (SIGSEGV), and reading a view
// kept past shutdown crashed the same way. Their bytes stay readable.
TEST(regression_process, reads_that_outlive_shutdown_do_not_crash) {
  auto r = in_child(
      []() -> std::string {
        manta::init({.num_workers = 1});
        auto big = manta::put(TwoHalves{std::vector<double>(100000, 1.5), std::vector<double>(100000, 2.5)});
        auto kept = manta::get_view(manta::put(std::vector<double>(100000, 3.5)));
        std::string got;
        std::thread reader([&] {
          try {
            TwoHalves v = manta::get(big);
            got = v.second.back() == 2.5 ? "ok" : "wrong second half";
          } catch (const manta::error& e) {
            got = std::string("error: ") + e.what();
          }
        });
        if (!manta::testing::eventually([] { return TwoHalves::reading.load(); }, 10s))
          return "the reader never started decoding";
        manta::shutdown();  // while it decodes
        TwoHalves::go_on = true;
        reader.join();
        if (got != "ok") return "the reader got: " + got;
        if (kept[99999] != 3.5 || kept.size() != 100000) return "the view kept past shutdown reads wrong";
        return "";
      },
      30s);
  EXPECT_TRUE(r.ok()) << r.what();
}

// Found by review of the restructuring: a program running with stdin, stdout
// and stderr closed (a daemon) had the runtime's own pipes take those numbers,
// and worker output was written into them: tasks stalled.
TEST(regression_process, a_driver_without_standard_descriptors_runs_tasks) {
  auto r = in_child(
      []() -> std::string {
        for (int fd = 0; fd <= 2; ++fd) ::close(fd);
        manta::init({.num_workers = 2});
        const auto until = clock_type::now() + 30s;
        std::string fds;
        for (int fd = 0; fd <= 2; ++fd) {
          char link[256] = {};
          ssize_t n = ::readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), link, sizeof link - 1);
          if (n <= 0 || std::string(link) != "/dev/null") fds += " " + std::to_string(fd) + "=" + link;
        }
        if (!fds.empty()) return "standard descriptors not on /dev/null:" + fds;
        for (int i = 0; i < 20; ++i) {
          if (manta::get(manta::task(to_stderr).remote(i), left(until)) != i) return "a wrong result";
          if (manta::get(manta::task(print_64k).remote(i), left(until)) != i) return "a wrong result";
        }
        manta::shutdown();
        return "";
      },
      45s);
  EXPECT_TRUE(r.ok()) << r.what();
}

// ---- 8. Counts from a worker trusted before they are checked

/// Runs `task` (one of the send_huge_* functions) as the first task of a fresh
/// runtime in a child driver; the driver must survive, and tasks must run after.
void expect_driver_survives(int (*task)(std::string)) {
  const std::string marker = temp_path("garbage-once");
  ::unlink(marker.c_str());
  auto r = in_child(
      [&]() -> std::string {
        manta::init({.num_workers = 2});
        try {
          int v = manta::get(manta::task(task).remote(marker), 15s);  // retried: 7
          if (v != 7) return "the garbage task returned " + std::to_string(v);
        } catch (const manta::timeout_error& e) {
          return std::string("the garbage task was lost: ") + e.what();
        } catch (const manta::error&) {
          // failing it is fine too
        }
        if (manta::get(manta::task(plus).remote(2, 3), 10s) != 5) return "wrong sum afterwards";
        manta::shutdown();
        return "";
      },
      30s);
  ::unlink(marker.c_str());
  EXPECT_TRUE(r.ok()) << "the driver " << r.what();
}

// Defect 8: the driver resized a vector to a worker's id count before checking it
// against the frame: bad_alloc escaped the I/O thread and ended the driver.
TEST(regression_process, a_huge_count_in_a_block_message_does_not_end_the_driver) {
  expect_driver_survives(send_huge_block_count);
}

TEST(regression_process, a_huge_contained_count_in_a_result_does_not_end_the_driver) {
  expect_driver_survives(send_huge_contained_count);
}

}  // namespace

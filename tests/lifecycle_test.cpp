// lifecycle_test: init and shutdown leave nothing behind, whatever is running.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <chrono>
#include <atomic>
#include <fstream>
#include <functional>
#include <future>
#include <thread>

#include "support.hpp"

namespace {
using namespace std::chrono_literals;
using manta::testing::gone;
using manta::testing::shm_entries;

int slow(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
bool init_inside() {
  try {
    manta::init();
  } catch (const manta::usage_error&) {
    return true;
  }
  return false;
}
/// Forks; the child tries the API (refused: it is not a worker) and exits
/// normally. Returns 0 if the child saw the clear refusal.
int fork_inside_a_task(int) {
  pid_t child = ::fork();
  if (child == 0) {
    int code = 3;
    try {
      manta::put(1);
      code = 1;
    } catch (const manta::usage_error& e) {
      code = std::string(e.what()).find("forked") != std::string::npos ? 0 : 2;
    }
    std::exit(code);  // atexit handlers and static destructors run, as in any child
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}
/// Forks a child that leaves the session and sleeps for ever (a helper a task
/// started and forgot); returns its pid.
int fork_a_sleeper(int) {
  pid_t child = ::fork();
  if (child == 0) {
    ::setsid();
    for (;;) ::pause();
  }
  return child;
}
MANTA_REMOTE(slow, init_inside, fork_inside_a_task, fork_a_sleeper);

/// Mappings of the arena (a memfd named manta-arena) in this process.
std::size_t arena_mappings() {
  std::ifstream maps("/proc/self/maps");
  std::size_t n = 0;
  for (std::string line; std::getline(maps, line);) n += line.find("memfd:manta-arena") != std::string::npos;
  return n;
}

TEST(lifecycle, repeated_init_and_shutdown_leave_nothing_behind) {
  int fds = manta::testing::open_fd_count();
  const auto shm = shm_entries();  // the arena is a memfd: nothing is ever named there
  std::vector<int> all;
  for (int i = 0; i < 10; ++i) {
    manta::init({.num_workers = 2});
    EXPECT_GT(arena_mappings(), 0u);
    EXPECT_EQ(manta::get(manta::task(slow).remote(0)), 0);
    auto pids = manta::detail::runtime_process_ids();
    all.insert(all.end(), pids.begin(), pids.end());
    manta::shutdown();
    EXPECT_EQ(arena_mappings(), 0u) << "the arena stayed mapped after shutdown";
  }
  for (int pid : all) EXPECT_TRUE(gone(pid)) << pid;
  EXPECT_EQ(manta::testing::open_fd_count(), fds);
  EXPECT_EQ(shm_entries(), shm);
}

TEST(lifecycle, shutdown_ends_running_tasks_promptly) {
  manta::init({.num_workers = 2});
  auto pids = manta::detail::runtime_process_ids();
  auto a = manta::task(slow).remote(30000);
  auto b = manta::task(slow).remote(30000);
  auto t0 = std::chrono::steady_clock::now();
  manta::shutdown();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  for (int pid : pids) EXPECT_TRUE(gone(pid)) << pid;
}

TEST(lifecycle, a_thread_blocked_in_get_is_released_by_shutdown) {
  manta::init({.num_workers = 1});
  auto r = manta::task(slow).remote(30000);
  std::promise<bool> threw;
  std::atomic<pid_t> tid{0};
  std::thread waiter([&] {
    tid = static_cast<pid_t>(::gettid());
    try {
      manta::get(r);
      threw.set_value(false);
    } catch (const manta::usage_error&) {
      threw.set_value(true);
    }
  });
  auto f = threw.get_future();
  // Shut down once it sleeps in get for real (in the kernel, waiting on a futex).
  EXPECT_TRUE(manta::testing::eventually([&] { return tid && manta::testing::blocked_in_futex(tid); }));
  EXPECT_EQ(f.wait_for(0ms), std::future_status::timeout);
  manta::shutdown();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(f.get());
  waiter.join();
}

TEST(lifecycle, a_task_may_fork_and_its_child_is_no_worker) {
  // A runtime before: its atexit shutdown is registered by then, and the
  // workers of the next one (and their children) inherit it.
  manta::init({.num_workers = 1});
  manta::shutdown();
  manta::init({.num_workers = 1});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(manta::get(manta::task(fork_inside_a_task).remote(i), 30s), 0);
  EXPECT_EQ(manta::get(manta::task(slow).remote(1), 30s), 1);  // the worker goes on
  EXPECT_EQ(manta::detail::counters().processes_lost, 0u);
  manta::shutdown();
}

// Processes tasks forked end with the runtime, even in a session of their
// own, and even when their worker died first: they outlived the driver.
TEST(lifecycle, processes_a_task_forked_end_with_the_runtime) {
  manta::init({.num_workers = 2});
  const int kept = manta::get(manta::task(fork_a_sleeper).remote(0), 30s);
  const int orphaned = manta::get(manta::task(fork_a_sleeper).remote(1), 30s);
  ASSERT_GT(kept, 0);
  ASSERT_GT(orphaned, 0);
  // The worker that forked the second one dies: its child is orphaned now.
  auto parent_of = [](int pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), {});
    int ppid = 0;
    if (auto at = text.rfind(')'); at != std::string::npos) std::sscanf(text.c_str() + at + 1, " %*c %d", &ppid);
    return ppid;
  };
  const int worker = parent_of(orphaned);
  ASSERT_GT(worker, 0);
  ::kill(worker, SIGKILL);
  EXPECT_TRUE(manta::testing::eventually([&] { return parent_of(orphaned) != worker; }, 10s));
  EXPECT_TRUE(manta::testing::alive(kept) && manta::testing::alive(orphaned));
  manta::shutdown();
  EXPECT_TRUE(manta::testing::eventually([&] { return gone(kept) && gone(orphaned); }, 10s))
      << "left behind: " << (gone(kept) ? 0 : kept) << " " << (gone(orphaned) ? 0 : orphaned);
  ::kill(kept, SIGKILL);  // (should the test fail)
  ::kill(orphaned, SIGKILL);
}

TEST(lifecycle, init_inside_a_task_is_refused) {
  manta::init({.num_workers = 1});
  EXPECT_TRUE(manta::get(manta::task(init_inside).remote()));
  manta::shutdown();
}

/// Forks a child that starts a runtime of 2 workers and then runs `then`,
/// which ends the process. Returns the child's wait status (-1 if it did not
/// end within 30 s) once every process of its runtime is gone.
int status_of_child_runtime(const std::function<void()>& then) {
  int report[2];
  if (::pipe(report) != 0) return -1;
  pid_t child = ::fork();
  if (child == 0) {
    ::close(report[0]);
    manta::init({.num_workers = 2});
    auto pids = manta::detail::runtime_process_ids();
    [[maybe_unused]] auto n = ::write(report[1], pids.data(), pids.size() * sizeof(int));
    ::close(report[1]);
    then();
    std::_Exit(100);  // (never: `then` ends the process)
  }
  ::close(report[1]);
  std::vector<int> pids(3);
  const bool told = ::read(report[0], pids.data(), pids.size() * sizeof(int)) == 3 * sizeof(int);
  ::close(report[0]);
  int status = 0;
  if (!manta::testing::reap_within(child, 30s, status)) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    status = -1;
  }
  EXPECT_TRUE(told);
  for (int pid : pids) EXPECT_TRUE(gone(pid)) << pid;
  return status;
}

TEST(lifecycle, process_exit_without_shutdown_cleans_up) {
  const int status = status_of_child_runtime([] { std::exit(0); });  // atexit runs shutdown
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// exit() from one thread while others wait in get or keep submitting: the
// process ends with the status it was given (the waiters are not woken into
// a "shut down" error, which escaped into std::terminate and made it an abort)
// and leaves nothing behind.
TEST(lifecycle, exit_from_another_thread_while_threads_wait_in_get_keeps_its_status) {
  const int status = status_of_child_runtime([] {
    std::atomic<int> done{0};
    std::thread([&] {
      for (;;) done += manta::get(manta::task(slow).remote(1)) == 1;
    }).detach();
    const pid_t main_tid = static_cast<pid_t>(::gettid());
    std::thread([&] {
      // Once main sleeps in get for real and the other thread's tasks run.
      manta::testing::eventually([&] { return done > 3 && manta::testing::blocked_in_futex(main_tid); });
      std::exit(5);
    }).detach();
    manta::get(manta::task(slow).remote(30000));
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 5)
      << (WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status)) : "status " + std::to_string(status));
}

}  // namespace

// A call after shutdown said "call manta::init() first", as if none had run.
TEST(lifecycle, a_call_after_shutdown_says_the_runtime_was_shut_down) {
  manta::init({.num_workers = 1});
  auto r = manta::task(slow).remote(0);
  EXPECT_EQ(manta::get(r, 30s), 0);
  manta::shutdown();
  try {
    manta::task(slow).remote(0);
    ADD_FAILURE() << "no usage_error";
  } catch (const manta::usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("it was shut down (call manta::init() again"), std::string::npos) << e.what();
  }
  manta::init({.num_workers = 1});  // and a new runtime says nothing of it
  EXPECT_EQ(manta::get(manta::task(slow).remote(0), 30s), 0);
  manta::shutdown();
}

#ifdef MANTA_TEST_NO_BRIDGE
// Built without the bridge (MANTA_ENABLE_BRIDGE=OFF): a setting that asks for
// a cluster is refused by name, and the single-node runtime works as ever.
TEST(lifecycle_without_bridge, a_cluster_setting_is_refused_by_name_and_one_node_runs) {
  auto refused = [](const std::function<void()>& init, const char* setting) {
    try {
      init();
      ADD_FAILURE() << setting << " was not refused";
      manta::shutdown();
    } catch (const manta::usage_error& e) {
      EXPECT_NE(std::string(e.what()).find(setting), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("MANTA_ENABLE_BRIDGE=OFF"), std::string::npos) << e.what();
    }
  };
  refused([] { manta::init({.address = "127.0.0.1:1"}); }, "options.address");
  ::setenv("MANTA_ADDRESS", "127.0.0.1:1", 1);
  refused([] { manta::init(); }, "MANTA_ADDRESS");
  ::unsetenv("MANTA_ADDRESS");
  ::setenv("MANTA_NODE", "127.0.0.1:1", 1);
  refused([] { manta::init(); }, "MANTA_NODE");
  ::unsetenv("MANTA_NODE");
  manta::init({.num_workers = 1});
  EXPECT_EQ(manta::get(manta::task(slow).remote(0), 30s), 0);
  EXPECT_EQ(manta::nodes().size(), 1u);
  manta::shutdown();
}
#endif

// fault_test: workers really die (SIGKILL, SIGSEGV, abort, exit) mid-task; the
// pool replaces them, tasks are retried up to max_retries, and then fail with
// worker_crashed_error naming the signal. A killed driver leaves nothing behind.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <string>
#include <vector>

#include "support.hpp"

namespace {
using namespace std::chrono_literals;
using manta::testing::gone;

// Created before init so every worker inherits it: tasks report their pid here.
int report_pipe[2] = {-1, -1};

/// Dies by `sig` the first time it runs for `marker`, succeeds afterwards.
int crash_once(std::string marker, int sig) {
  int fd = ::open(marker.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  if (fd >= 0) {
    ::close(fd);
    if (sig == 0) std::_Exit(3);
    if (sig == SIGABRT) std::abort();
    ::raise(sig);
  }
  return 42;
}
int crash_always(int sig) {
  ::raise(sig);
  return 0;
}
/// Reports its pid, then blocks until killed.
int report_and_block(int) {
  int pid = ::getpid();
  [[maybe_unused]] auto n = ::write(report_pipe[1], &pid, sizeof pid);
  for (;;) ::pause();
}
int plus(int a, int b) { return a + b; }

/// Puts and drops 1 MB values as fast as it can (each one asks the driver for
/// room); reports its pid once it is well into that loop.
int put_forever(int) {
  for (int i = 0;; ++i) {
    auto r = manta::put(std::vector<char>(1 << 20, 'x'));
    auto b = manta::make_buffer<char>(1 << 20);
    b[0] = 'y';
    auto s = manta::put(std::move(b));
    if (i == 3) {
      int pid = ::getpid();
      [[maybe_unused]] auto n = ::write(report_pipe[1], &pid, sizeof pid);
    }
  }
}

struct Idle {
  int pid() const { return static_cast<int>(::getpid()); }
};
MANTA_ACTOR(Idle, &Idle::pid);

/// The first time it runs for `marker`, writes a malformed frame into every pipe
/// this process may write to (its pipe to the driver among them), as a corrupt
/// worker would, and returns; its result then follows the garbage. Succeeds
/// when retried.
int send_garbage_once(std::string marker, bool oversized) {
  int fd = ::open(marker.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  if (fd < 0) return 7;
  ::close(fd);
  // An oversized header, or a task_done (type 16) whose body is cut short.
  std::uint32_t frame[2] = {oversized ? 0xfffffff0u : 2u, 16u};
  char padded[16] = {};
  std::memcpy(padded, frame, sizeof frame);
  for (int f = 3; f < 1024; ++f) {
    int flags = ::fcntl(f, F_GETFL);
    struct stat st{};
    if (flags < 0 || (flags & O_ACCMODE) != O_WRONLY || ::fstat(f, &st) != 0 || !S_ISFIFO(st.st_mode))
      continue;
    [[maybe_unused]] auto n = ::write(f, padded, sizeof padded);
  }
  return 0;  // never seen: the driver stops reading at the garbage and replaces the worker
}
MANTA_REMOTE(crash_once, crash_always, report_and_block, plus, send_garbage_once, put_forever);

int read_pid(int timeout_ms = 10000) {
  pollfd p{report_pipe[0], POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) != 1) return -1;
  int pid = -1;
  return ::read(report_pipe[0], &pid, sizeof pid) == sizeof pid ? pid : -1;
}

class faults : public manta::testing::runtime_fixture, public ::testing::WithParamInterface<int> {
 protected:
  void SetUp() override {
    ASSERT_EQ(::pipe(report_pipe), 0);
    start(2);
  }
  void TearDown() override {
    runtime_fixture::TearDown();
    ::close(report_pipe[0]);
    ::close(report_pipe[1]);
    for (auto& m : markers_) ::unlink(m.c_str());
  }
  std::string marker(const std::string& name) {
    markers_.push_back(manta::testing::temp_path(name));
    ::unlink(markers_.back().c_str());
    return markers_.back();
  }
  std::vector<std::string> markers_;
};

TEST_P(faults, a_worker_dying_mid_task_is_replaced_and_the_task_retried) {
  const int sig = GetParam();
  auto r = manta::task(crash_once).remote(marker("once"), sig);
  EXPECT_EQ(manta::get(r, 20s), 42);
  // The pool is whole again: same size, with a new process in place of the dead one.
  EXPECT_TRUE(manta::testing::eventually(
      [&] { return manta::detail::runtime_process_ids().size() == 3; }));
  // And it keeps working.
  std::vector<manta::object_ref<int>> refs;
  for (int i = 0; i < 100; ++i) refs.push_back(manta::task(plus).remote(i, 1));
  auto vals = manta::get(refs, 20s);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(vals[i], i + 1);
}

TEST_P(faults, retries_run_out_into_worker_crashed_error) {
  const int sig = GetParam() == 0 ? SIGKILL : GetParam();
  auto r = manta::task(crash_always).max_retries(1).remote(sig);
  try {
    manta::get(r, 20s);
    FAIL() << "no exception";
  } catch (const manta::worker_crashed_error& e) {
    EXPECT_EQ(e.signal(), sig);
    EXPECT_EQ(e.function_name(), "crash_always");
    std::string abbrev = std::string("SIG") + sigabbrev_np(sig);
    EXPECT_NE(std::string(e.what()).find(abbrev), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tried 2 times"), std::string::npos) << e.what();
  }
  // Dependents fail with the same error, chained.
  auto dep = manta::task(plus).remote(r, 1);
  EXPECT_THROW(manta::get(dep, 20s), manta::worker_crashed_error);
}

INSTANTIATE_TEST_SUITE_P(signals, faults, ::testing::Values(SIGKILL, SIGSEGV, SIGABRT, 0),
                         [](const auto& info) {
                           return info.param == 0 ? std::string("exit")
                                                  : std::string(sigabbrev_np(info.param));
                         });

TEST_P(faults, processes_killed_while_allocating_do_not_wedge_the_arena) {
  const std::size_t before = manta::detail::arena_used_bytes();
  for (int round = 0; round < 20; ++round) {
    auto r = manta::task(put_forever).max_retries(0).remote(0);
    // Once it allocates in a loop, kill the worker running it.
    int pid = read_pid();
    ASSERT_GT(pid, 0);
    ::kill(pid, GetParam() ? GetParam() : SIGKILL);
    EXPECT_THROW(manta::get(r, 20s), manta::error);
  }
  // Every extent the dead processes held is back; the arena still serves.
  EXPECT_TRUE(manta::testing::eventually([&] { return manta::detail::arena_used_bytes() == before; }))
      << manta::detail::arena_used_bytes() << " bytes, was " << before;
  auto big = manta::put(std::vector<char>(8 << 20, 'z'));
  EXPECT_EQ(manta::get_view(big)[12345], 'z');
}

class external_kill : public faults {};
INSTANTIATE_TEST_SUITE_P(kill, external_kill, ::testing::Values(SIGKILL));

TEST_P(external_kill, a_worker_sending_malformed_frames_is_replaced_and_its_task_retried) {
  for (bool oversized : {true, false}) {
    auto r = manta::task(send_garbage_once).remote(marker(oversized ? "big" : "short"), oversized);
    EXPECT_EQ(manta::get(r, 20s), 7);
  }
  EXPECT_TRUE(manta::testing::eventually(
      [&] { return manta::detail::runtime_process_ids().size() == 3; }));
  EXPECT_EQ(manta::get(manta::task(plus).remote(2, 3), 20s), 5);  // the driver is fine
}

TEST_P(external_kill, killing_the_worker_from_outside) {
  auto r = manta::task(report_and_block).max_retries(1).remote(0);
  int first = read_pid();
  ASSERT_GT(first, 0);
  ASSERT_EQ(::kill(first, SIGKILL), 0);
  int second = read_pid();  // the retry, on the replacement worker
  ASSERT_GT(second, 0);
  EXPECT_NE(second, first);
  ASSERT_EQ(::kill(second, SIGKILL), 0);
  EXPECT_THROW(manta::get(r, 20s), manta::worker_crashed_error);
  EXPECT_TRUE(gone(first) || !manta::testing::alive(first));
  // Work queued behind the lost tasks was not lost.
  EXPECT_EQ(manta::get(manta::task(plus).remote(1, 2), 20s), 3);
}

TEST(driver_crash, killing_the_driver_ends_every_process) {
  // Orphans are re-parented to this process so it can see them exit (and reap them).
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int report[2];
  ASSERT_EQ(::pipe(report), 0);
  pid_t driver = ::fork();
  if (driver == 0) {
    ::close(report[0]);
    manta::init({.num_workers = 2});
    auto busy = manta::task(plus).remote(1, 1);
    manta::get(busy);
    auto host = manta::actor<Idle>().remote();
    manta::get(host.task(&Idle::pid).remote());
    auto pids = manta::detail::runtime_process_ids();  // zygote, 2 workers, 1 actor host
    [[maybe_unused]] auto n = ::write(report[1], pids.data(), pids.size() * sizeof(int));
    for (;;) ::pause();
  }
  ::close(report[1]);
  std::vector<int> pids(4);
  ASSERT_EQ(::read(report[0], pids.data(), pids.size() * sizeof(int)), 4 * sizeof(int));
  ::close(report[0]);
  ASSERT_EQ(::kill(driver, SIGKILL), 0);
  ASSERT_EQ(::waitpid(driver, nullptr, 0), driver);
  auto t0 = std::chrono::steady_clock::now();
  bool all_gone = manta::testing::eventually(
      [&] {
        while (::waitpid(-1, nullptr, WNOHANG) > 0) {
        }
        return std::all_of(pids.begin(), pids.end(), [](int p) { return gone(p); });
      },
      5s);
  EXPECT_TRUE(all_gone);
  std::printf("driver killed: zygote, workers and actor host gone after %.0f ms\n",
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  auto shm = manta::testing::shm_entries();
  for (auto& name : shm)
    EXPECT_EQ(name.find("manta-" + std::to_string(driver)), std::string::npos) << name;
}

}  // namespace

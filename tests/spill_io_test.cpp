// spill_io_test: the disk's work of spilling never holds the runtime up. This
// binary defines pwrite itself, so the test decides when a write to the spill
// file may go on: while one is held, tasks, puts of values that fit and gets
// must all complete. (A spill for a worker's result was written with the
// scheduler's lock held: every API call, dispatch and worker message stalled
// for the length of a multi-gigabyte write.)
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "support.hpp"

namespace {
std::atomic<bool> hold_spill_writes{false};
std::atomic<int> spill_writes_waiting{0};
std::mutex gate_mu;
std::condition_variable gate_opened;

bool is_spill_file(int fd) {
  char link[64], path[512];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = ::readlink(link, path, sizeof path - 1);
  if (n <= 0) return false;
  path[n] = '\0';
  return std::string(path).find("/spill") != std::string::npos;
}
}  // namespace

// Every pwrite of this program (the runtime is linked in statically) comes here.
extern "C" ssize_t pwrite(int fd, const void* buf, size_t n, off_t offset) {
  if (hold_spill_writes.load() && is_spill_file(fd)) {
    spill_writes_waiting.fetch_add(1);
    std::unique_lock lock(gate_mu);
    gate_opened.wait(lock, [] { return !hold_spill_writes.load(); });
    spill_writes_waiting.fetch_sub(1);
  }
  return ::syscall(SYS_pwrite64, fd, buf, n, offset);
}

namespace {
using namespace std::chrono_literals;
constexpr std::size_t mib = 1 << 20;

std::vector<double> make_block(double v, std::size_t bytes) { return std::vector<double>(bytes / sizeof(double), v); }
int twice(int x) { return 2 * x; }
double fifth_of_value(std::span<const double> xs) { return xs[5]; }
double fifth_through_ref(manta::object_ref<std::vector<double>> r) { return manta::get(r)[5]; }
double sum_of_two(std::span<const double> a, std::span<const double> b) { return a[3] + b[3]; }
MANTA_REMOTE(make_block, twice, fifth_of_value, fifth_through_ref, sum_of_two);

void open_gate() {
  {
    std::lock_guard lock(gate_mu);
    hold_spill_writes = false;
  }
  gate_opened.notify_all();
}

class spill_io : public manta::testing::runtime_fixture {
 protected:
  void SetUp() override {
    dir_ = manta::testing::temp_path("spill-io");
    start(2, {.object_store_bytes = 64 * mib, .log_dir = dir_});
  }
  void TearDown() override {
    open_gate();
    runtime_fixture::TearDown();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);  // (the runtime is down: nothing writes there any more)
  }
  std::string dir_;
};

TEST_F(spill_io, the_runtime_goes_on_while_a_spill_for_a_result_writes) {
  auto big = manta::put(std::vector<double>(40 * mib / sizeof(double), 1.0));
  hold_spill_writes = true;
  // Its result needs room only spilling `big` makes: that write is held.
  auto made = manta::task(make_block).remote(2.0, 40 * mib);
  ASSERT_TRUE(manta::testing::eventually([] { return spill_writes_waiting.load() > 0; }, 30s))
      << "no spill began";
  // Meanwhile: a task, a put of a value that fits (sealed and tracked by the
  // store), a get of it, and of a value stored before.
  EXPECT_EQ(manta::get(manta::task(twice).remote(21), 20s), 42);
  auto small = manta::put(std::vector<double>(mib / sizeof(double), 3.0));
  EXPECT_EQ(manta::get(small, 20s)[7], 3.0);
  EXPECT_EQ(manta::get(manta::task(twice).remote(4), 20s), 8);
  EXPECT_GT(spill_writes_waiting.load(), 0) << "the spill ended before the calls: nothing was tested";
  open_gate();
  EXPECT_EQ(manta::get(made, 30s)[99], 2.0);
  EXPECT_EQ(manta::get(big, 30s)[99], 1.0);  // read back (spilling the result in turn)
  EXPECT_GT(manta::detail::spilling().spilled, 0u);
}

TEST_F(spill_io, tasks_and_workers_read_spilled_objects_back_off_the_lock) {
  // Spilled objects read back for a task's argument and for a worker's get,
  // through the spiller: each arrives whole.
  std::vector<manta::object_ref<std::vector<double>>> blocks;
  for (int i = 0; i < 6; ++i) blocks.push_back(manta::put(std::vector<double>(16 * mib / sizeof(double), i)));
  ASSERT_GT(manta::detail::spilling().spilled, 0u);
  std::vector<manta::object_ref<double>> by_value, by_ref;
  for (auto& b : blocks) {
    by_value.push_back(manta::task(fifth_of_value).remote(b));  // pinned when sent
    by_ref.push_back(manta::task(fifth_through_ref).remote(b));  // got in the worker
  }
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(manta::get(by_value[static_cast<std::size_t>(i)], 30s), double(i));
    EXPECT_EQ(manta::get(by_ref[static_cast<std::size_t>(i)], 30s), double(i));
  }
  EXPECT_GT(manta::detail::spilling().restored, 0u);
}

TEST_F(spill_io, a_task_whose_two_arguments_are_spilled_gets_both_back) {
  // Brought back one at a time, each could spill the other, for ever: they
  // come back together.
  auto a = manta::put(std::vector<double>(24 * mib / sizeof(double), 1.0));
  auto b = manta::put(std::vector<double>(24 * mib / sizeof(double), 2.0));
  auto c = manta::put(std::vector<double>(40 * mib / sizeof(double), 3.0));  // spills a (and maybe b)
  auto d = manta::put(std::vector<double>(40 * mib / sizeof(double), 4.0));  // spills the rest but itself
  EXPECT_EQ(manta::get(manta::task(sum_of_two).remote(a, b), 30s), 3.0);
  // Two that cannot be in the arena at once: a clear error, not a loop.
  EXPECT_THROW(manta::get(manta::task(sum_of_two).remote(c, d), 30s), manta::object_store_full);
  EXPECT_EQ(manta::get(manta::task(twice).remote(5), 20s), 10);
}

}  // namespace

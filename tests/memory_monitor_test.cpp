// memory_monitor_test: options.memory_threshold and .memory(bytes). The
// threshold is set a gigabyte above what the machine uses with the runtime
// running, so a task that allocates more crosses it (never the machine's real
// limit). Label serial: run alone, so other tests' memory does not count.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "support.hpp"

namespace {
using namespace std::chrono_literals;

/// Machine memory in use and in all, as the monitor reads /proc/meminfo.
std::pair<double, double> meminfo() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  double kb = 0, total = 0, available = 0;
  while (f >> key >> kb) {
    std::getline(f, unit);
    if (key == "MemTotal:") total = kb * 1024;
    if (key == "MemAvailable:") available = kb * 1024;
  }
  return {total - available, total};
}

/// Touches memory 64 MB at a time up to `mb` MB, then holds it for up to 60 s.
int hog(int mb) {
  std::vector<void*> chunks;
  for (int got = 0; got < mb; got += 64) {
    void* p = std::malloc(64 << 20);
    std::memset(p, 1, 64 << 20);
    chunks.push_back(p);
  }
  std::this_thread::sleep_for(60s);
  for (void* p : chunks) std::free(p);
  return mb;
}
int gated(std::string gate) {
  std::ofstream(gate + ".started") << "running";
  manta::testing::wait_at_gate(gate);
  return 7;
}
int square(int x) { return x * x; }
MANTA_REMOTE(hog, gated, square);

class memory_monitor : public manta::testing::runtime_fixture {};

TEST_F(memory_monitor, kills_the_newest_retriable_task_then_fails_it_with_out_of_memory_error) {
  // The runtime's own memory (its workers, and under a sanitizer far more than
  // in Release) is measured running, so the threshold sits a gigabyte above it
  // and only the hog crosses it.
  start(2);
  ASSERT_EQ(manta::get(manta::task(square).remote(2), 30s), 4);
  auto [used, total] = meminfo();
  const std::vector<int> first = pids_;
  manta::shutdown();
  for (int pid : first) EXPECT_TRUE(manta::testing::gone(pid)) << "pid " << pid << " outlived shutdown";
  const double threshold = (used + (1024.0 * (1 << 20))) / total;
  if (threshold >= 0.99) GTEST_SKIP() << "less than a gigabyte of memory is free";
  start(2, {.memory_threshold = threshold});
  manta::testing::fifo_gate gate;
  auto older = manta::task(gated).max_retries(0).remote(gate.path());  // not retriable, started first
  const std::string started = gate.path() + ".started";
  ASSERT_TRUE(manta::testing::eventually([&] { return ::access(started.c_str(), F_OK) == 0; }, 10s));
  ::unlink(started.c_str());
  auto newest = manta::task(hog).max_retries(1).remote(4096);
  try {
    manta::get(newest, 50s);
    FAIL() << "the hog was not killed";
  } catch (const manta::out_of_memory_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("memory monitor"), std::string::npos) << what;
    EXPECT_NE(what.find("GiB"), std::string::npos) << what;   // the machine's use
    EXPECT_NE(what.find("MiB"), std::string::npos) << what;   // the task's process
    EXPECT_NE(what.find("tried 2 times"), std::string::npos) << what;
  }
  // The older task was spared and the runtime carries on.
  ASSERT_TRUE(gate.open());
  EXPECT_EQ(manta::get(older, 30s), 7);
  EXPECT_EQ(manta::get(manta::task(square).remote(3), 30s), 9);
}

TEST_F(memory_monitor, memory_is_a_resource_tasks_reserve) {
  start(2);
  const double total = manta::cluster_resources().at("memory");
  EXPECT_NEAR(total, meminfo().second, meminfo().second * 0.01);
  EXPECT_EQ(manta::get(manta::task(square).memory(1 << 30).remote(4), 30s), 16);
  try {
    manta::task(square).memory(static_cast<std::uint64_t>(total) * 2).remote(1);
    FAIL() << "a task asking for twice the machine's memory was accepted";
  } catch (const manta::usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("memory"), std::string::npos) << e.what();
  }
  // Two tasks each holding 60% of it never run at once: the second waits for the first.
  const auto most = static_cast<std::uint64_t>(total * 0.6);
  manta::testing::fifo_gate gate;
  auto first = manta::task(gated).memory(most).remote(gate.path());
  auto second = manta::task(square).memory(most).remote(5);
  EXPECT_THROW(manta::get(second, 300ms), manta::timeout_error);
  ASSERT_TRUE(gate.open());
  EXPECT_EQ(manta::get(first, 30s), 7);
  EXPECT_EQ(manta::get(second, 30s), 25);
  ::unlink((gate.path() + ".started").c_str());
}

TEST(memory_monitor_options, a_threshold_outside_0_to_1_is_refused_at_init) {
  EXPECT_THROW(manta::init({.num_workers = 1, .memory_threshold = 1.5}), manta::usage_error);
  EXPECT_THROW(manta::init({.num_workers = 1, .memory_threshold = -0.1}), manta::usage_error);
  EXPECT_FALSE(manta::is_initialized());
}

}  // namespace

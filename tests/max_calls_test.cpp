// max_calls_test: task(f).max_calls(n): no worker process runs more than n
// calls of f; it is replaced once idle, which is neither a crash nor a retry,
// and calls of other functions do not count.
#include <unistd.h>

#include <map>
#include <vector>

#include "support.hpp"

namespace {
using namespace std::chrono_literals;

int worker_pid(int) { return static_cast<int>(::getpid()); }
int other_pid(int) { return static_cast<int>(::getpid()); }
MANTA_REMOTE(worker_pid, other_pid);

class max_calls : public manta::testing::runtime_fixture {};

std::map<int, int> count_pids(const std::vector<int>& pids) {
  std::map<int, int> n;
  for (int p : pids) ++n[p];
  return n;
}

TEST_F(max_calls, one_at_a_time_each_process_runs_at_most_n) {
  start(2);
  std::vector<int> pids;
  for (int i = 0; i < 30; ++i) pids.push_back(manta::get(manta::task(worker_pid).max_calls(3).remote(i), 10s));
  auto n = count_pids(pids);
  EXPECT_GE(n.size(), 10u);
  for (auto [pid, calls] : n) EXPECT_LE(calls, 3) << "pid " << pid;
  const auto c = manta::detail::counters();
  EXPECT_EQ(c.processes_lost, 0u) << "a replaced worker is no loss";
  EXPECT_EQ(c.task_retries, 0u);
}

TEST_F(max_calls, in_bulk_too) {
  start(2);
  std::vector<manta::object_ref<int>> refs;
  for (int i = 0; i < 300; ++i) refs.push_back(manta::task(worker_pid).max_calls(10).max_retries(0).remote(i));
  auto n = count_pids(manta::get(refs, 60s));
  EXPECT_GE(n.size(), 30u);
  for (auto [pid, calls] : n) EXPECT_LE(calls, 10) << "pid " << pid;
  EXPECT_EQ(manta::detail::counters().task_retries, 0u);
}

TEST_F(max_calls, calls_of_other_functions_do_not_count) {
  start(1);
  const int first = manta::get(manta::task(other_pid).remote(0), 10s);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(manta::get(manta::task(other_pid).remote(i), 10s), first);
  EXPECT_EQ(manta::get(manta::task(worker_pid).max_calls(2).remote(0), 10s), first);
  EXPECT_EQ(manta::get(manta::task(worker_pid).max_calls(2).remote(1), 10s), first);  // its second: the last
  EXPECT_NE(manta::get(manta::task(other_pid).remote(0), 10s), first);                 // a new process
}

TEST_F(max_calls, the_limit_must_be_positive) {
  start(1);
  EXPECT_THROW(manta::task(worker_pid).max_calls(0), manta::usage_error);
  EXPECT_THROW(manta::task(worker_pid).max_calls(-2), manta::usage_error);
}

}  // namespace

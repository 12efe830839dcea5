// chaos_test: while a killer SIGKILLs a random worker or actor host every few
// milliseconds, tasks with dependencies, chains of actor calls on restartable
// actors and a pool.map all finish with every result right; afterwards the pool
// is whole again and nothing leaked (arena, objects, file descriptors).
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "support.hpp"

// Under the sanitizers everything runs several times slower, starting a process
// most of all (ThreadSanitizer's fork takes tens of ms; AddressSanitizer's
// processes fault in their shadow memory, slow on some VMs). A killer striking
// every 2-8 ms would then end most processes before their first task, and the
// pool would do nothing but restart: the kills come further apart there, and
// the work is a third.
#if defined(__SANITIZE_THREAD__)
constexpr int kill_scale = 10;
#elif defined(__SANITIZE_ADDRESS__)
constexpr int kill_scale = 3;
#else
constexpr int kill_scale = 1;
#endif
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int rounds = 1;
constexpr long sum_tasks = 30000;
#else
constexpr int rounds = 3;
constexpr long sum_tasks = 100000;
#endif

namespace {
using namespace std::chrono_literals;

long inc(long x) { return x + 1; }
long add(long a, long b) { return a + b; }
long square(long x) { return x * x; }
MANTA_REMOTE(inc, add, square);

/// Stateless, so every answer is the same however often the actor restarts.
struct Doubler {
  long twice(long x) const { return 2 * x; }
};
MANTA_ACTOR(Doubler, &Doubler::twice);

TEST(chaos, killed_processes_lose_no_result) {
  manta::init({.num_workers = 2});
  std::vector<manta::actor_handle<Doubler>> doublers;
  for (int i = 0; i < 2; ++i)
    doublers.push_back(manta::actor<Doubler>().max_restarts(-1).max_task_retries(-1).remote());
  for (auto& d : doublers) ASSERT_EQ(manta::get(d.task(&Doubler::twice).remote(1L), 20s), 2);
  const std::size_t processes = manta::detail::runtime_process_ids().size();  // zygote, 2 workers, 2 hosts
  const int fds = manta::testing::open_fd_count();
  const std::size_t arena = manta::detail::arena_used_bytes();
  const std::size_t objects = manta::detail::object_count();

  std::atomic<bool> stop{false};
  std::atomic<int> faults{0};
  std::thread killer([&] {
    std::mt19937 rng(7);
    while (!stop.load()) {
      // The chaos interval, not a wait for anything: 2 to 8 ms between kills.
      std::this_thread::sleep_for(std::chrono::milliseconds(kill_scale * (2 + rng() % 7)));
      auto pids = manta::detail::runtime_process_ids();
      if (pids.size() < 2) continue;
      int victim = pids[1 + rng() % (pids.size() - 1)];  // never the zygote, pids[0]
      if (::kill(victim, SIGKILL) == 0) faults.fetch_add(1);
    }
  });

  long lost = 0;
  for (int round = 0; round < rounds; ++round) {
    // 100,000 tasks: 50,000 leaves and 50,000 sums of two leaves each.
    const long n = 50000;
    std::vector<manta::object_ref<long>> leaves, sums;
    for (long i = 0; i < n; ++i) leaves.push_back(manta::task(inc).max_retries(-1).remote(i));
    for (long i = 0; i < n; ++i)
      sums.push_back(manta::task(add).max_retries(-1).remote(leaves[i], leaves[(i + 1) % n]));
    // A chain of actor calls across two restartable actors: 2^40.
    manta::object_ref<long> chain = manta::put(1L);
    for (int k = 0; k < 40; ++k) chain = doublers[k % 2].task(&Doubler::twice).remote(chain);
    // A pool.map meanwhile.
    manta::pool pool({.max_retries = -1});
    std::vector<long> xs(200000);
    std::iota(xs.begin(), xs.end(), 0L);
    auto squares = pool.map(square, xs);

    auto got = manta::get(sums, 120s);
    for (long i = 0; i < n; ++i) lost += got[i] != (i + 1) + ((i + 1) % n + 1);
    lost += manta::get(chain, 120s) != (1L << 40);
    for (long i = 0; i < static_cast<long>(xs.size()); ++i) lost += squares[i] != i * i;
  }
  stop = true;
  killer.join();

  auto c = manta::detail::counters();
  std::printf("chaos: faults injected %d, tasks completed %llu, results lost %ld, retries %llu, "
              "processes replaced %llu, actor restarts %llu\n",
              faults.load(), static_cast<unsigned long long>(c.tasks_finished), lost,
              static_cast<unsigned long long>(c.task_retries),
              static_cast<unsigned long long>(c.processes_lost),
              static_cast<unsigned long long>(c.actor_restarts));
  EXPECT_EQ(lost, 0);
  EXPECT_GT(faults.load(), 10);
  // Every dead process was replaced, every ref released, every pipe closed.
  EXPECT_TRUE(manta::testing::eventually([&] { return manta::detail::runtime_process_ids().size() == processes; }))
      << manta::detail::runtime_process_ids().size() << " processes";
  EXPECT_TRUE(manta::testing::eventually([&] {
    return manta::detail::arena_used_bytes() == arena && manta::detail::object_count() == objects;
  })) << manta::detail::arena_used_bytes() << " bytes, " << manta::detail::object_count() << " objects";
  EXPECT_TRUE(manta::testing::eventually([&] { return manta::testing::open_fd_count() == fds; }))
      << manta::testing::open_fd_count() << " fds, was " << fds;
  manta::shutdown();
}

TEST(chaos, cancels_from_another_thread_while_processes_are_killed) {
  manta::init({.num_workers = 2});
  const std::size_t processes = manta::detail::runtime_process_ids().size();
  const std::size_t objects = manta::detail::object_count();
  const long n = sum_tasks;
  std::vector<manta::object_ref<long>> leaves, sums;
  for (long i = 0; i < n; ++i) leaves.push_back(manta::task(inc).max_retries(-1).remote(i));
  for (long i = 0; i < n; ++i)
    sums.push_back(manta::task(add).max_retries(-1).remote(leaves[i], leaves[(i + 1) % n]));
  std::vector<std::atomic<bool>> sum_cancelled(static_cast<std::size_t>(n));

  std::atomic<bool> stop{false};
  std::atomic<int> faults{0}, cancels{0};
  std::thread killer([&] {
    std::mt19937 rng(11);
    while (!stop.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(kill_scale * (2 + rng() % 7)));  // the chaos interval
      auto pids = manta::detail::runtime_process_ids();
      if (pids.size() < 2) continue;
      if (::kill(pids[1 + rng() % (pids.size() - 1)], SIGKILL) == 0) faults.fetch_add(1);
    }
  });
  std::thread canceller([&] {
    std::mt19937 rng(13);
    while (!stop.load()) {
      auto i = static_cast<std::size_t>(rng() % n);
      if (rng() % 2) {
        manta::cancel(leaves[i]);
      } else {
        sum_cancelled[i] = true;  // before the cancel: a failure seen later finds it set
        manta::cancel(sums[i]);
      }
      cancels.fetch_add(1);
      std::this_thread::yield();
    }
  });
  std::vector<bool> sum_ok(n);
  long values = 0, inconsistent = 0, other_errors = 0;
  for (long i = 0; i < n; ++i) {
    try {
      inconsistent += manta::get(sums[i], 120s) != (i + 1) + ((i + 1) % n + 1);
      sum_ok[i] = true;
      ++values;
    } catch (const manta::task_cancelled_error&) {
    } catch (const std::exception& e) {
      ++other_errors;
      ADD_FAILURE() << i << ": " << e.what();
    }
  }
  stop = true;
  killer.join();
  canceller.join();
  std::vector<bool> leaf_ok(n);
  for (long i = 0; i < n; ++i) {
    try {
      inconsistent += manta::get(leaves[i], 120s) != i + 1;
      leaf_ok[i] = true;
    } catch (const manta::task_cancelled_error&) {
    }
  }
  for (long i = 0; i < n; ++i) {
    bool inputs_ok = leaf_ok[i] && leaf_ok[(i + 1) % n];
    if (sum_ok[i]) inconsistent += !inputs_ok;                    // a value from a cancelled leaf
    else inconsistent += inputs_ok && !sum_cancelled[i].load();  // cancelled for no reason
  }
  std::printf("chaos with cancels: faults injected %d, cancels %d, sums computed %ld, "
              "inconsistent %ld\n",
              faults.load(), cancels.load(), values, inconsistent);
  EXPECT_EQ(inconsistent, 0);
  EXPECT_EQ(other_errors, 0);
  leaves.clear();
  sums.clear();
  EXPECT_TRUE(manta::testing::eventually([&] {
    return manta::detail::runtime_process_ids().size() == processes &&
           manta::detail::object_count() == objects;
  })) << manta::detail::object_count() << " objects";
  manta::shutdown();
}

}  // namespace

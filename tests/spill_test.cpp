// spill_test: a full arena writes objects nobody reads to the spill file and
// brings them back on get, get_view and task input; what cannot be made room for
// is a clear object_store_full, and nothing else breaks; spilled bytes leave the
// disk when their objects go, and no file is ever visible in log_dir.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "support.hpp"

namespace {
using manta::testing::runtime_fixture;
using manta::testing::temp_path;
namespace fs = std::filesystem;

constexpr std::size_t arena_bytes = 32 << 20;
constexpr std::size_t mib4 = (4 << 20) / sizeof(double);  // doubles in 4 MiB

std::vector<double> block(double v, std::size_t n = mib4) { return std::vector<double>(n, v); }
double sum_span(std::span<const double> xs) { return std::accumulate(xs.begin(), xs.end(), 0.0); }
double sum_through_refs(std::vector<manta::object_ref<std::vector<double>>> refs) {
  double s = 0;
  for (auto& r : refs) s += sum_span(manta::get_view(r).span());
  return s;
}
std::vector<double> make_block(double v, std::size_t n) { return block(v, n); }
double slow_sum(std::span<const double> xs) {
  std::this_thread::sleep_for(std::chrono::milliseconds(10));  // long enough to be killed in
  return sum_span(xs);
}
double first(std::span<const double> xs) { return xs[0]; }
/// Returns 1 once `gate` exists (0 after 60 s without it): holds a worker or an
/// actor busy for exactly as long as the test wants.
int held(std::string gate) {
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
       std::chrono::steady_clock::now() < until; std::this_thread::sleep_for(std::chrono::milliseconds(1)))
    if (::access(gate.c_str(), F_OK) == 0) return 1;
  return 0;
}
/// Holds a buffer (an extent being written) while it waits for a task whose
/// result needs that room: "object_store_full" once that task failed for it.
std::string buffer_then_wait(std::size_t n) {
  auto mine = manta::make_buffer<double>(n);
  try {
    manta::get(manta::task(make_block).remote(2.0, n), std::chrono::seconds(30));
    return "fit";
  } catch (const manta::object_store_full&) {
    return "object_store_full";
  } catch (const std::exception& e) {
    return e.what();
  }
}
/// Holds a buffer, says so (file `<gate>.<i>`), waits until the other one
/// does too, then asks for a second buffer as large.
std::string two_buffers(std::string gate, int i, std::size_t n) {
  auto mine = manta::make_buffer<double>(n);
  std::ofstream(gate + "." + std::to_string(i)).put('x');
  if (held(gate + "." + std::to_string(1 - i)) != 1) return "the other never came";
  try {
    auto more = manta::make_buffer<double>(n);
    return "fit";
  } catch (const manta::object_store_full&) {
    return "object_store_full";
  }
}
MANTA_REMOTE(sum_span, sum_through_refs, make_block, slow_sum, first, held, buffer_then_wait, two_buffers);

struct Summer {
  double add(std::span<const double> xs) { return total += slow_sum(xs); }
  int hold(std::string gate) { return held(gate); }
  double total = 0;
};
MANTA_ACTOR(Summer, &Summer::add, &Summer::hold);

using block_ref = manta::object_ref<std::vector<double>>;

class spilling : public runtime_fixture {
 protected:
  void SetUp() override {
    fs::remove_all(dir_);
    start(2, {.object_store_bytes = arena_bytes, .log_dir = dir_});
  }
  void TearDown() override {
    runtime_fixture::TearDown();
    EXPECT_TRUE(visible_files().empty()) << visible_files().front();
    fs::remove_all(dir_);
  }
  /// Files anyone could see under log_dir: the spill file never has a name there.
  std::vector<std::string> visible_files() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir_, ec); !ec && it != fs::end(it);
         it.increment(ec))
      if (it->is_regular_file()) out.push_back(it->path());
    return out;
  }
  std::vector<block_ref> put_blocks(int n) {
    std::vector<block_ref> refs;
    for (int i = 0; i < n; ++i) refs.push_back(manta::put(block(i)));
    return refs;
  }
  const std::string dir_ = temp_path("spill");
};

TEST_F(spilling, puts_beyond_the_arena_spill_and_come_back_on_get) {
  auto refs = put_blocks(20);  // 80 MiB into 32
  auto s = manta::detail::spilling();
  EXPECT_GE(s.spilled, 12u);
  EXPECT_GT(s.disk_bytes, 0u);
  EXPECT_LE(manta::detail::arena_used_bytes(), arena_bytes);
  EXPECT_TRUE(visible_files().empty());
  for (int i = 0; i < 20; ++i) {
    auto v = manta::get(refs[i]);
    ASSERT_EQ(v.size(), mib4);
    EXPECT_EQ(v.front(), i);
    EXPECT_EQ(v.back(), i);
  }
  for (int i = 19; i >= 0; --i) EXPECT_EQ(manta::get_view(refs[i])[12345], i);
  EXPECT_GT(manta::detail::spilling().restored, 0u);
}

TEST_F(spilling, tasks_read_spilled_arguments_and_refs) {
  auto refs = put_blocks(20);
  std::vector<manta::object_ref<double>> spans, through_refs;
  for (int i = 0; i < 20; ++i) {
    spans.push_back(manta::task(sum_span).remote(refs[i]));
    through_refs.push_back(manta::task(sum_through_refs).remote(std::vector<block_ref>{refs[i]}));
  }
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(manta::get(spans[i], std::chrono::seconds(30)), double(i) * mib4);
    EXPECT_EQ(manta::get(through_refs[i], std::chrono::seconds(30)), double(i) * mib4);
  }
}

TEST_F(spilling, task_results_make_room_by_spilling) {
  std::vector<block_ref> made;
  for (int i = 0; i < 20; ++i) made.push_back(manta::task(make_block).remote(double(i), mib4));
  for (int i = 0; i < 20; ++i) {
    auto v = manta::get(made[i], std::chrono::seconds(30));
    EXPECT_EQ(v.size(), mib4);
    EXPECT_EQ(v[99], i);
  }
  EXPECT_GT(manta::detail::spilling().spilled, 0u);
}

// Two workers writing results that fit only one at a time: the second waits
// for the first to be sealed (and then spills it) instead of failing, and the
// driver reading one back waits the same way for the other's. Both used to
// fail at random, depending on who asked first.
TEST_F(spilling, results_that_fit_only_one_at_a_time_wait_for_each_other_and_all_arrive) {
  constexpr std::size_t mib20 = 5 * mib4;
  for (int round = 0; round < 3; ++round) {
    std::vector<block_ref> made;
    for (int i = 0; i < 6; ++i) made.push_back(manta::task(make_block).remote(double(i), mib20));
    for (int i = 0; i < 6; ++i) {
      auto v = manta::get(made[i], std::chrono::seconds(60));
      ASSERT_EQ(v.size(), mib20);
      EXPECT_EQ(v[77], i);
    }
  }
  EXPECT_GT(manta::detail::spilling().spilled, 0u);
}

// A worker that holds the room (a buffer being written) while its task waits
// for the task needing it is not waited for: that would never end.
TEST_F(spilling, a_result_needing_room_a_waiting_task_holds_fails_at_once) {
  EXPECT_EQ(manta::get(manta::task(buffer_then_wait).remote(5 * mib4), std::chrono::seconds(60)),
            "object_store_full");
  EXPECT_EQ(manta::get(manta::task(make_block).remote(3.0, 5 * mib4), std::chrono::seconds(30))[9], 3.0);
}

// Two workers that each hold room and ask for more that only the other's could
// make: neither waits for the other for ever (each waits for room only from
// workers that are not waiting themselves). One fails, and the other then fits.
TEST_F(spilling, two_workers_each_waiting_for_the_others_room_do_not_wait_for_ever) {
  const std::string gate = manta::testing::temp_path("spill-two");
  auto a = manta::task(two_buffers).remote(gate, 0, 3 * mib4);  // 12 MiB each, twice, in 32 MiB
  auto b = manta::task(two_buffers).remote(gate, 1, 3 * mib4);
  std::multiset<std::string> got{manta::get(a, std::chrono::seconds(60)), manta::get(b, std::chrono::seconds(60))};
  EXPECT_EQ(got, (std::multiset<std::string>{"fit", "object_store_full"}));
  for (int i = 0; i < 2; ++i) ::unlink((gate + "." + std::to_string(i)).c_str());
}

// Calls queued on a busy actor must not pin their arguments: 24 calls of 4 MiB
// each (96 MiB) pass through a 32 MiB arena because the ones not yet running
// are spilled (they used to be sent at once, pinned, and the next put failed).
// The actor is held busy until all are submitted.
TEST_F(spilling, calls_queued_on_a_busy_actor_leave_their_arguments_spillable) {
  const std::string gate = manta::testing::temp_path("spill-gate");
  ::unlink(gate.c_str());
  auto a = manta::actor<Summer>().remote();
  auto busy = a.task(&Summer::hold).remote(gate);
  std::vector<manta::object_ref<double>> sums;
  for (int i = 0; i < 24; ++i) sums.push_back(a.task(&Summer::add).remote(manta::put(block(1))));
  std::ofstream(gate) << "open";
  EXPECT_EQ(manta::get(busy, std::chrono::seconds(60)), 1);
  EXPECT_EQ(manta::get(sums.back(), std::chrono::seconds(60)), 24.0 * mib4);
  EXPECT_GT(manta::detail::spilling().spilled, 0u);
  ::unlink(gate.c_str());
}

// The same for short tasks that placement would queue behind busy workers.
TEST_F(spilling, tasks_queued_behind_busy_workers_leave_their_arguments_spillable) {
  const std::string gate = manta::testing::temp_path("spill-gate");
  ::unlink(gate.c_str());
  for (int i = 0; i < 4; ++i) manta::get(manta::task(first).remote(block(1, 16)));  // known short
  auto busy1 = manta::task(held).remote(gate), busy2 = manta::task(held).remote(gate);
  std::vector<manta::object_ref<double>> firsts;
  for (int i = 0; i < 24; ++i) firsts.push_back(manta::task(first).remote(manta::put(block(i))));
  std::ofstream(gate) << "open";
  for (int i = 0; i < 24; ++i) EXPECT_EQ(manta::get(firsts[i], std::chrono::seconds(60)), i);
  EXPECT_EQ(manta::get(busy1, std::chrono::seconds(60)) + manta::get(busy2, std::chrono::seconds(60)), 2);
  EXPECT_GT(manta::detail::spilling().spilled, 0u);
  ::unlink(gate.c_str());
}

TEST_F(spilling, the_least_recently_used_object_goes_first) {
  auto refs = put_blocks(6);  // 24 MiB: no spill yet
  ASSERT_EQ(manta::detail::spilling().spilled, 0u);
  EXPECT_EQ(manta::get_view(refs[0])[0], 0);  // the oldest, used again
  auto more = put_blocks(3);
  ASSERT_GT(manta::detail::spilling().spilled, 0u);
  auto restored = manta::detail::spilling().restored;
  EXPECT_EQ(manta::get(refs[0])[0], 0);
  EXPECT_EQ(manta::detail::spilling().restored, restored);  // it stayed in memory
  EXPECT_EQ(manta::get(refs[1])[0], 1);
  EXPECT_EQ(manta::detail::spilling().restored, restored + 1);  // it went first
}

TEST_F(spilling, viewed_objects_stay_and_a_full_store_is_a_clear_error) {
  constexpr std::size_t mib8 = 2 * mib4;
  std::vector<block_ref> pinned;
  std::vector<manta::view<std::vector<double>>> views;
  for (int i = 0; i < 3; ++i) {
    pinned.push_back(manta::put(block(i, mib8)));
    views.push_back(manta::get_view(pinned.back()));
  }
  const double* where = views[0].data();
  auto others = put_blocks(10);  // each spills another: never a viewed one
  EXPECT_EQ(views[0].data(), where);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(views[i][mib8 - 1], i);

  // 24 MiB held by views: 12 MiB cannot fit, whatever is spilled.
  try {
    manta::put(block(7, 3 * mib4));
    ADD_FAILURE() << "a put that cannot fit did not throw";
  } catch (const manta::object_store_full& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(std::to_string(3 * (4 << 20))), std::string::npos) << what;
    EXPECT_NE(what.find("held by readers"), std::string::npos) << what;
  }
  // Larger than the whole arena: refused without spilling anything.
  auto spilled = manta::detail::spilling().spilled;
  EXPECT_THROW(manta::put(block(0, arena_bytes / sizeof(double) + 1)), manta::object_store_full);
  EXPECT_EQ(manta::detail::spilling().spilled, spilled);
  // A task whose result cannot fit fails with the same error.
  EXPECT_THROW(manta::get(manta::task(make_block).remote(1.0, 3 * mib4), std::chrono::seconds(30)),
               manta::object_store_full);

  // Nothing else broke: every object reads back, and once the views go there is room.
  for (int i = 0; i < 10; ++i) EXPECT_EQ(manta::get(others[i])[5], i);
  views.clear();
  EXPECT_EQ(manta::get(manta::put(block(7, 3 * mib4)))[0], 7);
  EXPECT_EQ(manta::get(manta::task(sum_span).remote(pinned[2])), 2.0 * mib8);
}

TEST_F(spilling, spilled_bytes_leave_the_disk_with_their_objects) {
  auto used = manta::detail::arena_used_bytes();
  {
    auto refs = put_blocks(20);
    ASSERT_GT(manta::detail::spilling().spilled_now, 0u);
    ASSERT_GT(manta::detail::spilling().disk_bytes, 0u);
    // Some go while spilled, some after being read back.
    for (int i = 0; i < 20; i += 3) EXPECT_EQ(manta::get(refs[i])[1], i);
  }
  auto s = manta::detail::spilling();
  EXPECT_EQ(s.spilled_now, 0u);
  EXPECT_EQ(s.disk_bytes, 0u);
  EXPECT_EQ(manta::detail::arena_used_bytes(), used);
  EXPECT_EQ(manta::detail::object_count(), 0u);
}

TEST_F(spilling, a_full_disk_fails_the_put_that_needed_room_and_nothing_else) {
  // The file size limit stands in for a full disk: writes past it fail (EFBIG).
  ::signal(SIGXFSZ, SIG_IGN);
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit small{6 << 20, old.rlim_max};
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::vector<block_ref> refs;
  std::string error;
  for (int i = 0; i < 20 && error.empty(); ++i) {
    try {
      refs.push_back(manta::put(block(i)));
    } catch (const manta::object_store_full& e) {
      error = e.what();
    }
  }
  // A task's result that needs room then fails saying why too.
  std::string result_error;
  try {
    manta::get(manta::task(make_block).remote(1.0, mib4), std::chrono::seconds(30));
  } catch (const manta::object_store_full& e) {
    result_error = e.what();
  }
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
  EXPECT_NE(result_error.find("spilling failed"), std::string::npos) << result_error;
  ::signal(SIGXFSZ, SIG_DFL);
  ASSERT_FALSE(error.empty()) << "no put failed with the disk full";
  EXPECT_NE(error.find("spilling failed"), std::string::npos) << error;
  EXPECT_NE(error.find("File too large"), std::string::npos) << error;
  // What was stored before is intact, spilled or not, and spilling works again.
  for (std::size_t i = 0; i < refs.size(); ++i) EXPECT_EQ(manta::get(refs[i])[3], double(i));
  auto more = put_blocks(10);
  EXPECT_EQ(manta::get(more[9])[0], 9);
}

TEST_F(spilling, threads_putting_and_reading_under_pressure_do_not_deadlock) {
  auto work = [](int seed) {
    std::vector<block_ref> mine;
    for (int i = 0; i < 30; ++i) {
      mine.push_back(manta::put(block(seed * 100 + i, mib4 / 2)));
      const auto& old = mine[static_cast<std::size_t>(i * 7 % (i + 1))];
      auto v = manta::get_view(old);
      EXPECT_EQ(v[0], v[mib4 / 2 - 1]);
      EXPECT_EQ(manta::get(manta::task(sum_span).remote(old), std::chrono::seconds(30)),
                v[0] * (mib4 / 2));
    }
  };
  std::thread a(work, 1), b(work, 2);
  a.join();
  b.join();
  EXPECT_GT(manta::detail::spilling().spilled, 0u);
}

TEST_F(spilling, workers_killed_while_reading_spilled_objects_leave_nothing_pinned) {
  auto refs = put_blocks(16);
  std::atomic<bool> stop{false};
  std::atomic<int> kills{0};
#if defined(__SANITIZE_THREAD__)
  // A sum over 4 MiB takes ten times longer there: kills as often would leave
  // no attempt the time to finish.
  constexpr int slower = 6;
#else
  constexpr int slower = 1;
#endif
  std::thread killer([&] {
    std::mt19937 rng(11);
    while (!stop.load()) {
      // The chaos interval, not a wait for anything.
      std::this_thread::sleep_for(std::chrono::milliseconds((15 + rng() % 20) * slower));
      auto pids = manta::detail::runtime_process_ids();
      if (pids.size() > 1 && ::kill(pids[1 + rng() % (pids.size() - 1)], SIGKILL) == 0) ++kills;
    }
  });
  std::vector<manta::object_ref<double>> sums, through_refs;
  for (int round = 0; round < 4; ++round)
    for (int i = 0; i < 16; ++i) {
      sums.push_back(manta::task(slow_sum).max_retries(-1).remote(refs[i]));
      through_refs.push_back(
          manta::task(sum_through_refs).max_retries(-1).remote(std::vector<block_ref>{refs[i]}));
    }
  int lost = 0;
  for (std::size_t k = 0; k < sums.size(); ++k) {
    double want = double(k % 16) * mib4;
    lost += manta::get(sums[k], std::chrono::seconds(60)) != want;
    lost += manta::get(through_refs[k], std::chrono::seconds(60)) != want;
  }
  stop = true;
  killer.join();
  std::printf("spill chaos: %d kills, %zu tasks, %d results lost, %llu spilled, %llu restored\n",
              kills.load(), 2 * sums.size(), lost,
              static_cast<unsigned long long>(manta::detail::spilling().spilled),
              static_cast<unsigned long long>(manta::detail::spilling().restored));
  EXPECT_EQ(lost, 0);
  // No pin outlived its reader: with every old object still referenced, 28 MiB
  // fit in the 32 MiB arena only if each of them can be spilled.
  EXPECT_EQ(manta::get_view(manta::put(block(5, 7 * mib4)))[0], 5);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(manta::get(refs[i])[7], i);
}

}  // namespace

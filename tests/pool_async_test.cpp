// pool_async_test: what manta::pool adds to map and imap, as multiprocessing.Pool
// does: lazy inputs read a bounded window ahead, map_async with callbacks on
// one thread, close / join / terminate, and a destructor that waits for the
// pool's own work.
#include <atomic>
#include <future>
#include <mutex>
#include <ranges>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "support.hpp"

namespace {
using namespace std::chrono_literals;
using manta::testing::fifo_gate;

int square(int x) {
  if (x < 0) throw std::domain_error("negative " + std::to_string(x));
  return x * x;
}
int add(int a, int b) { return a + b; }
int held(std::string gate) {
  manta::testing::wait_at_gate(gate);
  return 1;
}
MANTA_REMOTE(square, add, held);

class pool_async : public manta::testing::runtime_fixture {};

TEST_F(pool_async, a_lazy_input_is_read_a_bounded_window_ahead) {
  start(2);
  manta::pool p;
  std::atomic<int> read{0};
  auto numbers = std::views::iota(0) | std::views::transform([&](int i) {
                   ++read;
                   return i;
                 }) |
                 std::views::take(40000);  // squares fit an int
  static_assert(!std::ranges::sized_range<decltype(numbers)>);
  auto results = p.imap(square, numbers, 10);
  EXPECT_EQ(read.load(), 0) << "nothing is read before a result is asked for";
  auto it = results.begin();
  EXPECT_EQ(*it, 0);
  EXPECT_LE(read.load(), 10 * (2 * 2 + 1)) << "two chunks per worker ahead, and no more";
  int k = 0;
  for (; it != results.end(); ++it, ++k)
    if (*it != k * k) break;
  EXPECT_EQ(k, 40000);
  EXPECT_EQ(read.load(), 40000);
}

TEST_F(pool_async, map_starmap_and_imap_unordered_take_single_pass_inputs) {
  start(2);
  manta::pool p;
  std::istringstream text("1 2 3 4 5 6 7");
  EXPECT_EQ(p.map(square, std::views::istream<int>(text)), (std::vector<int>{1, 4, 9, 16, 25, 36, 49}));
  auto pairs = std::views::iota(0) | std::views::transform([](int i) { return std::tuple<int, int>(i, 1); }) |
               std::views::take(50);
  auto sums = p.starmap(add, pairs, 7);
  ASSERT_EQ(sums.size(), 50u);
  EXPECT_EQ(sums[49], 50);
  std::multiset<int> got;
  for (int y : p.imap_unordered(square, std::views::iota(0) | std::views::take(30) |
                                            std::views::filter([](int i) { return i % 2 == 0; })))
    got.insert(y);
  EXPECT_EQ(got.size(), 15u);
  EXPECT_EQ(*got.rbegin(), 28 * 28);
  EXPECT_THROW(p.map(square, std::vector<int>{1, -1}), manta::task_error);
  std::istringstream more("2 3");
  EXPECT_EQ(p.map_async(square, std::views::istream<int>(more)).get(30s), (std::vector<int>{4, 9}));
}

TEST_F(pool_async, map_async_runs_its_callbacks_on_one_thread_before_the_result_is_ready) {
  start(2);
  manta::pool p;
  std::mutex mu;
  std::set<std::thread::id> threads;
  std::vector<int> sums;
  std::vector<std::string> errors;
  std::vector<manta::async_result<int>> results;
  for (int k = 0; k < 6; ++k) {
    std::vector<int> xs{k, k + 1, k + 2};
    if (k == 3) xs[1] = -1;
    results.push_back(p.map_async(
        square, xs,
        {.on_result =
             [&](const std::vector<int>& ys) {
               std::lock_guard lock(mu);
               threads.insert(std::this_thread::get_id());
               sums.push_back(ys[0] + ys[1] + ys[2]);
             },
         .on_error =
             [&](std::exception_ptr e) {
               std::lock_guard lock(mu);
               threads.insert(std::this_thread::get_id());
               try {
                 std::rethrow_exception(e);
               } catch (const manta::task_error& t) {
                 errors.push_back(t.message());
               }
             }},
        1));
  }
  for (auto& r : results) ASSERT_TRUE(r.wait(30s));
  {
    std::lock_guard lock(mu);  // ready means the callback has run
    EXPECT_EQ(sums.size(), 5u);
    EXPECT_EQ(errors, std::vector<std::string>{"negative -1"});
    EXPECT_EQ(threads.size(), 1u) << "callbacks run on the pool's one result thread";
    EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u);
  }
  EXPECT_EQ(results[0].get(), (std::vector<int>{0, 1, 4}));
  EXPECT_TRUE(results[0].successful());
  EXPECT_FALSE(results[3].successful());
  EXPECT_THROW(results[3].get(), manta::task_error);
  EXPECT_EQ(p.starmap_async(add, std::vector<std::tuple<int, int>>{{1, 2}, {3, 4}}).get(30s),
            (std::vector<int>{3, 7}));
}

TEST_F(pool_async, an_async_result_that_is_not_ready_says_so) {
  start(2);
  manta::pool p;
  fifo_gate gate;
  auto r = p.map_async(held, std::vector<std::string>{gate.path()});
  EXPECT_FALSE(r.ready());
  EXPECT_FALSE(r.wait(20ms));
  EXPECT_THROW(r.successful(), manta::usage_error);
  EXPECT_THROW(r.get(20ms), manta::timeout_error);
  ASSERT_TRUE(gate.open());
  EXPECT_EQ(r.get(30s), std::vector<int>{1});
}

TEST_F(pool_async, a_throwing_callback_is_reported_and_the_pool_goes_on) {
  start(2);
  manta::pool p;
  testing::internal::CaptureStderr();
  auto r = p.map_async(square, std::vector<int>{1}, {.on_result = [](const std::vector<int>&) {
                                                       throw std::runtime_error("callback bug");
                                                     }});
  ASSERT_TRUE(r.wait(30s));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("a pool callback threw (dropped): callback bug"), std::string::npos) << err;
  EXPECT_EQ(p.map(square, std::vector<int>{3}), std::vector<int>{9});
}

TEST_F(pool_async, close_refuses_new_work_and_join_waits_for_what_was_given) {
  start(2);
  manta::pool p;
  EXPECT_THROW(p.join(), manta::usage_error) << "join before close";
  fifo_gate gate;
  auto held_one = p.apply_async(held, gate.path());
  std::atomic<int> called{0};
  p.map_async(square, std::vector<int>{1, 2, 3}, {.on_result = [&](const std::vector<int>&) { ++called; }});
  p.close();
  EXPECT_THROW(p.map(square, std::vector<int>{1}), manta::usage_error);
  EXPECT_THROW(p.apply_async(square, 1), manta::usage_error);
  auto joined = std::async(std::launch::async, [&] { p.join(); });
  EXPECT_EQ(joined.wait_for(100ms), std::future_status::timeout) << "join returned with a task still held";
  ASSERT_TRUE(gate.open());
  ASSERT_EQ(joined.wait_for(30s), std::future_status::ready);
  joined.get();
  EXPECT_EQ(called.load(), 1) << "join waits for the callbacks too";
  EXPECT_EQ(manta::get(held_one, 1s), 1);
}

TEST_F(pool_async, terminate_cancels_the_pools_unfinished_work_and_nothing_else) {
  start(2);
  manta::pool p;
  auto lazy = p.imap(square, std::views::iota(0) | std::views::take(1000000), 1);
  auto it = lazy.begin();
  EXPECT_EQ(*it, 0);
  fifo_gate gate, never;
  auto other = manta::task(held).remote(gate.path());  // not the pool's: left alone
  std::vector<manta::object_ref<int>> mine;
  for (int i = 0; i < 3; ++i) mine.push_back(p.apply_async(held, never.path()));
  std::atomic<int> errors{0};
  auto async = p.map_async(held, std::vector<std::string>{never.path()},
                           {.on_error = [&](std::exception_ptr) { ++errors; }});
  p.terminate();
  for (auto& r : mine) EXPECT_THROW(manta::get(r, 30s), manta::task_cancelled_error);
  EXPECT_THROW(async.get(30s), manta::task_cancelled_error);
  EXPECT_THROW(
      {
        for (; it != lazy.end(); ++it) {
        }
      },
      manta::task_cancelled_error);
  p.join();
  EXPECT_EQ(errors.load(), 1);
  ASSERT_TRUE(gate.open());
  EXPECT_EQ(manta::get(other, 30s), 1);
  EXPECT_EQ(manta::pool{}.map(square, std::vector<int>{4}), std::vector<int>{16}) << "the runtime goes on";
}

TEST_F(pool_async, the_last_copy_of_a_pool_waits_for_its_work) {
  start(2);
  fifo_gate gate;
  manta::object_ref<int> r;
  auto p = std::make_unique<manta::pool>();
  r = p->apply_async(held, gate.path());
  manta::pool copy = *p;
  p.reset();  // a copy remains: nothing to wait for here
  auto ended = std::async(std::launch::async, [c = std::move(copy)]() mutable { auto gone = std::move(c); });
  EXPECT_EQ(ended.wait_for(100ms), std::future_status::timeout) << "the pool went with its task still held";
  ASSERT_TRUE(gate.open());
  ASSERT_EQ(ended.wait_for(30s), std::future_status::ready);
  EXPECT_EQ(manta::get(r, 1s), 1);
}

TEST_F(pool_async, a_callback_may_hold_or_drop_the_pools_last_copy) {
  start(2);
  // The callback drops the last copy while it runs (on the pool's own thread).
  auto holder = std::make_shared<std::optional<manta::pool>>(manta::pool{});
  auto dropped = (*holder)->map_async(square, std::vector<int>{3},
                                      {.on_result = [holder](const std::vector<int>&) { holder->reset(); }});
  EXPECT_EQ(dropped.get(30s), (std::vector<int>{9}));
  EXPECT_TRUE(manta::testing::eventually([&] { return !holder->has_value(); }, 10s));
  // The callback holds a copy and the caller's goes first: the last one goes
  // when the job is done with, on the pool's thread.
  std::optional<manta::async_result<int>> kept;
  std::atomic<int> seen{0};
  {
    manta::pool p;
    kept = p.map_async(square, std::vector<int>{4, 5},
                       {.on_result = [p, &seen](const std::vector<int>& v) { seen = v[0] + v[1]; }});
  }
  EXPECT_EQ(kept->get(30s), (std::vector<int>{16, 25}));
  EXPECT_EQ(seen.load(), 41);
  EXPECT_EQ(manta::pool().map(square, std::vector<int>{6}), (std::vector<int>{36}));  // the runtime goes on
}

}  // namespace

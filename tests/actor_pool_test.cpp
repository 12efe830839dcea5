// actor_pool_test: map in order and map_unordered in finishing order over
// several actors that keep state; no actor is given an item before it finished
// its previous one; failures; bad input.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "support.hpp"

namespace {
using namespace std::chrono_literals;

/// Counts the items it is given and notes if two were ever in its hands at once
/// (the actors below run up to 4 calls at once: only the pool holds back).
struct Scorer {
  std::atomic<int> calls{0}, running{0};
  std::atomic<bool> overlapped{false};
  std::pair<int, int> score(int x) {
    ++calls;
    if (++running > 1) overlapped = true;
    std::this_thread::sleep_for(200us);  // long enough for a second item to arrive if one were sent
    --running;
    if (x < 0) throw std::invalid_argument("negative " + std::to_string(x));
    return {static_cast<int>(::getpid()), x * 10};
  }
  int seen() const { return calls; }
  /// Held back until the test opens the gate.
  int held(std::string gate) {
    ++calls;
    manta::testing::wait_at_gate(gate);
    return -1;
  }
  bool ever_overlapped() const { return overlapped; }
};
MANTA_ACTOR(Scorer, &Scorer::score, &Scorer::seen, &Scorer::held, &Scorer::ever_overlapped);

class actor_pool : public manta::testing::runtime_fixture {
 protected:
  std::vector<manta::actor_handle<Scorer>> make(int n) {
    std::vector<manta::actor_handle<Scorer>> v;
    for (int i = 0; i < n; ++i) v.push_back(manta::actor<Scorer>().max_concurrency(4).remote());
    return v;
  }
};

TEST_F(actor_pool, map_keeps_the_order_of_the_items_and_spreads_them) {
  start(2);
  auto actors = make(3);
  manta::actor_pool<Scorer> pool(actors);
  EXPECT_EQ(pool.size(), 3u);
  std::vector<int> xs;
  for (int i = 0; i < 300; ++i) xs.push_back(i);
  auto out = pool.map(&Scorer::score, xs);
  ASSERT_EQ(out.size(), xs.size());
  std::map<int, int> per_actor;
  for (int i = 0; i < 300; ++i) {
    EXPECT_EQ(out[static_cast<std::size_t>(i)].second, i * 10);
    ++per_actor[out[static_cast<std::size_t>(i)].first];
  }
  EXPECT_EQ(per_actor.size(), 3u) << "every actor took items";
  int total = 0;
  for (auto& a : actors) total += manta::get(a.task(&Scorer::seen).remote(), 10s);
  EXPECT_EQ(total, 300) << "each item went to exactly one actor, once";
  for (auto& a : actors)
    EXPECT_FALSE(manta::get(a.task(&Scorer::ever_overlapped).remote(), 10s)) << "an actor was given two items at once";
}

TEST_F(actor_pool, map_unordered_yields_every_result_once) {
  start(2);
  manta::actor_pool<Scorer> pool(make(2));
  std::multiset<int> got;
  for (const auto& [pid, v] : pool.map_unordered(&Scorer::score, std::vector<int>{5, 1, 4, 2, 3})) got.insert(v);
  EXPECT_EQ(got, (std::multiset<int>{10, 20, 30, 40, 50}));
}

TEST_F(actor_pool, a_failing_item_throws_from_map_and_once_from_map_unordered) {
  start(2);
  manta::actor_pool<Scorer> pool(make(2));
  EXPECT_THROW(pool.map(&Scorer::score, std::vector<int>{1, -2, 3}), manta::task_error);
  auto stream = pool.map_unordered(&Scorer::score, std::vector<int>{1, -2, 3, 4});
  int failures = 0, results = 0;
  for (int k = 0; k < 5; ++k) {
    try {
      if (!stream.next()) break;
      ++results;
    } catch (const manta::task_error&) {
      ++failures;
    }
  }
  EXPECT_EQ(failures, 1);
  EXPECT_EQ(results, 3);
}

TEST_F(actor_pool, a_loop_over_map_unordered_whose_first_result_failed_goes_on) {
  start(1);  // one actor: the failing item comes first
  manta::actor_pool<Scorer> pool(make(1));
  auto results = pool.map_unordered(&Scorer::score, std::vector<int>{-1, 2, 3});
  int failures = 0, got = 0;
  for (auto it = results.begin(); it != results.end();) {  // begin() threw the first failure
    try {
      (void)*it;
      ++got;
      ++it;
    } catch (const manta::task_error&) {
      ++failures;
    }
  }
  EXPECT_EQ(failures, 1);
  EXPECT_EQ(got, 2);
}

TEST_F(actor_pool, bad_input_is_refused) {
  start(1);
  EXPECT_THROW(manta::actor_pool<Scorer>(std::vector<manta::actor_handle<Scorer>>{}), manta::usage_error);
  EXPECT_THROW(manta::actor_pool<Scorer>(std::vector<manta::actor_handle<Scorer>>(2)), manta::usage_error);
  manta::actor_pool<Scorer> pool(make(1));
  EXPECT_TRUE(pool.map(&Scorer::score, std::vector<int>{}).empty());
}

TEST_F(actor_pool, submit_and_get_next_return_results_in_submission_order) {
  start(2);
  auto actors = make(2);
  manta::actor_pool<Scorer> pool(actors);
  EXPECT_FALSE(pool.has_next());
  for (int i = 0; i < 40; ++i) pool.submit(&Scorer::score, i);
  EXPECT_TRUE(pool.has_next());
  for (int i = 0; i < 40; ++i) EXPECT_EQ((pool.get_next<std::pair<int, int>>().second), i * 10);
  EXPECT_FALSE(pool.has_next());
  EXPECT_TRUE(pool.has_free());
  int total = 0;
  for (auto& a : actors) total += manta::get(a.task(&Scorer::seen).remote(), 10s);
  EXPECT_EQ(total, 40);
  for (auto& a : actors)
    EXPECT_FALSE(manta::get(a.task(&Scorer::ever_overlapped).remote(), 10s)) << "an actor was given two items at once";
}

TEST_F(actor_pool, get_next_unordered_takes_what_finished_while_an_older_call_is_held) {
  start(2);
  manta::actor_pool<Scorer> pool(make(2));
  manta::testing::fifo_gate g;
  pool.submit(&Scorer::held, g.path());
  pool.submit(&Scorer::score, 7);
  pool.submit(&Scorer::score, 8);  // queued: goes to the actor that finished 7
  EXPECT_EQ((pool.get_next_unordered<std::pair<int, int>>(30s).second), 70);
  EXPECT_EQ((pool.get_next_unordered<std::pair<int, int>>(30s).second), 80);
  EXPECT_TRUE(pool.has_free()) << "the actor that ran 7 and 8 is idle";
  EXPECT_THROW(pool.get_next<int>(50ms), manta::timeout_error);
  EXPECT_TRUE(pool.has_next()) << "a timed-out get_next leaves the result to come";
  ASSERT_TRUE(g.open());
  EXPECT_EQ(pool.get_next<int>(30s), -1);
  EXPECT_FALSE(pool.has_next());
}

TEST_F(actor_pool, get_next_rethrows_a_failed_call_once_and_checks_the_type) {
  start(2);
  manta::actor_pool<Scorer> pool(make(1));
  EXPECT_THROW(pool.get_next<int>(), manta::usage_error) << "nothing submitted";
  pool.submit(&Scorer::score, 1);
  pool.submit(&Scorer::score, -2);
  pool.submit(&Scorer::score, 3);
  EXPECT_THROW(pool.get_next<double>(), manta::usage_error) << "wrong result type";
  EXPECT_EQ((pool.get_next<std::pair<int, int>>().second), 10) << "a wrong type takes nothing";
  EXPECT_THROW((pool.get_next<std::pair<int, int>>()), manta::task_error);
  EXPECT_EQ((pool.get_next<std::pair<int, int>>().second), 30);
  EXPECT_FALSE(pool.has_next());
}

}  // namespace

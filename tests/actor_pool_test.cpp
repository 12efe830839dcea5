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
  bool ever_overlapped() const { return overlapped; }
};
MANTA_ACTOR(Scorer, &Scorer::score, &Scorer::seen, &Scorer::ever_overlapped);

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

TEST_F(actor_pool, bad_input_is_refused) {
  start(1);
  EXPECT_THROW(manta::actor_pool<Scorer>(std::vector<manta::actor_handle<Scorer>>{}), manta::usage_error);
  EXPECT_THROW(manta::actor_pool<Scorer>(std::vector<manta::actor_handle<Scorer>>(2)), manta::usage_error);
  manta::actor_pool<Scorer> pool(make(1));
  EXPECT_TRUE(pool.map(&Scorer::score, std::vector<int>{}).empty());
}

}  // namespace

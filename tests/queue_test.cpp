// queue_test: manta::queue<T> shared by the driver, tasks and actors: FIFO
// order, bounded puts, blocking gets woken from another process, more waiting
// callers than its home has threads, large values and refs as items, and items
// that outlive a process killed after putting them.
#include <signal.h>

#include <algorithm>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "support.hpp"

namespace {
using namespace std::chrono_literals;

int produce(manta::queue<int> q, int first, int n) {
  for (int i = first; i < first + n; ++i) q.put(i);
  return n;
}
int take_one(manta::queue<int> q) { return q.get(30s); }
int put_then_die(manta::queue<int> q) {
  for (int i = 0; i < 3; ++i) q.put(100 + i);
  ::raise(SIGKILL);
  return 0;
}
long sum_of_ref(manta::queue<manta::object_ref<std::vector<long>>> q) {
  auto v = manta::get(q.get(30s));
  long s = 0;
  for (long x : v) s += x;
  return s;
}
int fill_bounded(manta::queue<int> q) {
  for (int i = 0; i < 5; ++i) q.put(i);  // blocks while the driver has not taken enough
  return 5;
}
int take_three(manta::queue<int> q) { return q.get(30s) + q.get(30s) + q.get(30s); }
int held_at_gate(std::string gate) {
  manta::testing::wait_at_gate(gate);
  return 1;
}
MANTA_REMOTE(produce, take_one, put_then_die, sum_of_ref, fill_bounded, take_three, held_at_gate);

struct Consumer {
  manta::queue<std::string> q;
  explicit Consumer(manta::queue<std::string> queue) : q(std::move(queue)) {}
  std::string next() { return q.get(30s); }
};
MANTA_ACTOR(Consumer, &Consumer::next);

class queue_test : public manta::testing::runtime_fixture {};

TEST_F(queue_test, items_come_out_in_the_order_they_went_in) {
  start(2);
  manta::queue<int> q;
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.try_get(), std::nullopt);
  for (int i = 0; i < 100; ++i) q.put(i);
  EXPECT_EQ(q.size(), 100u);
  manta::queue<int> copy = q;  // the same queue
  for (int i = 0; i < 100; ++i) ASSERT_EQ(copy.get(), i);
  EXPECT_THROW(q.get(30ms), manta::timeout_error);
  EXPECT_EQ(q.maxsize(), 0u);
}

TEST_F(queue_test, tasks_and_actors_share_it) {
  start(2);
  manta::queue<int> q;
  std::vector<manta::object_ref<int>> producers;
  for (int k = 0; k < 4; ++k) producers.push_back(manta::task(produce).remote(q, k * 250, 250));
  std::set<int> seen;
  for (int i = 0; i < 1000; ++i) seen.insert(q.get(30s));
  EXPECT_EQ(seen.size(), 1000u);
  EXPECT_EQ(*seen.rbegin(), 999);
  for (auto& p : producers) EXPECT_EQ(manta::get(p, 30s), 250);

  manta::queue<std::string> words;
  auto consumer = manta::actor<Consumer>().remote(words);
  auto first = consumer.task(&Consumer::next).remote();  // waits in the actor for a put
  words.put("hello");
  words.put(std::string(3 << 20, 'x'));  // 3 MB: through the object store
  EXPECT_EQ(manta::get(first, 30s), "hello");
  EXPECT_EQ(manta::get(consumer.task(&Consumer::next).remote(), 30s).size(), 3u << 20);
}

TEST_F(queue_test, a_get_waiting_in_a_task_is_woken_by_a_put_from_the_driver) {
  start(2);
  manta::queue<int> q;
  auto r = manta::task(take_one).remote(q);
  EXPECT_EQ(manta::wait(std::vector{r}, 1, 50ms).first.size(), 0u) << "it waits";
  q.put(42);
  EXPECT_EQ(manta::get(r, 30s), 42);
}

TEST_F(queue_test, a_full_queue_holds_puts_back) {
  start(2);
  manta::queue<int> q(2);
  q.put(1);
  EXPECT_TRUE(q.try_put(2));
  EXPECT_FALSE(q.try_put(3));
  EXPECT_THROW(q.put(3, 30ms), manta::timeout_error);
  auto filler = manta::task(fill_bounded).remote(q);
  std::vector<int> got;
  for (int i = 0; i < 7; ++i) got.push_back(q.get(30s));
  EXPECT_EQ(manta::get(filler, 30s), 5);
  EXPECT_EQ(got, (std::vector<int>{1, 2, 0, 1, 2, 3, 4}));
  EXPECT_LE(q.size(), 2u);
}

TEST_F(queue_test, more_waiting_getters_than_its_home_has_threads_all_get_an_item) {
  start(1);
  manta::queue<int> q;
  const int getters = manta::detail::queue_store::threads + 8;
  std::vector<std::future<int>> waiting;
  for (int i = 0; i < getters; ++i) waiting.push_back(std::async(std::launch::async, [q]() mutable { return q.get(60s); }));
  for (int i = 0; i < getters; ++i) q.put(i);
  std::set<int> got;
  for (auto& w : waiting) {
    ASSERT_EQ(w.wait_for(60s), std::future_status::ready);
    got.insert(w.get());
  }
  EXPECT_EQ(got.size(), static_cast<std::size_t>(getters));
}

TEST_F(queue_test, refs_in_items_keep_their_objects_alive) {
  start(2);
  manta::queue<manta::object_ref<std::vector<long>>> q;
  {
    std::vector<long> big(1 << 20, 2);
    q.put(manta::put(big));  // the only ref left is the one in the queue
  }
  EXPECT_EQ(manta::get(manta::task(sum_of_ref).remote(q), 30s), 2L << 20);
}

TEST_F(queue_test, items_outlive_a_process_killed_after_putting_them) {
  start(2);
  manta::queue<int> q;
  auto r = manta::task(put_then_die).max_retries(0).remote(q);
  EXPECT_THROW(manta::get(r, 30s), manta::worker_crashed_error);
  EXPECT_EQ(q.size(), 3u);
  EXPECT_EQ(q.get(), 100);
  EXPECT_EQ(q.get(), 101);
  EXPECT_EQ(q.get(), 102);
  q.put(7);  // and it goes on
  EXPECT_EQ(q.get(1s), 7);
}

TEST(queue_misuse, a_queue_needs_a_runtime_at_its_first_use_only) {
  manta::queue<int> q;  // no process yet: building one without a runtime is fine
  EXPECT_THROW(q.put(1), manta::usage_error);
}

TEST_F(queue_test, a_consumer_never_nests_on_the_producer_it_waits_for) {
  // A task waiting in put lends its worker's CPU; a task nested on it now would
  // sit on top of the producer. A consumer there would wait for puts the
  // producer cannot make until the consumer returns: it must wait for a free worker.
  start(2);
  manta::queue<int> q(1);
  manta::testing::fifo_gate gate;
  auto busy = manta::task(held_at_gate).remote(gate.path());  // the other worker
  auto producer = manta::task(fill_bounded).remote(q);        // blocks in its second put
  ASSERT_TRUE(manta::testing::eventually([&] { return q.size() == 1; }, 10s));
  auto consumer = manta::task(take_three).remote(q);
  ASSERT_TRUE(gate.open());
  EXPECT_EQ(manta::get(consumer, 30s), 0 + 1 + 2);
  for (int i = 3; i < 5; ++i) EXPECT_EQ(q.get(30s), i);
  EXPECT_EQ(manta::get(producer, 30s), 5);
  EXPECT_EQ(manta::get(busy, 30s), 1);
}

}  // namespace

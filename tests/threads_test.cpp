// threads_test: every driver thread may call the API at once: tasks, puts and
// gets of large values, actors created, named, found and called, waits and
// cancels, from several threads of one program, with every result checked.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "support.hpp"

namespace {
using namespace std::chrono_literals;

int square(int x) { return x * x; }
double sum(std::span<const double> xs) {
  double s = 0;
  for (double x : xs) s += x;
  return s;
}
int sleepy(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
/// True once `path` exists; false after 30 s without it.
bool waits_for_file(std::string path) {
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
       std::chrono::steady_clock::now() < until;
       std::this_thread::sleep_for(std::chrono::milliseconds(1)))
    if (::access(path.c_str(), F_OK) == 0) return true;
  return false;
}
MANTA_REMOTE(square, sum, sleepy, waits_for_file);

struct Tally {
  explicit Tally(int start) : n(start) {}
  int add(int k) { return n += k; }
  int n;
};
MANTA_ACTOR(Tally, &Tally::add);

class threads : public manta::testing::runtime_fixture {
 protected:
  void SetUp() override { start(2); }
};

TEST_F(threads, four_driver_threads_use_every_call_at_once) {
  constexpr int n_threads = 4;
  std::atomic<int> failures{0};
  std::vector<std::string> first_error(n_threads);
  auto fail = [&](int t, const std::string& what) {
    if (failures.fetch_add(1) == 0 || first_error[static_cast<std::size_t>(t)].empty())
      first_error[static_cast<std::size_t>(t)] = what;
  };
  std::mutex waits_mu;
  std::vector<std::thread> ts;
  for (int t = 0; t < n_threads; ++t)
    ts.emplace_back([&, t] {
      try {
        // Tasks, in bulk, gathered.
        std::vector<manta::object_ref<int>> refs;
        for (int i = 0; i < 2000; ++i) refs.push_back(manta::task(square).remote(i + t));
        auto vals = manta::get(refs, 30s);
        for (int i = 0; i < 2000; ++i)
          if (vals[static_cast<std::size_t>(i)] != (i + t) * (i + t)) fail(t, "wrong square");
        // Large values through the store, read in place by a task.
        for (int i = 0; i < 20; ++i) {
          auto big = manta::put(std::vector<double>(100000, t + 1.0));
          if (manta::get(manta::task(sum).remote(big), 30s) != 100000.0 * (t + 1)) fail(t, "wrong sum");
          if (manta::get_view(big)[99999] != t + 1.0) fail(t, "wrong view");
        }
        // An actor of its own, named so the next thread finds it.
        auto mine = manta::actor<Tally>().name("tally-" + std::to_string(t)).remote(t);
        for (int i = 1; i <= 100; ++i) mine.task(&Tally::add).remote(1);
        if (manta::get(mine.task(&Tally::add).remote(0), 30s) != t + 100) fail(t, "wrong tally");
        std::string other = "tally-" + std::to_string((t + 1) % n_threads);
        // Created by another thread, maybe not yet (that thread may still be
        // gathering its tasks): look until it appears, within a bound.
        const auto deadline = std::chrono::steady_clock::now() + 30s;
        for (;;) {
          try {
            auto theirs = manta::get_actor<Tally>(other);
            manta::get(theirs.task(&Tally::add).remote(0), 30s);
            break;
          } catch (const manta::usage_error&) {
            if (std::chrono::steady_clock::now() > deadline) throw;
            std::this_thread::yield();
          }
        }
        // Waits and cancels, one thread at a time: two threads' 60 s tasks
        // would hold both workers, and the short tasks they wait for could
        // then run nowhere (as in Ray, or any pool of two).
        std::lock_guard one_at_a_time(waits_mu);
        auto slow = manta::task(sleepy).remote(60000);
        auto fast = manta::task(sleepy).remote(1);
        auto [ready, pending] = manta::wait(std::vector{slow, fast}, 1, 30s);
        if (ready.size() != 1 || !(ready[0] == fast)) fail(t, "wait picked the wrong one");
        manta::cancel(slow);
        try {
          manta::get(slow, 30s);
          fail(t, "a cancelled task returned");
        } catch (const manta::task_cancelled_error&) {
        }
      } catch (const std::exception& e) {
        fail(t, e.what());
      }
    });
  for (auto& th : ts) th.join();
  EXPECT_EQ(failures.load(), 0) << first_error[0] << " | " << first_error[1] << " | " << first_error[2]
                                << " | " << first_error[3];
  // The runtime is whole afterwards.
  EXPECT_EQ(manta::get(manta::task(square).remote(12), 30s), 144);
  // (Workers killed to cancel give their CPU back once their deaths are handled.)
  EXPECT_TRUE(manta::testing::eventually([] { return manta::available_resources().at("CPU") == 2; }));
}

TEST_F(threads, a_thread_waiting_in_get_holds_back_no_other_thread) {
  // A thread blocked in get on a task that ends only once the other threads have
  // submitted and gathered 9,000 tasks: if its wait held them back, neither side
  // would finish (the gate task gives up after 30 s and the test fails).
  const std::string gate = manta::testing::temp_path("threads-gate");
  ::unlink(gate.c_str());
  auto blocker = manta::task(waits_for_file).remote(gate);
  std::thread waiter([&] { EXPECT_TRUE(manta::get(blocker, 40s)); });
  std::vector<std::thread> submitters;
  for (int t = 0; t < 3; ++t)
    submitters.emplace_back([] {
      std::vector<manta::object_ref<int>> refs;
      for (int i = 0; i < 3000; ++i) refs.push_back(manta::task(square).remote(i));
      auto vals = manta::get(refs, 30s);
      EXPECT_EQ(vals[2999], 2999 * 2999);
    });
  for (auto& th : submitters) th.join();
  std::ofstream(gate) << "open";
  waiter.join();
  ::unlink(gate.c_str());
}

}  // namespace

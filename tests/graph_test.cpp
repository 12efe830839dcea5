// graph_test: random task graphs checked against a model computed in the test.
// Each node adds its index to the values of up to three earlier nodes; its
// inputs arrive resolved, as borrowed refs read inside the task, or through a
// nested task; some nodes throw, and the failure must reach exactly the nodes
// that depend on them; some results are large (in the arena), some inline; some
// nodes are actor calls; many refs are dropped as soon as they are submitted.
// Afterwards nothing is left. GRAPH_SEED=n varies the graphs.
#include <cstdio>
#include <cstdlib>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "support.hpp"

namespace {
using namespace std::chrono_literals;
using value = std::vector<long>;  // its sum is the node's value
using value_ref = manta::object_ref<value>;

long total(std::span<const long> v) {
  long s = 0;
  for (long x : v) s += x;
  return s;
}
/// The node's result: `sum` spread over `size` elements (size > 8192: stored in the arena).
value make(long sum, long size) {
  value v(static_cast<std::size_t>(size), 0);
  v[0] = sum;
  return v;
}
value resolved(long i, long size, bool fail, value a, value b, value c) {
  if (fail) throw std::runtime_error("node " + std::to_string(i) + " fails");
  return make(i + total(a) + total(b) + total(c), size);
}
value borrowed(long i, long size, bool fail, std::vector<value_ref> inputs) {
  if (fail) throw std::runtime_error("node " + std::to_string(i) + " fails");
  long sum = i;
  for (auto& r : inputs) sum += total(manta::get_view(r).span());  // read in place
  return make(sum, size);
}
value nested(long i, long size, bool fail, std::vector<value_ref> inputs) {
  return manta::get(manta::task(borrowed).remote(i, size, fail, inputs));
}
MANTA_REMOTE(resolved, borrowed, nested);

/// Combines like `borrowed`, in an actor's process (its calls run in order).
struct Combiner {
  value combine(long i, long size, bool fail, std::vector<value_ref> inputs) {
    return borrowed(i, size, fail, std::move(inputs));
  }
};
MANTA_ACTOR(Combiner, &Combiner::combine);

class graphs : public manta::testing::runtime_per_workers {};
INSTANTIATE_TEST_SUITE_P(workers, graphs, ::testing::Values(1, 2, 4));

TEST_P(graphs, random_graphs_compute_what_the_model_says_and_leave_nothing) {
  const std::size_t objects = manta::detail::object_count();
  const std::size_t arena = manta::detail::arena_used_bytes();
  std::mt19937 rng(static_cast<unsigned>(GetParam()) * 7919u + (std::getenv("GRAPH_SEED") ? std::atoi(std::getenv("GRAPH_SEED")) : 0));
  const int n = 400;
  const value_ref zero = manta::put(value{0});
  std::vector<value_ref> refs(n);     // empty once dropped
  std::vector<long> model(n);         // the node's value, if it does not fail
  std::vector<bool> fails(n);         // the node fails, or an input does
  std::vector<std::vector<int>> inputs(n);
  std::vector<value_ref> live;        // what later nodes may take as inputs
  std::vector<int> live_index;
  std::vector<manta::actor_handle<Combiner>> combiners;
  for (int k = 0; k < 2; ++k) combiners.push_back(manta::actor<Combiner>().remote());
  for (int i = 0; i < n; ++i) {
    const bool throws = rng() % 40 == 0;
    const long size = rng() % 4 == 0 ? 10000 : 1 + rng() % 4;
    std::vector<value_ref> in;
    const int k = live.empty() ? 0 : static_cast<int>(rng() % 4);
    model[i] = i;
    fails[i] = throws;
    for (int j = 0; j < k; ++j) {
      std::size_t pick = rng() % live.size();
      in.push_back(live[pick]);
      inputs[i].push_back(live_index[pick]);
      model[i] += model[live_index[pick]];
      fails[i] = fails[i] || fails[live_index[pick]];
    }
    value_ref r;
    switch (rng() % 4) {
      case 0:
        while (in.size() < 3) in.push_back(zero);
        r = manta::task(resolved).remote(long{i}, size, throws, in[0], in[1], in[2]);
        break;
      case 1:
        r = manta::task(borrowed).remote(long{i}, size, throws, in);
        break;
      case 2:
        r = manta::task(nested).remote(long{i}, size, throws, in);
        break;
      default:
        r = combiners[rng() % 2].task(&Combiner::combine).remote(long{i}, size, throws, in);
    }
    live.push_back(r);
    live_index.push_back(i);
    if (live.size() > 30) {  // inputs come from the recent past; older refs may go
      live.erase(live.begin());
      live_index.erase(live_index.begin());
    }
    if (rng() % 3 != 0) refs[i] = r;  // a third are dropped at once (their dependents hold them)
  }
  live.clear();
  int values = 0, failures = 0;
  for (int i = 0; i < n; ++i) {
    if (!refs[i].valid()) continue;
    try {
      EXPECT_EQ(total(manta::get(refs[i], 60s)), model[i]) << "node " << i;
      EXPECT_FALSE(fails[i]) << "node " << i << " should have failed";
      ++values;
    } catch (const manta::task_error& e) {
      EXPECT_TRUE(fails[i]) << "node " << i << ": " << e.what();
      ++failures;
    }
  }
  std::printf("random graph: %d nodes read, %d values, %d failures\n", values + failures, values,
              failures);
  EXPECT_GT(values, 0);
  EXPECT_GT(failures, 0);
  refs.clear();
  combiners.clear();
  EXPECT_TRUE(manta::testing::eventually([&] {
    return manta::detail::object_count() == objects + 1 && manta::detail::arena_used_bytes() == arena;
  })) << manta::detail::object_count() << " objects, " << manta::detail::arena_used_bytes() << " bytes";
}

}  // namespace

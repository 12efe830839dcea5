// tree_reduce: 100 generated arrays summed pairwise by tasks. A linear chain of
// additions must run one after another; a tree of additions runs each level in
// parallel. Refs are passed straight to the next task: no value returns to the
// driver until the end.
#include <chrono>
#include <cstdio>
#include <deque>
#include <numeric>
#include <random>
#include <vector>

#include <manta/manta.hpp>

constexpr std::size_t length = 200000;
constexpr int arrays = 100;

std::vector<double> make_array(int seed) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(seed));
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> v(length);
  for (double& x : v) x = u(rng);
  return v;
}

std::vector<double> add(std::span<const double> a, std::span<const double> b) {
  std::vector<double> out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = a[i] + b[i];
  return out;
}
MANTA_REMOTE(make_array, add);

using ref = manta::object_ref<std::vector<double>>;

ref linear(const std::vector<ref>& leaves) {
  ref acc = leaves[0];
  for (std::size_t i = 1; i < leaves.size(); ++i) acc = manta::task(add).remote(acc, leaves[i]);
  return acc;
}

ref tree(const std::vector<ref>& leaves) {
  std::deque<ref> level(leaves.begin(), leaves.end());
  while (level.size() > 1) {
    ref a = level.front();
    level.pop_front();
    ref b = level.front();
    level.pop_front();
    level.push_back(manta::task(add).remote(a, b));
  }
  return level.front();
}

int main() {
  manta::init({.num_workers = 2});
  std::vector<ref> leaves;
  for (int i = 0; i < arrays; ++i) leaves.push_back(manta::task(make_array).remote(i));
  manta::wait(leaves, leaves.size());

  std::vector<double> expect(length, 0.0);
  for (int i = 0; i < arrays; ++i) {
    auto v = make_array(i);
    for (std::size_t k = 0; k < length; ++k) expect[k] += v[k];
  }
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  auto chain = manta::get_view(linear(leaves));
  auto t1 = clock::now();
  auto pairs = manta::get_view(tree(leaves));
  auto t2 = clock::now();

  auto close = [&](const manta::view<std::vector<double>>& v) {
    for (std::size_t k = 0; k < length; ++k)
      if (std::abs(v[k] - expect[k]) > 1e-9) return false;
    return v.size() == length;
  };
  std::printf("sum of %d arrays of %zu doubles\n", arrays, length);
  std::printf("linear chain: %.1f ms, 99 additions one after another\n",
              std::chrono::duration<double, std::milli>(t1 - t0).count());
  std::printf("tree:         %.1f ms, 99 additions in 7 parallel levels\n",
              std::chrono::duration<double, std::milli>(t2 - t1).count());
  bool ok = close(chain) && close(pairs);
  std::printf("results %s\n", ok ? "match" : "DIFFER");
  manta::shutdown();
  return ok ? 0 : 1;
}

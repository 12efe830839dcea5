// manta_workloads: the workloads of ../shared/peers (W1 empty tasks in bulk, W2
// blocking round trip, W3 cold start and 4 x sleep(1 s), W4 moving average, W5
// large arguments, W7 tree reduce) run on manta, printed as a markdown table of
// medians to set beside the peers' RESULTS.md. Same method: one untimed warm-up,
// then R timed runs, median reported.
//
//   build/bench/manta_workloads [runs=5] [W1 W2 ...]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <manta/manta.hpp>

#include "kernels.hpp"

namespace {

int noop(int x) { return x; }
int sleep1(int x) {
  std::this_thread::sleep_for(std::chrono::seconds(1));
  return x;
}
double asum(std::span<const double> a) { return std::accumulate(a.begin(), a.end(), 0.0); }
std::vector<double> make_leaf(int i) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(i));
  std::uniform_real_distribution<double> u;
  std::vector<double> v(1000);
  for (double& x : v) x = u(rng);
  return v;
}
std::vector<double> add(std::span<const double> a, std::span<const double> b) {
  std::vector<double> out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = a[i] + b[i];
  return out;
}

using manta_bench::n;
constexpr auto ma_rows = manta_bench::moving_average_rows;
std::vector<double> ma_row(std::span<const double> m, int row) {
  std::vector<double> out(n);
  ma_rows(m.data(), row, 1, out.data());
  return out;
}
manta::buffer<double> ma_block(std::span<const double> m, int first, int rows) {
  auto out = manta::make_buffer<double>(static_cast<std::size_t>(rows) * n);
  ma_rows(m.data(), first, rows, out.data());
  return out;
}
MANTA_REMOTE(noop, sleep1, asum, make_leaf, add, ma_row, ma_block);

class Counter {
 public:
  int incr() { return ++n_; }

 private:
  int n_ = 0;
};
MANTA_ACTOR(Counter, &Counter::incr);

using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
/// One warm-up, then `runs` timed runs; the median in seconds.
double timed(int runs, const std::function<void()>& f) {
  f();
  std::vector<double> ts;
  for (int i = 0; i < runs; ++i) {
    auto t0 = clock_type::now();
    f();
    ts.push_back(seconds_since(t0));
  }
  return median(ts);
}
void row(const char* w, const std::string& variant, const std::string& figure) {
  std::printf("| %s | %s | %s |\n", w, variant.c_str(), figure.c_str());
}
std::string fmt(const char* f, double v) {
  char b[256];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "wrong result in %s\n", what);
    std::exit(1);
  }
}

void w1(int runs) {
  manta::init({.num_workers = 2});
  const int count = 100000;
  double s = timed(runs, [&] {
    std::vector<manta::object_ref<int>> refs;
    refs.reserve(count);
    for (int i = 0; i < count; ++i) refs.push_back(manta::task(noop).remote(i));
    check(manta::get(refs).back() == count - 1, "W1");
  });
  row("W1", "100,000 tasks submitted one by one, then get", fmt("%.0f tasks/s", count / s));
  std::vector<int> xs(count);
  std::iota(xs.begin(), xs.end(), 0);
  manta::pool p;
  s = timed(runs, [&] { check(p.map(noop, xs).back() == count - 1, "W1 map"); });
  row("W1", "pool.map, automatic chunks", fmt("%.0f items/s", count / s));
  s = timed(runs, [&] { check(p.map(noop, xs, 1).back() == count - 1, "W1 map 1"); });
  row("W1", "pool.map, chunksize=1", fmt("%.0f items/s", count / s));
  manta::shutdown();
}

void w2(int runs) {
  manta::init({.num_workers = 2});
  const int count = 5000;
  double s = timed(runs, [&] {
    for (int i = 0; i < count; ++i) check(manta::get(manta::task(noop).remote(i)) == i, "W2");
  });
  row("W2", "submit one no-op and get it, 5,000 times", fmt("%.2f us per round trip", s / count * 1e6));
  manta::shutdown();
}

void w3(int runs) {
  std::vector<double> start, first, sleeps, stop;
  for (int i = 0; i < runs; ++i) {
    auto t0 = clock_type::now();
    manta::init({.num_workers = 4});
    start.push_back(seconds_since(t0));
    check(manta::get(manta::task(noop).remote(1)) == 1, "W3");
    first.push_back(seconds_since(t0));
    auto t1 = clock_type::now();
    std::vector<manta::object_ref<int>> refs;
    for (int k = 0; k < 4; ++k) refs.push_back(manta::task(sleep1).remote(k));
    check(manta::get(refs) == std::vector<int>{0, 1, 2, 3}, "W3 sleep");
    sleeps.push_back(seconds_since(t1));
    auto t2 = clock_type::now();
    manta::shutdown();
    stop.push_back(seconds_since(t2));
  }
  row("W3", "init with 4 workers", fmt("%.2f ms", median(start) * 1e3));
  row("W3", "init + first result", fmt("%.2f ms", median(first) * 1e3));
  row("W3", "4 x sleep(1 s) on 4 workers", fmt("%.3f s", median(sleeps)));
  row("W3", "shutdown", fmt("%.2f ms", median(stop) * 1e3));
}

void w4(int runs) {
  manta::init({.num_workers = 2});
  std::vector<double> m = manta_bench::random_matrix();
  auto shared = manta::put(m);
  // The sequential baseline writes into an output allocated once: the fastest loop.
  std::vector<double> expect(m.size());
  double seq = timed(runs, [&] { ma_rows(m.data(), 0, n, expect.data()); });
  double rows = timed(runs, [&] {
    std::vector<manta::object_ref<std::vector<double>>> refs;
    for (int r = 0; r < n; ++r) refs.push_back(manta::task(ma_row).remote(shared, r));
    auto out = manta::get(refs);
    check(out[7][9] == expect[7 * n + 9], "W4 rows");
  });
  double blocks = timed(runs, [&] {
    auto a = manta::task(ma_block).remote(shared, 0, n / 2);
    auto b = manta::task(ma_block).remote(shared, n / 2, n / 2);
    auto va = manta::get_view(a);
    auto vb = manta::get_view(b);
    check(vb[9] == expect[(n / 2) * n + 9], "W4 blocks");
  });
  row("W4", "sequential C++ loop", fmt("%.2f ms", seq * 1e3));
  row("W4", "1000 row tasks (span of the shared matrix in, 8 KB vector out)",
      fmt("%.2f ms", rows * 1e3) + fmt(" (%.2fx)", seq / rows));
  row("W4", "2 block tasks (span in, buffer out)", fmt("%.2f ms", blocks * 1e3) + fmt(" (%.2fx)", seq / blocks));
  manta::shutdown();
}

void w5(int runs) {
  manta::init({.num_workers = 2});
  for (std::size_t mib : {1, 100, 1024}) {
    std::vector<double> a(mib * (1 << 20) / sizeof(double), 1.0);
    const double expect = static_cast<double>(a.size());
    int r = mib >= 1024 ? 3 : runs;
    double direct = timed(r, [&] { check(manta::get(manta::task(asum).remote(a)) == expect, "W5"); });
    row("W5", fmt("asum(array of %.0f MiB) passed by value (stored once, read in place)", double(mib)),
        fmt("%.2f GB/s", a.size() * sizeof(double) / direct / 1e9));
    auto ref = manta::put(a);
    double by_ref = timed(r, [&] { check(manta::get(manta::task(asum).remote(ref)) == expect, "W5 ref"); });
    row("W5", fmt("asum(ref to a stored %.0f MiB array)", double(mib)),
        fmt("%.2f GB/s", a.size() * sizeof(double) / by_ref / 1e9));
  }
  manta::shutdown();
}

void w6(int runs) {
  manta::init({.num_workers = 2});
  const int async_calls = 100000, sync_calls = 5000;
  double s = timed(runs, [&] {
    auto c = manta::actor<Counter>().remote();
    std::vector<manta::object_ref<int>> refs;
    refs.reserve(async_calls);
    for (int i = 0; i < async_calls; ++i) refs.push_back(c.task(&Counter::incr).remote());
    check(manta::get(refs).back() == async_calls, "W6 async");
  });
  row("W6", "counter actor, 100,000 calls submitted then gathered (incl. creating the actor)",
      fmt("%.0f calls/s", async_calls / s));
  auto c = manta::actor<Counter>().remote();
  s = timed(runs, [&] {
    for (int i = 0; i < sync_calls; ++i) manta::get(c.task(&Counter::incr).remote());
  });
  row("W6", "counter actor, call and wait, 5,000 times", fmt("%.2f us per call", s / sync_calls * 1e6));
  manta::shutdown();
}

void w7(int runs) {
  manta::init({.num_workers = 2});
  std::vector<double> expect(1000, 0.0);
  for (int i = 0; i < 128; ++i) {
    auto leaf = make_leaf(i);
    for (int k = 0; k < 1000; ++k) expect[static_cast<std::size_t>(k)] += leaf[static_cast<std::size_t>(k)];
  }
  double s = timed(runs, [&] {
    std::vector<manta::object_ref<std::vector<double>>> level;
    for (int i = 0; i < 128; ++i) level.push_back(manta::task(make_leaf).remote(i));
    while (level.size() > 1) {
      std::vector<manta::object_ref<std::vector<double>>> next;
      for (std::size_t i = 0; i + 1 < level.size(); i += 2)
        next.push_back(manta::task(add).remote(level[i], level[i + 1]));
      level = std::move(next);
    }
    auto sum = manta::get(level[0]);
    check(std::abs(sum[5] - expect[5]) < 1e-9, "W7");
  });
  row("W7", "tree reduce of 128 leaves x 1000 doubles (255 tasks, refs passed, no gather between levels)",
      fmt("%.2f ms", s * 1e3));
  manta::shutdown();
}

}  // namespace

int main(int argc, char** argv) {
  int runs = argc > 1 ? std::atoi(argv[1]) : 5;
  std::set<std::string> which;
  for (int i = 2; i < argc; ++i) which.insert(argv[i]);
  auto want = [&](const char* w) { return which.empty() || which.count(w); };
  std::printf("| workload | variant | median of %d runs |\n|---|---|---|\n", runs);
  if (want("W1")) w1(runs);
  if (want("W2")) w2(runs);
  if (want("W3")) w3(runs);
  if (want("W4")) w4(runs);
  if (want("W5")) w5(runs);
  if (want("W6")) w6(runs);
  if (want("W7")) w7(runs);
}

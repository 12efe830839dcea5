// moving_average: the flagship. A 5000x1000 random matrix is put into the object
// store once; one task per block of rows reads it in place (a std::span over the
// shared arena, no copy) and writes the 100-sample moving average of its rows
// straight into the store (a manta::buffer, no copy either). The same job runs
// as a sequential loop and on plain threads in this process, for comparison;
// the three times and the speed-ups are printed.
//
//   moving_average [workers=2] [repeats=7] [tasks=workers] [rows=5000]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include <manta/manta.hpp>

constexpr int cols = 1000;
constexpr int window = 100;  // each output is the mean of up to window + 1 inputs

/// Moving average of `rows` rows starting at `first`, as in Ray's tutorial: for
/// each column j, the mean of the row's values from max(0, j - window) to j.
/// Not inlined, so that the sequential loop, the threads and the tasks below run
/// the same machine code (inlined copies sit at different code alignments, which
/// moved their speed by up to 8%).
[[gnu::noinline]] void moving_average_rows(const double* matrix, int first, int rows, double* out) {
  for (int r = 0; r < rows; ++r) {
    const double* row = matrix + static_cast<std::size_t>(first + r) * cols;
    double* o = out + static_cast<std::size_t>(r) * cols;
    for (int j = 0; j < cols; ++j) {
      int lo = std::max(0, j - window);
      double s = 0;
      for (int k = lo; k <= j; ++k) s += row[k];
      o[j] = s / (j - lo + 1);
    }
  }
}

manta::buffer<double> moving_average_block(std::span<const double> matrix, int first, int rows) {
  auto out = manta::make_buffer<double>(static_cast<std::size_t>(rows) * cols);
  moving_average_rows(matrix.data(), first, rows, out.data());
  return out;  // the caller gets an object_ref<std::vector<double>>
}
MANTA_REMOTE(moving_average_block);

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  const int workers = argc > 1 ? std::atoi(argv[1]) : 2;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 7;
  const int tasks = argc > 3 ? std::atoi(argv[3]) : workers;  // blocks of rows, one task each
  const int rows = argc > 4 ? std::atoi(argv[4]) : 5000;
  if (workers < 1 || repeats < 1 || tasks < 1 || rows < tasks) {
    std::fprintf(stderr, "usage: moving_average [workers>=1] [repeats>=1] [tasks>=1] [rows>=tasks]\n");
    return 2;
  }
  manta::init({.num_workers = workers});

  std::vector<double> matrix(static_cast<std::size_t>(rows) * cols);
  std::mt19937_64 rng(0);
  std::normal_distribution<double> normal;
  for (double& x : matrix) x = normal(rng);
  auto shared = manta::put(matrix);  // written once; every task reads these bytes in place
  auto block = [&](int b, int blocks) { return std::pair{b * rows / blocks, (b + 1) * rows / blocks}; };

  // Outputs are allocated once, so no side pays for first touches in its timings.
  std::vector<double> expect(matrix.size()), by_threads(matrix.size());
  auto sequential = [&] { moving_average_rows(matrix.data(), 0, rows, expect.data()); };
  auto threads = [&] {
    std::vector<std::jthread> pool;
    for (int b = 0; b < workers; ++b) {
      auto [first, last] = block(b, workers);
      pool.emplace_back([&, first, last] {
        moving_average_rows(matrix.data(), first, last - first, by_threads.data() + std::size_t(first) * cols);
      });
    }
  };
  std::vector<manta::view<std::vector<double>>> views;  // zero-copy results
  auto parallel = [&] {
    views.clear();  // the last run's results go back to the store first
    std::vector<manta::object_ref<std::vector<double>>> parts;
    for (int b = 0; b < tasks; ++b) {
      auto [first, last] = block(b, tasks);
      parts.push_back(manta::task(moving_average_block).remote(shared, first, last - first));
    }
    for (auto& p : parts) views.push_back(manta::get_view(p));
  };

  using clock = std::chrono::steady_clock;
  auto timed = [](auto&& f) {
    auto t0 = clock::now();
    f();
    return std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  };
  sequential();  // warm up: first faults of the arena, the workers' heaps, the outputs
  threads();
  parallel();
  std::vector<double> seq_ms, thr_ms, par_ms, thr_ratio, par_ratio;
  bool same = true;
  for (int i = 0; i < repeats; ++i) {
    // The three sides alternate their order, so drift of the machine hits all alike.
    double s = 0, t = 0, p = 0;
    switch (i % 3) {
      case 0: s = timed(sequential), t = timed(threads), p = timed(parallel); break;
      case 1: t = timed(threads), p = timed(parallel), s = timed(sequential); break;
      default: p = timed(parallel), s = timed(sequential), t = timed(threads); break;
    }
    seq_ms.push_back(s), thr_ms.push_back(t), par_ms.push_back(p);
    thr_ratio.push_back(s / t), par_ratio.push_back(s / p);
    std::size_t at = 0;
    for (auto& v : views)
      for (double x : v) same = same && x == expect[at++];
    same = same && at == expect.size() && by_threads == expect;
  }
  std::printf("moving average (window %d) of a %dx%d matrix, %d workers, %d tasks, median of %d runs\n", window,
              rows, cols, workers, tasks, repeats);
  std::printf("sequential:        %8.2f ms\n", median(seq_ms));
  std::printf("%d plain threads:   %8.2f ms  speed-up %.2fx\n", workers, median(thr_ms), median(thr_ratio));
  std::printf("manta, %d workers:  %8.2f ms  speed-up %.2fx\n", workers, median(par_ms), median(par_ratio));
  std::printf("results %s\n", same ? "match" : "DIFFER");
  views.clear();
  manta::shutdown();
  return same ? 0 : 1;
}

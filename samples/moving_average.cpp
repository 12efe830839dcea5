// moving_average: the flagship. A 1000x1000 random matrix is put into the object
// store once; one task per block of rows reads it in place (a std::span over the
// shared arena, no copy) and writes the moving average of its rows straight into
// the store (a manta::buffer, no copy either). The same loop runs sequentially for
// comparison; both times and the speed-up are printed.
//
//   moving_average [workers=2] [repeats=7] [blocks=workers]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <span>
#include <vector>

#include <manta/manta.hpp>

constexpr int n = 1000;      // the matrix is n x n
constexpr int window = 10;   // each output is the mean of up to window + 1 inputs

/// Moving average of `rows` rows starting at `first`, as in Ray's tutorial: for
/// each column j, the mean of the row's values from max(0, j - window) to j.
void moving_average_rows(const double* matrix, int first, int rows, double* out) {
  for (int r = 0; r < rows; ++r) {
    const double* row = matrix + static_cast<std::size_t>(first + r) * n;
    double* o = out + static_cast<std::size_t>(r) * n;
    for (int j = 0; j < n; ++j) {
      int lo = std::max(0, j - window);
      double s = 0;
      for (int k = lo; k <= j; ++k) s += row[k];
      o[j] = s / (j - lo + 1);
    }
  }
}

manta::buffer<double> moving_average_block(std::span<const double> matrix, int first, int rows) {
  auto out = manta::make_buffer<double>(static_cast<std::size_t>(rows) * n);
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
  manta::init({.num_workers = workers});

  std::vector<double> matrix(static_cast<std::size_t>(n) * n);
  std::mt19937_64 rng(0);
  std::normal_distribution<double> normal;
  for (double& x : matrix) x = normal(rng);
  auto shared = manta::put(matrix);  // written once; every task reads these bytes in place

  const int blocks = argc > 3 ? std::atoi(argv[3]) : workers;  // blocks of rows, one task each
  auto parallel = [&] {
    std::vector<manta::object_ref<std::vector<double>>> parts;
    for (int b = 0; b < blocks; ++b) {
      int first = b * n / blocks, last = (b + 1) * n / blocks;
      parts.push_back(manta::task(moving_average_block).remote(shared, first, last - first));
    }
    std::vector<manta::view<std::vector<double>>> views;  // zero-copy results
    for (auto& p : parts) views.push_back(manta::get_view(p));
    return views;
  };
  std::vector<double> expect(matrix.size());  // allocated once: the fastest sequential loop
  auto sequential = [&] { moving_average_rows(matrix.data(), 0, n, expect.data()); };

  using clock = std::chrono::steady_clock;
  auto ms = [](clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  parallel();  // warm up: first faults of the arena and the workers' heaps
  sequential();
  std::vector<double> seq_ms, par_ms, ratios;
  bool same = true;
  for (int i = 0; i < repeats; ++i) {
    auto t0 = clock::now();
    sequential();
    auto t1 = clock::now();
    auto views = parallel();
    auto t2 = clock::now();
    seq_ms.push_back(ms(t1 - t0));
    par_ms.push_back(ms(t2 - t1));
    ratios.push_back(seq_ms.back() / par_ms.back());
    std::size_t at = 0;
    for (auto& v : views)
      for (double x : v) same = same && x == expect[at++];
    same = same && at == expect.size();
  }
  std::printf("moving average of a %dx%d matrix, window %d, %d workers, %d tasks, median of %d runs\n",
              n, n, window, workers, blocks, repeats);
  std::printf("sequential: %.2f ms\n", median(seq_ms));
  std::printf("parallel:   %.2f ms\n", median(par_ms));
  std::printf("speed-up:   %.2fx\n", median(ratios));
  std::printf("results %s\n", same ? "match" : "DIFFER");
  manta::shutdown();
  return same ? 0 : 1;
}

// kernels.hpp: the work the benchmarks measure, shared by manta_bench and
// manta_workloads (the samples keep their own copy: each sample is one file).
#pragma once

#include <algorithm>
#include <cstddef>
#include <random>
#include <vector>

namespace manta_bench {

constexpr int n = 1000;      // moving average over an n x n matrix
constexpr int window = 10;   // each output averages up to window + 1 inputs

/// Ray tutorial's moving average of `rows` rows from `first`, into `out`.
/// Never inlined, as the next one.
[[gnu::noinline]] inline void moving_average_rows(const double* m, int first, int rows, double* out) {
  for (int r = 0; r < rows; ++r) {
    const double* row = m + static_cast<std::size_t>(first + r) * n;
    double* o = out + static_cast<std::size_t>(r) * n;
    for (int j = 0; j < n; ++j) {
      int lo = std::max(0, j - window);
      double s = 0;
      for (int k = lo; k <= j; ++k) s += row[k];
      o[j] = s / (j - lo + 1);
    }
  }
}

/// The same kernel over a matrix of any shape and window. Never inlined: every
/// variant of a harness runs this one copy (inlined copies, each at its own code
/// alignment, ran up to 8% apart on identical work).
[[gnu::noinline]] inline void window_average_rows(const double* m, int cols, int win, int first, int rows, double* out) {
  for (int r = 0; r < rows; ++r) {
    const double* row = m + static_cast<std::size_t>(first + r) * cols;
    double* o = out + static_cast<std::size_t>(r) * cols;
    for (int j = 0; j < cols; ++j) {
      int lo = std::max(0, j - win);
      double s = 0;
      for (int k = lo; k <= j; ++k) s += row[k];
      o[j] = s / (j - lo + 1);
    }
  }
}

inline std::vector<double> random_matrix(std::size_t values = static_cast<std::size_t>(n) * n) {
  std::vector<double> m(values);
  std::mt19937_64 rng(0);
  std::normal_distribution<double> normal;
  for (double& x : m) x = normal(rng);
  return m;
}

}  // namespace manta_bench

// cluster: the moving average of samples/moving_average, split into blocks of
// rows that run wherever there is room: on this machine's workers, and, when
// the program is part of a cluster, on the other nodes too. The code does not
// change with where it runs; only how it is started does:
//
//   build/samples/cluster                          one machine
//   mpirun -n 3 build/samples/cluster              rank 0 drives, ranks 1-2 are nodes
//   manta start --head                             a head, then nodes and a driver
//   manta start -- build/samples/cluster           (a node: init() serves, never returns)
//   MANTA_ADDRESS=HOST:PORT build/samples/cluster  (the driver)
//
// Each block is put once and travels to the node that runs it as its argument;
// each task says which node ran it. The result is checked against a
// sequential loop.
//
//   cluster [blocks=40] [rows=4000]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <manta/manta.hpp>

constexpr int cols = 1000;
constexpr int window = 100;

void moving_average_rows(const double* in, int rows, double* out) {
  for (int r = 0; r < rows; ++r) {
    const double* row = in + static_cast<std::size_t>(r) * cols;
    double* o = out + static_cast<std::size_t>(r) * cols;
    for (int j = 0; j < cols; ++j) {
      int lo = std::max(0, j - window);
      double s = 0;
      for (int k = lo; k <= j; ++k) s += row[k];
      o[j] = s / (j - lo + 1);
    }
  }
}

/// One block of rows: its moving average, and the node that computed it.
std::tuple<std::string, std::vector<double>> moving_average_block(std::span<const double> block) {
  std::vector<double> out(block.size());
  moving_average_rows(block.data(), static_cast<int>(block.size() / cols), out.data());
  return {manta::node_id(), std::move(out)};
}
MANTA_REMOTE(moving_average_block);

int main(int argc, char** argv) {
  const int blocks = argc > 1 ? std::atoi(argv[1]) : 40;
  const int rows = argc > 2 ? std::atoi(argv[2]) : 4000;
  if (blocks < 1 || rows < blocks) {
    std::fprintf(stderr, "usage: cluster [blocks>=1] [rows>=blocks]\n");
    return 2;
  }
  manta::init();  // a node of a cluster serves here and never returns
  const auto nodes = manta::nodes();
  std::printf("%zu node%s:", nodes.size(), nodes.size() == 1 ? "" : "s");
  for (const auto& n : nodes) std::printf(" %s (%g CPUs)", n.id.c_str(), n.resources.count("CPU") ? n.resources.at("CPU") : 0.0);
  std::printf("\n");

  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> uniform(0, 1);
  std::vector<double> matrix(static_cast<std::size_t>(rows) * cols);
  for (auto& x : matrix) x = uniform(rng);

  std::vector<manta::object_ref<std::string>> where;
  std::vector<manta::object_ref<std::vector<double>>> parts;
  std::vector<int> first_row;
  for (int b = 0; b < blocks; ++b) {
    const int lo = rows * b / blocks, hi = rows * (b + 1) / blocks;
    first_row.push_back(lo);
    auto block = manta::put(std::vector<double>(matrix.begin() + static_cast<std::ptrdiff_t>(lo) * cols,
                                                matrix.begin() + static_cast<std::ptrdiff_t>(hi) * cols));
    auto [node, out] = manta::task(moving_average_block).num_returns<2>().remote(block);
    where.push_back(node);
    parts.push_back(out);
  }

  std::vector<double> sequential(matrix.size());
  moving_average_rows(matrix.data(), rows, sequential.data());
  bool match = true;
  for (int b = 0; b < blocks; ++b) {
    auto part = manta::get(parts[static_cast<std::size_t>(b)]);
    match = match && std::equal(part.begin(), part.end(),
                                sequential.begin() + static_cast<std::ptrdiff_t>(first_row[static_cast<std::size_t>(b)]) * cols);
  }
  std::map<std::string, int> per_node;
  for (auto& w : where) ++per_node[manta::get(w)];
  std::printf("blocks per node:");
  for (const auto& [id, n] : per_node) std::printf(" %s %d%s", id.c_str(), n, id == manta::node_id() ? " (this one)" : "");
  std::printf("\nresults match: %s\n", match ? "yes" : "NO");
  manta::shutdown();
  return match ? 0 : 1;
}

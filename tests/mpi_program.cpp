// mpi_program: a program that uses MPI itself, started by mpirun -n 3 from
// cluster_test. It initialises MPI before manta::init (manta then leaves MPI
// to it); rank 0 drives, the other ranks serve as nodes and must finalise the
// program's MPI when they exit, or rank 0's MPI_Finalize would wait for them.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include <mpi.h>

#include <manta/manta.hpp>

namespace {
int where() { return static_cast<int>(::getpid()); }
}  // namespace

MANTA_REMOTE(where);

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // Each rank offers a resource of its own, so the driver can aim at each.
  manta::init({.num_workers = 1, .resources = {{"rank" + std::to_string(rank), 1}}});
  std::vector<manta::object_ref<int>> refs;
  for (int r = 1; r < 3; ++r) refs.push_back(manta::task(where).resources({{"rank" + std::to_string(r), 1}}).remote());
  int others = 0;
  for (int pid : manta::get(refs, std::chrono::seconds(30))) others += pid != ::getpid();
  std::printf("tasks ran on %d other ranks\n", others);
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);  // MPI is still the program's
  manta::shutdown();
  MPI_Finalize();
  std::printf("rank 0 of %d finalized\n", size);
  return others == 2 ? 0 : 1;
}

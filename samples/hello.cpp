// hello: the smallest manta program. square() runs in worker processes; the
// driver submits calls, gets futures back at once and collects the results.
#include <cstdio>
#include <vector>

#include <manta/manta.hpp>

int square(int x) { return x * x; }
MANTA_REMOTE(square);

int main() {
  manta::init({.num_workers = 2});
  manta::object_ref<int> r = manta::task(square).remote(4);
  std::printf("square(4) = %d\n", manta::get(r));

  std::vector<manta::object_ref<int>> refs;
  for (int i = 0; i < 10; ++i) refs.push_back(manta::task(square).remote(i));
  std::printf("squares:");
  for (int v : manta::get(refs)) std::printf(" %d", v);
  std::printf("\n");
  manta::shutdown();
}

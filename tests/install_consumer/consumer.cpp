// consumer: the smallest program built against an installed manta.
#include <cstdio>

#include <manta/manta.hpp>

int triple(int x) { return 3 * x; }
MANTA_REMOTE(triple);

int main() {
  manta::init({.num_workers = 1});
  std::printf("triple(5) = %d\n", manta::get(manta::task(triple).remote(5)));
  std::printf("manta %s\n", manta::version());
  manta::shutdown();
}

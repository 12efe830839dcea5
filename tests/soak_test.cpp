// soak_test: long runs keep the driver's memory and the arena flat. Prints the
// figures. Label soak: run in the Release pass of CI, and by hand with
//   ctest --test-dir build -L soak --output-on-failure
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <vector>

#include "support.hpp"

namespace {

int ident(int x) { return x; }
MANTA_REMOTE(ident);

TEST(soak, a_million_tasks_and_100000_megabyte_objects_stay_flat) {
  manta::init({.num_workers = 2});
  const std::size_t arena0 = manta::detail::arena_used_bytes();
  std::vector<manta::object_ref<int>> refs;
  refs.reserve(10000);
  auto run_tasks = [&](int batches) {
    for (int batch = 0; batch < batches; ++batch) {
      refs.clear();
      for (int i = 0; i < 10000; ++i) refs.push_back(manta::task(ident).remote(i));
      for (int i = 0; i < 10000; ++i) ASSERT_EQ(manta::get(refs[static_cast<std::size_t>(i)]), i);
    }
  };
  // Warm-up of both paths, so allocator pools and tables have their working size.
  run_tasks(10);
  // One value put again and again: a fresh 1 MB vector each time would measure
  // the machine's page faults (about 3 ms per MB on some VMs), not manta.
  const std::vector<char> warm(1 << 20, 'w');
  for (int i = 0; i < 10000; ++i) manta::get(manta::put(warm));
  long rss0 = manta::testing::resident_bytes();

  run_tasks(100);
  long rss1 = manta::testing::resident_bytes();
  std::size_t arena1 = manta::detail::arena_used_bytes();

  std::vector<char> value(1 << 20);
  for (int i = 0; i < 100000; ++i) {
    value[static_cast<std::size_t>(i) % value.size()] = static_cast<char>(i);
    auto r = manta::put(value);
    ASSERT_EQ(manta::get(r)[static_cast<std::size_t>(i) % value.size()], static_cast<char>(i));
  }
  long rss2 = manta::testing::resident_bytes();
  std::size_t arena2 = manta::detail::arena_used_bytes();
  std::printf("soak: driver RSS %.1f MB at start, %.1f MB after 1,000,000 tasks, %.1f MB after "
              "100,000 put/get of 1 MB; arena in use %zu / %zu / %zu bytes\n",
              rss0 / 1e6, rss1 / 1e6, rss2 / 1e6, arena0, arena1, arena2);
  EXPECT_LT(rss1 - rss0, 8L << 20);
  EXPECT_LT(rss2 - rss0, 8L << 20);
  EXPECT_EQ(arena1, arena0);
  EXPECT_EQ(arena2, arena0);
  manta::shutdown();
}

}  // namespace

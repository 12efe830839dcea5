// memory_test: long runs do not grow the object store or the driver's memory.
#include <unistd.h>

#include <fstream>
#include <vector>

#include "support.hpp"

namespace {

int ident(int x) { return x; }
MANTA_REMOTE(ident);

/// Runs `count` tasks in batches, holding at most one batch of refs at a time.
void run_tasks(int count, int batch) {
  std::vector<manta::object_ref<int>> refs;
  refs.reserve(static_cast<std::size_t>(batch));
  for (int done = 0; done < count; done += batch) {
    refs.clear();
    for (int i = 0; i < batch; ++i) refs.push_back(manta::task(ident).remote(done + i));
    for (int i = 0; i < batch; ++i) ASSERT_EQ(manta::get(refs[static_cast<std::size_t>(i)]), done + i);
  }
}

TEST(memory, a_million_tasks_leave_the_store_and_the_driver_flat) {
  manta::init({.num_workers = 2});
  std::size_t arena_before = manta::detail::arena_used_bytes();
  run_tasks(100000, 10000);  // warm-up: allocator pools and tables reach their working size
  long rss_warm = manta::testing::resident_bytes();
#if defined(__SANITIZE_ADDRESS__)
  // Instrumented (and unoptimised) each task costs several times more; leaks
  // are LeakSanitizer's to find at exit, so fewer tasks show the same.
  run_tasks(300000, 10000);
#else
  run_tasks(1000000, 10000);
#endif
  long rss_after = manta::testing::resident_bytes();
  EXPECT_EQ(manta::detail::object_count(), 0u);
  EXPECT_EQ(manta::detail::arena_used_bytes(), arena_before);
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer keeps freed memory in quarantine, so resident size grows by
  // design; its LeakSanitizer checks for leaks at exit instead.
  (void)rss_after;
  (void)rss_warm;
#else
  // A leak of even 16 bytes per task would add 16 MB.
  EXPECT_LT(rss_after - rss_warm, 8L << 20) << "driver grew from " << rss_warm << " to " << rss_after;
#endif
  manta::shutdown();
}

}  // namespace

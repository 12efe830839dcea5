// arena_test: the arena alone. Its warmer faults pages in ahead of the
// allocation frontier, as far ahead as lies below it and never more than the
// reserve, and never changes bytes written meanwhile. Residency is read with
// mincore; every wait for the warmer is bounded.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "store/arena.hpp"

namespace {
using manta::store::arena;
constexpr std::size_t mb = std::size_t{1} << 20;

/// Pages of [from, to) (offsets from the arena's base) resident now.
std::size_t resident_pages(const arena& a, std::size_t from, std::size_t to) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGE_SIZE));
  from = from / page * page;
  std::vector<unsigned char> in((to - from + page - 1) / page);
  if (::mincore(a.base() + from, to - from, in.data()) != 0) return 0;
  std::size_t n = 0;
  for (unsigned char c : in) n += c & 1;
  return n;
}

bool eventually(const std::function<bool()>& done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // polling a state with no event to wait on
  }
  return true;
}

TEST(arena, the_warmer_keeps_as_much_ahead_as_lies_below_the_frontier_up_to_its_reserve) {
  arena a(256 * mb);
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGE_SIZE));
  a.start_warming(16 * mb);
  const std::uint64_t first = a.allocate(4 * mb);
  ASSERT_NE(first, manta::store::no_extent);
  const std::size_t frontier = first + 4 * mb;
  ASSERT_TRUE(eventually([&] { return a.warm_bytes() >= 2 * frontier; })) << a.warm_bytes();
  EXPECT_GE(resident_pages(a, frontier, 2 * frontier), (frontier - page) / page);

  const std::uint64_t big = a.allocate(40 * mb);  // far past what was warm: the reserve caps what follows
  ASSERT_NE(big, manta::store::no_extent);
  const std::size_t far = big + 40 * mb;
  ASSERT_TRUE(eventually([&] { return a.warm_bytes() >= far + 16 * mb; })) << a.warm_bytes();
  a.stop_warming();
  EXPECT_LE(a.warm_bytes(), far + 16 * mb + page);
  EXPECT_GE(resident_pages(a, far, far + 16 * mb), 16 * mb / page - 1);
  // Nothing beyond the reserve (past a huge page, where shared memory uses them).
  EXPECT_EQ(resident_pages(a, far + 20 * mb, far + 40 * mb), 0u);
  a.stop_warming();  // idempotent
}

TEST(arena, the_warmer_waits_while_it_may_not_warm_and_asks_again) {
  arena a(64 * mb);
  std::atomic<bool> allowed{false};
  std::atomic<int> asked{0};
  a.start_warming(8 * mb, [&](std::size_t bytes) {
    EXPECT_LE(bytes, 8 * mb);
    ++asked;
    return allowed.load();
  });
  const std::uint64_t off = a.allocate(8 * mb);
  ASSERT_NE(off, manta::store::no_extent);
  ASSERT_TRUE(eventually([&] { return asked.load() >= 3; }));  // refused, then asked again
  EXPECT_LT(a.warm_bytes(), off + 8 * mb + 4096);
  allowed = true;
  ASSERT_TRUE(eventually([&] { return a.warm_bytes() >= off + 16 * mb; })) << a.warm_bytes();
}

TEST(arena, no_reserve_warms_nothing) {
  arena a(64 * mb);
  a.start_warming(0);
  const std::uint64_t off = a.allocate(8 * mb);
  ASSERT_NE(off, manta::store::no_extent);
  EXPECT_LT(a.warm_bytes(), off + 8 * mb + 4096);  // the extent (rounded up), no more
  // (The allocator writes the header of the free block that follows: one page,
  // or one huge page where shared memory uses them.)
  EXPECT_LE(resident_pages(a, off + 8 * mb, off + 16 * mb), 2 * mb / 4096);
}

TEST(arena, warming_never_changes_bytes_written_meanwhile) {
  arena a(256 * mb);
  a.start_warming(64 * mb);
  std::vector<std::uint64_t> extents;
  for (int i = 0; i < 96; ++i) {
    // Written at once, while the warmer populates the same pages or those next to them.
    const std::uint64_t off = a.allocate(mb);
    ASSERT_NE(off, manta::store::no_extent);
    std::memset(a.base() + off, i + 1, mb);
    extents.push_back(off);
  }
  a.stop_warming();
  for (int i = 0; i < 96; ++i) {
    const std::byte* p = a.base() + extents[static_cast<std::size_t>(i)];
    for (std::size_t k = 0; k < mb; k += 4093) ASSERT_EQ(static_cast<int>(p[k]), i + 1) << "extent " << i;
  }
}

TEST(arena, the_reserve_comes_from_the_environment_or_an_eighth_of_the_arena) {
  arena a(64 * mb);
  ::unsetenv("MANTA_ARENA_WARM_MB");
  EXPECT_EQ(a.default_warm_reserve(), a.capacity() / 8);
  ::setenv("MANTA_ARENA_WARM_MB", "3", 1);
  EXPECT_EQ(a.default_warm_reserve(), 3 * mb);
  ::setenv("MANTA_ARENA_WARM_MB", "0", 1);
  EXPECT_EQ(a.default_warm_reserve(), 0u);
  ::setenv("MANTA_ARENA_WARM_MB", "-5", 1);
  EXPECT_EQ(a.default_warm_reserve(), 0u);
  ::setenv("MANTA_ARENA_WARM_MB", "100000", 1);
  EXPECT_EQ(a.default_warm_reserve(), a.capacity());
  ::unsetenv("MANTA_ARENA_WARM_MB");
}

}  // namespace

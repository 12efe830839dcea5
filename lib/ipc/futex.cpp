// ipc/futex.cpp: FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline,
// which is what std::chrono::steady_clock reads on Linux.
#include "ipc/futex.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>

namespace manta::ipc {

void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                std::chrono::steady_clock::time_point until) noexcept {
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
  timespec ts{};
  timespec* tp = nullptr;
  if (until != std::chrono::steady_clock::time_point::max()) {
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(until.time_since_epoch()).count();
    if (ns < 0) ns = 0;
    ts.tv_sec = ns / 1000000000;
    ts.tv_nsec = ns % 1000000000;
    tp = &ts;
  }
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_BITSET_PRIVATE,
            expected, tp, nullptr, FUTEX_BITSET_MATCH_ANY);
}

void futex_wake_all(std::atomic<std::uint32_t>& word) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX,
            nullptr, nullptr, 0);
}

}  // namespace manta::ipc

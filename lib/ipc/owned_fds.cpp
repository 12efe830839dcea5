// ipc/owned_fds.cpp: a fixed bitmap of descriptors, updated with atomics so
// a fork child can read it without taking a lock another thread held.
#include "ipc/owned_fds.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace manta::ipc {
namespace {
constexpr int max_tracked = 1 << 16;  // descriptors above this are left open
std::atomic<std::uint64_t> owned[max_tracked / 64];
}  // namespace

void own_fd(int fd) noexcept {
  if (fd >= 0 && fd < max_tracked) owned[fd / 64].fetch_or(std::uint64_t{1} << (fd % 64), std::memory_order_relaxed);
}

void disown_fd(int fd) noexcept {
  if (fd >= 0 && fd < max_tracked)
    owned[fd / 64].fetch_and(~(std::uint64_t{1} << (fd % 64)), std::memory_order_relaxed);
}

void close_owned_fds() noexcept {
  for (int word = 0; word < max_tracked / 64; ++word) {
    std::uint64_t bits = owned[word].exchange(0, std::memory_order_relaxed);
    for (int b = 0; bits; ++b, bits >>= 1)
      if (bits & 1) ::close(word * 64 + b);
  }
}

void forget_owned_fds() noexcept {
  for (auto& word : owned) word.store(0, std::memory_order_relaxed);
}

}  // namespace manta::ipc

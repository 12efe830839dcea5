// ipc/futex.hpp: sleeping on a 32-bit word until it changes, with a deadline.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace manta::ipc {

/// Sleeps while `word` equals `expected`, at most until `until` (steady clock).
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                std::chrono::steady_clock::time_point until) noexcept;
void futex_wake_all(std::atomic<std::uint32_t>& word) noexcept;

}  // namespace manta::ipc

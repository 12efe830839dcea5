// process/control.hpp: a small shared mapping, made before the zygote is forked,
// holding the words that let processes spin on each other's traffic without
// syscalls, and what each worker is running (read by the driver after a crash).
#pragma once

#include <atomic>
#include <cstdint>

namespace manta::process {

inline constexpr int max_slots = 1024;  ///< pool workers plus actor hosts
inline constexpr int max_depth = 32;

struct alignas(64) process_slot {
  std::atomic<std::uint32_t> inbox_seq{0};   ///< bumped by the driver after each write to it
  std::atomic<std::uint32_t> outbox_seq{0};  ///< bumped by the process after each write to the driver
  std::atomic<std::uint32_t> depth{0};      ///< tasks executing (nested ones included)
  std::atomic<std::uint64_t> running[max_depth]{};  ///< their keys, outermost first
};

struct control_block {
  alignas(64) std::atomic<std::uint32_t> driver_seq{0};  ///< bumped by processes after writing to the driver
  /// Bit 0: the driver's I/O thread sleeps and nobody else reads the pipes, so
  /// a process that writes must ring the doorbell pipe. Upper bits: a generation.
  alignas(64) std::atomic<std::uint32_t> driver_idle{0};
  process_slot slots[max_slots];
};

/// Maps a zeroed, shared, anonymous control block. @throws std::system_error
control_block* map_control_block();
void unmap_control_block(control_block* c) noexcept;

}  // namespace manta::process

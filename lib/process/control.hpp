// process/control.hpp: a small shared mapping, made before the zygote is forked,
// holding the words that let processes spin on each other's traffic without
// syscalls, and what each worker is running (read by the driver after a crash).
#pragma once

#include <atomic>
#include <cstdint>

namespace manta::process {

inline constexpr int max_slots = 1024;  ///< pool workers plus actor hosts
inline constexpr int max_depth = 32;

/// process_slot::assigned, set by the driver for pool workers: nothing that
/// runs now (idle, or every task waits in get), only tasks expected to end
/// within a spin (a waiter's spin pays), or others. work_none: it says nothing
/// (an actor host: its depth tells).
enum : std::uint32_t { work_none = 0, work_idle = 1, work_short = 2, work_long = 3 };

struct alignas(64) process_slot {
  std::atomic<std::uint32_t> inbox_seq{0};   ///< bumped by the driver after each write to it
  std::atomic<std::uint32_t> outbox_seq{0};  ///< bumped by the process after each write to the driver
  std::atomic<std::uint32_t> depth{0};      ///< tasks executing (nested ones included)
  std::atomic<std::uint32_t> spinning{0};   ///< the process spins waiting for its inbox
  std::atomic<std::uint32_t> assigned{0};   ///< what work the driver sent it (work_*; set by the driver)
  /// Tasks the driver sent ahead, to start once the process is free: the
  /// number of each sending (0: none). Whoever swaps one to 0 owns the task:
  /// the process, to run it, or the driver, taking it back. Never reused, so a
  /// message whose sending was taken back finds no number and is skipped.
  std::atomic<std::uint64_t> ahead[2]{};
  std::atomic<std::uint64_t> running[max_depth]{};  ///< their keys, outermost first
};

struct control_block {
  alignas(64) std::atomic<std::uint32_t> driver_seq{0};  ///< bumped by processes after writing to the driver
  /// Bit 0: the driver's I/O thread sleeps and nobody else reads the pipes, so
  /// a process that writes must ring the doorbell pipe. Upper bits: a generation.
  alignas(64) std::atomic<std::uint32_t> driver_idle{0};
  /// What core_free counts: slots [0, slots_in_use) (set by the driver), the
  /// driver's threads spinning now, and the CPUs this process may run on.
  alignas(64) std::atomic<std::uint32_t> slots_in_use{0};
  std::atomic<std::uint32_t> driver_spinners{0};
  std::uint32_t cpus = 1;
  /// Set once this runtime serves a cluster as a node: it holds its drivers'
  /// objects under the drivers' ids, so ids of another epoch are no error here.
  std::atomic<bool> holds_imports{false};
  process_slot slots[max_slots];
};

/// Whether a waiter may spin without taking a core from a process that computes:
/// the processes running tasks and the waiters spinning already take fewer cores
/// than there are. `self` (a slot, or -1 for the driver) is not counted; a
/// process counts the driver as taking a core.
bool core_free(const control_block& c, int self) noexcept;

/// Counts the caller among the spinners while it lives.
class spinning_mark {
 public:
  explicit spinning_mark(std::atomic<std::uint32_t>& counter) noexcept : counter_(counter) {
    counter_.fetch_add(1, std::memory_order_relaxed);
  }
  ~spinning_mark() { counter_.fetch_sub(1, std::memory_order_relaxed); }
  spinning_mark(const spinning_mark&) = delete;
  spinning_mark& operator=(const spinning_mark&) = delete;

 private:
  std::atomic<std::uint32_t>& counter_;
};

/// Maps a zeroed, shared, anonymous control block. @throws std::system_error
control_block* map_control_block();
void unmap_control_block(control_block* c) noexcept;

}  // namespace manta::process

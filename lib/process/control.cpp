// process/control.cpp: the shared control block.
#include "process/control.hpp"

#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <new>
#include <system_error>

namespace manta::process {

control_block* map_control_block() {
  void* p = ::mmap(nullptr, sizeof(control_block), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::system_error(errno, std::generic_category(), "mmap control block");
  auto* c = new (p) control_block();
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) c->cpus = static_cast<std::uint32_t>(CPU_COUNT(&set));
  return c;
}

bool core_free(const control_block& c, int self) noexcept {
  // A process waiting for the driver leaves the driver a core (it is what the
  // process waits for), spinning or not.
  std::uint32_t taken = c.driver_spinners.load(std::memory_order_relaxed);
  if (self >= 0) taken = std::max<std::uint32_t>(taken, 1);
  const int slots = static_cast<int>(std::min<std::uint32_t>(c.slots_in_use.load(std::memory_order_relaxed),
                                                             max_slots));
  for (int i = 0; i < slots && taken < c.cpus; ++i) {
    if (i == self) continue;
    const process_slot& s = c.slots[i];
    // Busy from the moment the driver sends it work, not only once it starts;
    // not while it only runs tasks that end within a spin (waiting for those by
    // spinning pays: their results come back sooner than a sleeper wakes), nor
    // while its tasks wait in get (the driver says so; its depth does not).
    const std::uint32_t work = s.assigned.load(std::memory_order_relaxed);
    const bool busy = work == work_long || (work == work_none && s.depth.load(std::memory_order_relaxed) != 0);
    taken += busy + s.spinning.load(std::memory_order_relaxed);
  }
  return taken < c.cpus;
}

void unmap_control_block(control_block* c) noexcept {
  if (c) ::munmap(c, sizeof(control_block));
}

}  // namespace manta::process

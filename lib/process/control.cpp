// process/control.cpp: the shared control block.
#include "process/control.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <new>
#include <system_error>

namespace manta::process {

control_block* map_control_block() {
  void* p = ::mmap(nullptr, sizeof(control_block), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::system_error(errno, std::generic_category(), "mmap control block");
  return new (p) control_block();
}

void unmap_control_block(control_block* c) noexcept {
  if (c) ::munmap(c, sizeof(control_block));
}

}  // namespace manta::process

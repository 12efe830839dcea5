// ipc/owned_fds.hpp: the descriptors the runtime opened in the driver. A
// child the program forks after init closes them (it must not keep the
// runtime's pipes and sockets open, nor write to them).
#pragma once

namespace manta::ipc {

/// Records `fd` as the runtime's. Thread-safe, lock-free.
void own_fd(int fd) noexcept;
/// Forgets `fd` (call before closing it).
void disown_fd(int fd) noexcept;
/// Closes every recorded descriptor. Async-signal-safe (for a fork child).
void close_owned_fds() noexcept;
/// Forgets every recorded descriptor without closing it (a new process role:
/// the zygote does not own what the driver did).
void forget_owned_fds() noexcept;

}  // namespace manta::ipc

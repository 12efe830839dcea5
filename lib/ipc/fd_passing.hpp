// ipc/fd_passing.hpp: small messages with file descriptors attached (SCM_RIGHTS)
// over a Unix seqpacket socket; how the zygote hands a new process's pipes to the driver.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace manta::ipc {

enum class send_status { sent, full, gone };
/// Sends `len` bytes and `fds` as one packet: `full` when a non-blocking
/// socket has no room now, `gone` when the peer is.
send_status send_packet(int sock, const void* data, std::size_t len, std::span<const int> fds = {});

/// Receives one packet; fds arrive close-on-exec.
/// @returns bytes received, 0 on EOF, -1 if nothing is ready (non-blocking socket).
long recv_packet(int sock, void* data, std::size_t cap, std::vector<int>* fds);

}  // namespace manta::ipc

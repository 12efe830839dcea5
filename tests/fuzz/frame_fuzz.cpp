// frame_fuzz: arbitrary bytes arrive on a pipe, as from a broken or hostile
// worker. Reassembly and every decoder the driver uses must either succeed or
// throw protocol_error: never crash, never read out of bounds.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ipc/channel.hpp"
#include "ipc/frame.hpp"
#include "ipc/protocol.hpp"
#include "process/args_blob.hpp"
#include "process/task_wire.hpp"

namespace {

using namespace manta;

/// Decodes a frame's body the ways the driver and workers do, by type.
void decode(const ipc::frame& f) {
  auto r = f.reader();
  switch (f.type % 8) {
    case 0:  // a task_done with results
      r.get<std::uint64_t>();
      r.get<std::uint8_t>();
      for (int i = 0; i < 4 && r.remaining(); ++i) {
        auto n = r.get<std::uint32_t>();
        for (std::uint32_t k = 0; k < n; ++k) r.get<object_id>();
        ipc::read_location(r);
      }
      break;
    case 1:
      ipc::read_error(r);
      break;
    case 2: {  // a submit: options, ids, argument blob
      r.get<std::uint64_t>();
      r.get<std::uint8_t>();
      r.get<std::uint16_t>();
      auto nargs = r.get<std::uint16_t>();
      process::read_options(r);
      std::string blob = r.string();
      process::for_each_arg(blob, nargs, [](const process::blob_arg&) {});
      break;
    }
    case 3:
      while (r.remaining()) ipc::read_location(r);
      break;
    default:
      while (r.remaining()) r.string();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return 0;
  ::fcntl(fds[1], F_SETPIPE_SZ, 1 << 20);
  std::size_t written = 0;
  while (written < size) {
    ssize_t n = ::write(fds[1], data + written, size - written);
    if (n <= 0) break;
    written += static_cast<std::size_t>(n);
  }
  ::close(fds[1]);
  ipc::inbox in(fds[0]);
  for (int rounds = 0; rounds < 64; ++rounds) {
    auto st = in.read_some();
    try {
      ipc::frame f;
      while (in.next(f)) {
        try {
          decode(f);
        } catch (const ipc::protocol_error&) {
        }
      }
    } catch (const ipc::protocol_error&) {
      break;  // the driver replaces such a worker
    }
    if (st == ipc::inbox::status::closed) break;
  }
  ::close(fds[0]);
  return 0;
}

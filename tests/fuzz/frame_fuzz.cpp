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
#include "ipc/messages.hpp"
#include "process/args_blob.hpp"

namespace {

using namespace manta;

/// Decodes a frame's body as the message its type names, as the driver and
/// workers do.
void decode(const ipc::frame& f) {
  auto r = f.reader();
  switch (static_cast<ipc::msg>(f.type % 32)) {
    case ipc::msg::run_task: {
      std::vector<ipc::value_location> args;
      ipc::run_task::read(r, args);
      break;
    }
    case ipc::msg::object_ready:
      ipc::object_ready::read(r);
      break;
    case ipc::msg::resources_reply:
      ipc::resources_reply::read(r);
      break;
    case ipc::msg::task_done:
      ipc::task_done::read(r);
      break;
    case ipc::msg::submit: {
      auto m = ipc::submit::read(r);
      process::for_each_arg(m.args, m.arg_count, [](const process::blob_arg&) {});
      break;
    }
    case ipc::msg::put:
      ipc::put::read(r);
      break;
    case ipc::msg::block:
      ipc::block::read(r);
      break;
    case ipc::msg::find_actor:
      ipc::find_actor::read(r);
      break;
    default:
      ipc::release::read(r);
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

// bridge_frame_fuzz: arbitrary bytes arrive on a cluster connection, in
// arbitrary pieces, as from a broken or hostile peer. The frame decoder must
// hand out whole frames or throw wire_error: never crash, never read out of
// bounds, never keep more than the limit allows.
#include <cstddef>
#include <cstdint>

#include "bridge/wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace manta::bridge;
  if (size == 0) return 0;
  // The first byte picks the piece size; the limit is small so long frames are exercised too.
  const std::size_t piece = 1 + data[0] % 17;
  frame_decoder decoder(4096);
  try {
    for (std::size_t at = 1; at < size; at += piece) {
      decoder.feed(data + at, std::min(piece, size - at));
      while (auto f = decoder.next()) {
        if (f->body.size() > 4096) __builtin_trap();
        // A frame re-encoded decodes to itself.
        frame_decoder again;
        std::string bytes = encode(f->type, f->body);
        again.feed(bytes.data(), bytes.size());
        auto back = again.next();
        if (!back || back->type != f->type || back->body != f->body) __builtin_trap();
      }
    }
  } catch (const wire_error&) {
  }
  return 0;
}

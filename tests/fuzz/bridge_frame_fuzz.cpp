// bridge_frame_fuzz: arbitrary bytes arrive on a cluster connection, in
// arbitrary pieces, as from a broken or hostile peer. The frame decoder must
// hand out whole frames or throw wire_error: never crash, never read out of
// bounds, never keep more than the limit allows. Every frame's body then meets
// the task and outcome decoders (what the head, a node and a driver read),
// which must decode it or throw wire_error, and whose output re-encodes to
// something that decodes to the same (moved out of the body or copied), and
// the part assembler, which must put long frames together or throw wire_error.
#include <cstddef>
#include <cstdint>

#include "bridge/task_wire.hpp"
#include "bridge/wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace manta::bridge;
  if (size == 0) return 0;
  // The first byte picks the piece size; the limit is small so long frames are exercised too.
  const std::size_t piece = 1 + data[0] % 17;
  frame_decoder decoder(4096);
  part_assembler parts(1 << 20);  // announcements past a MiB are refused
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
        try {  // as a part of a long frame
          if (auto whole = parts.take(f->body))
            if (whole->body.size() > (1 << 20)) __builtin_trap();
        } catch (const wire_error&) {
        }
        try {
          remote_task t = decode_task(f->body);
          if (decode_task(std::string(f->body)).args != t.args) __builtin_trap();
          remote_task t2 = decode_task(encode_task(t));
          if (t2.id != t.id || t2.args != t.args || t2.name != t.name || t2.resources != t.resources ||
              t2.actor != t.actor || (!t.actor.empty() && t2.max_restarts != t.max_restarts) ||
              t2.objects != t.objects || t2.node != t.node || t2.object != t.object)
            __builtin_trap();
          if (peek_id(with_id(f->body, 7)) != 7) __builtin_trap();
        } catch (const wire_error&) {
        }
        try {
          const object_note n = decode_object_note(f->body);
          const object_note again_note = decode_object_note(encode_object_note(n));
          if (again_note.object != n.object || again_note.node != n.node || again_note.why != n.why) __builtin_trap();
        } catch (const wire_error&) {
        }
        try {
          const actor_end e = decode_actor_end(f->body);
          const actor_end again_end = decode_actor_end(encode_actor_end(e));
          if (again_end.actor != e.actor || again_end.kill != e.kill || again_end.why != e.why) __builtin_trap();
        } catch (const wire_error&) {
        }
        try {
          task_outcome o = decode_outcome(f->body);
          task_outcome moved = decode_outcome(std::string(f->body));
          if (moved.values.size() != o.values.size()) __builtin_trap();
          for (std::size_t i = 0; i < o.values.size(); ++i)
            if (moved.values[i].data() != o.values[i].data()) __builtin_trap();
          if (decode_outcome_head(f->body, f->body.size()).id != o.id) __builtin_trap();
          const outcome_layout layout = layout_of_outcome(f->body, f->body.size());  // (what a landing reads)
          if (layout.sizes.size() != o.values.size()) __builtin_trap();
          for (std::size_t i = 0; i < o.values.size(); ++i)
            if (layout.sizes[i] != o.values[i].data().size()) __builtin_trap();
          task_outcome o2 = decode_outcome(encode_outcome(o));
          if (o2.ok != o.ok || o2.values.size() != o.values.size() || o2.error.message != o.error.message)
            __builtin_trap();
          for (std::size_t i = 0; i < o.values.size(); ++i)
            if (o2.values[i].data() != o.values[i].data() || o2.values[i].tag != o.values[i].tag) __builtin_trap();
        } catch (const wire_error&) {
        }
      }
    }
  } catch (const wire_error&) {
  }
  return 0;
}

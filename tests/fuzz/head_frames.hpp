// tests/fuzz/head_frames.hpp: frames a hostile or broken member could send
// the head, built from a fuzzer's input: raw ones of any type, and well-formed
// tasks, outcomes, parts, actor ends, cancels, lookups, offered actors and
// object notes with hostile twists. Shared by head_fuzz (over sockets) and
// head_state_fuzz (the head's state in-process).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bridge/task_wire.hpp"
#include "bridge/wire.hpp"
#include "fuzz_input.hpp"

namespace manta::fuzzing {

using namespace manta::bridge;

inline std::string hex_id(input& in) {
  static const char digits[] = "0123456789abcdef";
  std::string s(32, '0');
  for (int i = 0; i < 4; ++i) s[static_cast<std::size_t>(28 + i)] = digits[in.byte() % 16];
  return s;
}

inline remote_task a_task(input& in, const std::string& driver, const std::string& node) {
  remote_task t;
  t.id = in.u64(1);
  t.function = in.byte() % 2 ? 0 : in.u64(8);
  t.name = in.byte() % 2 ? "f" : in.bytes(8);
  t.mode = in.byte() % 7;  // (5: an object's value; 6: no mode at all)
  t.num_returns = in.byte() % 3;
  t.arg_count = in.byte() % 3;
  t.num_cpus = in.byte() % 4;
  t.num_gpus = in.byte() % 2 ? 0 : 1;
  if (in.byte() % 3 == 0) t.resources[in.byte() % 2 ? "special" : "nowhere"] = in.byte() % 3;
  t.max_retries = in.byte() % 3;
  const std::uint8_t actor = in.byte() % 5;
  if (actor == 1) t.actor = driver + "/" + std::to_string(in.byte() % 4);
  if (actor == 2) t.actor = driver + "/d" + std::to_string(in.byte() % 4);
  if (actor == 3) t.actor = "driver-999/" + std::to_string(in.byte() % 4);
  if (actor == 4) t.actor = in.bytes(12);
  if (!t.actor.empty()) {
    t.max_restarts = in.byte() % 3 - 1;
    t.max_task_retries = in.byte() % 2;
    if (in.byte() % 3 == 0) {
      t.actor_name = in.byte() % 2 ? "named" : in.bytes(6);
      t.class_tag = in.byte();
    }
  }
  for (int i = in.byte() % 3; i > 0; --i)
    t.objects.push_back((in.byte() % 2 ? driver : in.bytes(8)) + "/" + hex_id(in));
  for (int i = in.byte() % 2; i > 0; --i)
    t.handles.push_back(
        {hex_id(in), in.byte() % 2 ? driver + "/" + std::to_string(in.byte() % 4) : in.bytes(10), in.byte(), "h"});
  t.origin = in.byte() % 2 ? driver : in.bytes(8);
  t.spilled = in.byte() % 4 == 0;
  if (in.byte() % 4 == 0) {
    const int to = in.byte() % 3;  // (a driver is sent objects it fetched)
    t.node = to == 0 ? node : to == 1 ? driver : in.bytes(8);
  }
  if (t.mode == mode_object || in.byte() % 8 == 0) t.object = (in.byte() % 2 ? driver : in.bytes(8)) + "/" + hex_id(in);
  t.args = in.bytes(32);
  return t;
}

inline task_outcome an_outcome(input& in, const std::vector<std::uint64_t>& known, const std::string& driver) {
  task_outcome o;
  o.id = !known.empty() && in.byte() % 4 ? known[in.byte() % known.size()] : in.u64(1);
  o.ok = in.byte() % 4 != 0;
  if (!o.ok) {
    o.error.message = in.bytes(8);
    o.error.kind = in.byte() % 12;
    return o;
  }
  for (int i = in.byte() % 3; i > 0; --i) {
    remote_value v;
    v.tag = in.byte();
    v.bytes = in.bytes(16);
    if (in.byte() % 3 == 0) v.id = hex_id(in);
    if (in.byte() % 4 == 0) v.inside.push_back(hex_id(in));
    o.values.push_back(std::move(v));
  }
  for (int i = in.byte() % 2; i > 0; --i) {
    returned_handle h;
    h.id = hex_id(in);
    h.key = in.byte() % 2 ? driver + "/" + std::to_string(in.byte() % 4) : in.bytes(10);
    h.label = "h";
    h.owned = in.byte() % 2;
    h.hosted = h.owned && in.byte() % 2;
    o.handles.push_back(h);
  }
  if (in.byte() % 2) o.lender = in.byte() % 2 ? driver : in.bytes(8);
  return o;
}

/// One frame from member `driver_id` or `node_id`'s side, naming tasks `known` (the head's numbers).
inline std::pair<frame_type, std::string> a_frame(input& in, std::uint8_t what, const std::string& driver_id,
                                                  const std::string& node_id, const std::vector<std::uint64_t>& known) {
  frame_type type{};
  std::string body;
  switch (what % 12) {
    case 0:  // raw bytes of any type
      type = static_cast<frame_type>(in.byte() % 26);
      body = in.bytes(48);
      break;
    case 1:
    case 2:
      type = frame_type::run_task;
      body = encode_task(a_task(in, driver_id, node_id));
      break;
    case 3:
    case 4:
      type = frame_type::task_result;
      body = encode_outcome(an_outcome(in, known, driver_id));
      break;
    case 5: {  // a part: a long frame's first, a middle one, its last, or an abort
      type = frame_type::part;
      part_header h;
      h.stream = in.byte() % 4;
      const std::uint8_t flags = in.byte();
      h.first = flags & 1;
      h.last = flags & 2;
      h.abort = flags & 4;
      std::string bytes;
      if (h.first) {
        h.type = flags & 8 ? frame_type::task_result : frame_type::run_task;
        bytes = h.type == frame_type::run_task ? encode_task_head(a_task(in, driver_id, node_id))
                                               : encode_outcome_head(an_outcome(in, known, driver_id));
        h.total = bytes.size() + (flags & 16 ? 0 : in.u64(2));
      } else {
        bytes = in.bytes(24);
      }
      body = encode_part_header(h) + bytes;
      break;
    }
    case 6:
      type = frame_type::actor_end;
      body = encode_actor_end({in.byte() % 2 ? driver_id + "/" + std::to_string(in.byte() % 4) : in.bytes(10),
                               static_cast<bool>(in.byte() % 2), in.byte() % 4 ? "" : in.bytes(8)});
      break;
    case 7: {
      type = frame_type::cancel_task;
      const std::uint64_t id = !known.empty() && in.byte() % 2 ? known[in.byte() % known.size()] : in.u64(1);
      body = encode_cancel(id);
      break;
    }
    case 8:
      type = frame_type::find_actor;
      body = encode_actor_lookup({in.u64(1), in.byte() % 2 ? "named" : in.bytes(6), {}, 0, {}});
      break;
    case 9:
      type = frame_type::host_actor;
      body = encode_actor_lookup({in.byte() % 2 ? 0 : in.u64(1),
                                  in.byte() % 2 ? "" : "named",
                                  in.byte() % 3 ? driver_id + "/d" + std::to_string(in.byte() % 4) : in.bytes(12),
                                  in.byte(),
                                  {}});
      break;
    default: {  // an object note: asked for, lost, freed
      const frame_type notes[] = {frame_type::fetch_object, frame_type::object_lost, frame_type::object_freed};
      type = notes[in.byte() % 3];
      body = encode_object_note({(in.byte() % 2 ? driver_id : in.bytes(8)) + "/" + hex_id(in),
                                 in.byte() % 3 == 0 ? node_id
                                 : in.byte() % 2    ? driver_id
                                                    : in.bytes(8),
                                 in.bytes(6)});
      break;
    }
  }
  return {type, std::move(body)};
}

}  // namespace manta::fuzzing

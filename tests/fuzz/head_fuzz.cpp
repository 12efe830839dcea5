// head_fuzz: what hostile or broken members could send the head. A head runs
// in this process (once, on loopback); each input joins a driver and a node to
// it through real connections (bridge::node_link: the token proved, the join
// sent), sends frames built from the input through both (raw ones of any type,
// and well-formed tasks, outcomes, parts, actor ends, cancels, lookups, offered
// actors and object notes with hostile twists), and then drops both links.
// Every frame must be handled, or end its sender's connection (malformed),
// and the head must stay consistent: no crash, no sanitizer report, and it
// still answers a status request after each input (the members it lost gone
// from its work).
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "bridge/membership.hpp"
#include "bridge/task_wire.hpp"
#include "bridge/wire.hpp"
#include "fuzz_input.hpp"

namespace {

using namespace manta::bridge;
using namespace std::chrono_literals;

const std::string token = "head-fuzz-token-0123456789abcdef";

head& the_head() {
  // Lost members are seen at once (their connections close); work lost with
  // them fails at once rather than wait for a node.
  static head* h = new head({.token = token, .lost_after = 2000ms, .node_wait = 0ms});
  return *h;
}

using manta::fuzzing::input;

/// What the node's link received: the tasks' numbers, to answer them.
struct received {
  std::mutex mu;
  std::vector<std::uint64_t> tasks;
};

std::string hex_id(input& in) {
  static const char digits[] = "0123456789abcdef";
  std::string s(32, '0');
  for (int i = 0; i < 4; ++i) s[static_cast<std::size_t>(28 + i)] = digits[in.byte() % 16];
  return s;
}

remote_task a_task(input& in, const std::string& driver, const std::string& node) {
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
  for (int i = in.byte() % 3; i > 0; --i) t.objects.push_back((in.byte() % 2 ? driver : in.bytes(8)) + "/" + hex_id(in));
  for (int i = in.byte() % 2; i > 0; --i)
    t.handles.push_back({hex_id(in), in.byte() % 2 ? driver + "/" + std::to_string(in.byte() % 4) : in.bytes(10),
                         in.byte(), "h"});
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

task_outcome an_outcome(input& in, const std::vector<std::uint64_t>& known, const std::string& driver) {
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

/// Sends one frame built from the input through one of the two links still
/// up; marks a link down once it is closed (the head ended it, as it should
/// for a malformed frame).
void send_one(input& in, node_link& driver, node_link& node, bool up[2], received& got) {
  const std::uint8_t what = in.byte();
  const int sender = up[0] && up[1] ? (what >> 7) : up[1] ? 1 : 0;
  node_link& from = sender ? node : driver;
  const std::string driver_id = driver.node_id(), node_id = node.node_id();
  std::vector<std::uint64_t> known;
  {
    std::lock_guard lock(got.mu);
    known = got.tasks;
  }
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
      body.assign(reinterpret_cast<const char*>(&id), sizeof id);
      break;
    }
    case 8:
      type = frame_type::find_actor;
      body = encode_actor_lookup({in.u64(1), in.byte() % 2 ? "named" : in.bytes(6), {}, 0, {}});
      break;
    case 9:
      type = frame_type::host_actor;
      body = encode_actor_lookup({in.byte() % 2 ? 0 : in.u64(1), in.byte() % 2 ? "" : "named",
                                  in.byte() % 3 ? driver_id + "/d" + std::to_string(in.byte() % 4) : in.bytes(12),
                                  in.byte(), {}});
      break;
    default: {  // an object note: asked for, lost, freed
      const frame_type notes[] = {frame_type::fetch_object, frame_type::object_lost, frame_type::object_freed};
      type = notes[in.byte() % 3];
      body = encode_object_note({(in.byte() % 2 ? driver_id : in.bytes(8)) + "/" + hex_id(in),
                                 in.byte() % 3 == 0 ? node_id : in.byte() % 2 ? driver_id : in.bytes(8), in.bytes(6)});
      break;
    }
  }
  try {
    from.send(type, body);
  } catch (const std::exception&) {
    up[sender] = false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  head& h = the_head();
  const std::string address = "127.0.0.1:" + std::to_string(h.port());
  input in{data, size};
  received got;
  {
    const std::vector<std::string> functions{"f", "g"};
    node_link driver(address, token, {"fuzz", static_cast<int>(::getpid()), {}, functions, "driver"},
                     [](const std::string&) {});
    node_link node(
        address, token, {"fuzz", static_cast<int>(::getpid()), {{"CPU", 2}, {"special", 1}}, functions, "node"},
        [](const std::string&) {},
        [&](std::vector<frame>&& frames) {
          std::lock_guard lock(got.mu);
          for (const frame& f : frames)
            if (f.type == frame_type::run_task && f.body.size() >= sizeof(std::uint64_t))
              got.tasks.push_back(peek_id(f.body));
        });
    bool up[2] = {true, true};  // the driver's link, the node's
    for (int frames = 0; !in.empty() && frames < 64 && (up[0] || up[1]); ++frames) send_one(in, driver, node, up, got);
  }  // both links dropped: the head loses them, and what it routed for them
  // Still serving, within a bound: a hang, a dead head or a stray frame is a finding.
  try {
    if (ask_head(address, token, "status").find("\"nodes\"") == std::string::npos) __builtin_trap();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "head_fuzz: the head no longer answers a status request: %s\n", e.what());
    __builtin_trap();
  }
  return 0;
}

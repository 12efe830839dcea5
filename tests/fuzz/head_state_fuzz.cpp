// head_state_fuzz: the head's state (bridge/head_state.hpp) in-process, as
// handler_fuzz drives the scheduler: no socket, so tens of thousands of
// inputs a run. Each input builds a fresh state with two nodes and two
// drivers, then plays steps from the input: frames from any member (raw ones
// of any type, and well-formed tasks, outcomes, parts, actor ends, cancels,
// lookups, offered actors and object notes with hostile twists: head_frames.hpp),
// members lost and new nodes joining, time passing (silence, waits for a node)
// and stops. A frame the state throws on ends its member, as the transport does.
// Then every member leaves, and the state must hold nothing: no routed task,
// actor, waiting work, directory entry or kept byte (a leak there is a head
// that grows for as long as it runs).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bridge/head_state.hpp"
#include "fuzz_input.hpp"
#include "head_frames.hpp"

namespace {

using namespace manta::bridge;
using namespace std::chrono_literals;
using manta::fuzzing::input;
using member_ptr = head_state::member_ptr;

std::string join_body(const std::string& role, double cpus, bool special) {
  std::string resources = "{\"CPU\":" + std::to_string(cpus) + (special ? ",\"special\":1}" : "}");
  return "{\"host\":\"fuzz\",\"pid\":1,\"resources\":" + resources + ",\"functions\":[\"f\",\"g\"],\"role\":\"" + role +
         "\"}";
}

struct run {
  head_state head;
  head_state::clock::time_point now{std::chrono::seconds(100)};
  std::vector<member_ptr> nodes, drivers;
  std::vector<std::uint64_t> known;  ///< the head's numbers of tasks it sent to nodes
  std::vector<head_state::outgoing> out;

  explicit run(head_state::settings s) : head(s) {}

  member_ptr join(const std::string& role, double cpus, bool special) {
    auto m = std::make_shared<head_state::member>();
    if (!head.join(m, join_body(role, cpus, special), "127.0.0.1:1", now, out)) __builtin_trap();  // same registry
    (role == "driver" ? drivers : nodes).push_back(m);
    return m;
  }
  /// Checks what the state asked to send, and learns the tasks' numbers.
  void drain() {
    for (const auto& o : out) {
      if (!o.to || !o.body) __builtin_trap();
      // A frame queued as kept must be one the head holds: else it escapes its receiver's cap.
      if (o.kept && !head.keeps(o.body)) {
        std::fprintf(stderr, "head_state_fuzz: a frame of type %d queued as kept is held nowhere\n",
                     static_cast<int>(o.type));
        __builtin_trap();
      }
      if (o.type == frame_type::run_task && !o.to->driver && o.body->size() >= sizeof(std::uint64_t))
        known.push_back(peek_id(*o.body));
    }
    out.clear();
    if (known.size() > 64) known.erase(known.begin(), known.begin() + 32);
  }
  static member_ptr alive(const std::vector<member_ptr>& from, std::uint8_t pick) {
    std::vector<member_ptr> up;
    for (const auto& m : from)
      if (!m->done) up.push_back(m);
    return up.empty() ? nullptr : up[pick % up.size()];
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  input in{data, size};
  const std::uint8_t shape = in.byte();
  run r({.lost_after = 2000ms,
         .node_wait = shape & 1 ? 1000ms : 0ms,
         .max_kept = shape & 2 ? 256 : std::uint64_t{1} << 20});
  r.join("node", 2, true);
  r.join("driver", 0, false);
  r.join("node", 1, false);
  r.join("driver", 0, false);
  r.drain();
  for (int step = 0; !in.empty() && step < 256; ++step) {
    const std::uint8_t what = in.byte();
    if (what % 16 < 12) {  // a frame from a driver or a node
      auto from = (what & 0x80) ? r.alive(r.nodes, in.byte()) : r.alive(r.drivers, in.byte());
      auto driver = r.alive(r.drivers, 0), node = r.alive(r.nodes, 0);
      if (!from) continue;
      auto [type, body] = manta::fuzzing::a_frame(in, in.byte(), driver ? driver->node_id : "driver-9",
                                                  node ? node->node_id : "node-9", r.known);
      try {
        r.head.take(from, frame{type, std::move(body)}, r.now, r.out);
      } catch (const std::exception& e) {  // malformed: its connection ends
        r.head.lose(*from, e.what(), r.now, r.out);
      }
    } else if (what % 16 == 12) {  // a member's connection ends
      auto m = in.byte() % 2 ? r.alive(r.nodes, in.byte()) : r.alive(r.drivers, in.byte());
      if (m) r.head.lose(*m, "its connection closed", r.now, r.out);
    } else if (what % 16 == 13) {  // a node joins (the lost one again, or another)
      if (r.nodes.size() < 8) r.join("node", in.byte() % 3, in.byte() % 2);
    } else if (what % 16 == 14) {  // time passes: silent members are lost, waits end
      r.now += std::chrono::milliseconds(250 * (in.byte() % 16));
      if (in.byte() % 2)
        for (auto& m : r.nodes)
          if (!m->done) r.head.heard(*m, r.now);
      r.head.drop_silent(r.now, r.out);
    } else {
      r.head.stop(r.out);
    }
    r.drain();
  }
  // Everyone leaves: nothing may stay behind.
  for (auto& m : r.drivers) r.head.lose(*m, "left", r.now, r.out);
  for (auto& m : r.nodes) r.head.lose(*m, "left", r.now, r.out);
  r.now += 10s;
  r.head.drop_silent(r.now, r.out);
  r.drain();
  const auto held = r.head.held();
  if (held.members || held.routed || held.actors || held.waiting || held.directory || held.kept_bytes) {
    std::fprintf(stderr,
                 "head_state_fuzz: left behind: members %zu, routed %zu, actors %zu, waiting %zu, directory %zu, "
                 "kept bytes %llu\n",
                 held.members, held.routed, held.actors, held.waiting, held.directory,
                 static_cast<unsigned long long>(held.kept_bytes));
    __builtin_trap();
  }
  if (r.head.nodes_json().find("\"nodes\"") == std::string::npos) __builtin_trap();
  return 0;
}

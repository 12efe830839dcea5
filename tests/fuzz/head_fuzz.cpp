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

#include "bridge/head.hpp"
#include "bridge/node_link.hpp"
#include "bridge/task_wire.hpp"
#include "bridge/wire.hpp"
#include "fuzz_input.hpp"
#include "head_frames.hpp"

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
  auto [type, body] = manta::fuzzing::a_frame(in, what, driver_id, node_id, known);
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

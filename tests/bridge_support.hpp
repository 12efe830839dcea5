// bridge_support.hpp: what the bridge's tests share: a long task as a driver
// sends one (a silence limit for a scope is in support.hpp).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "bridge/node_link.hpp"
#include "bridge/task_wire.hpp"
#include "bridge/wire.hpp"
#include "support.hpp"

namespace manta::testing {

using namespace manta::bridge;

/// A task for "f" whose arguments are `bytes` long: a long frame (it goes in
/// parts), its header and its arguments, as the runtime sends one.
struct long_task {
  explicit long_task(std::size_t bytes, std::uint64_t id = 1) : args(bytes, 'x') {
    remote_task t;
    t.id = id;
    t.name = "f";
    t.num_returns = 1;
    t.origin = "driver";
    t.args = args;  // (the header counts them)
    head = encode_task_head(t);
  }
  void send_by(node_link& link) const {
    const std::string_view pieces[] = {head, args};
    link.send(frame_type::run_task, pieces);
  }
  std::string head, args;
};

}  // namespace manta::testing

// cluster/landing.hpp: the large values of a long frame from the cluster land
// in this runtime's arena as their parts arrive (on the link's thread),
// where they stay as objects: no frame of a gigabyte is joined in memory and
// then copied into the arena.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "bridge/task_wire.hpp"
#include "bridge/wire.hpp"
#include <manta/detail/core.hpp>

namespace manta::runtime {

class node_runtime;

/// The values that landed in the arena for one frame, each an extent of the
/// arena until it is claimed (made an object); those never claimed are freed.
class landed_values {
 public:
  explicit landed_values(node_runtime& rt) noexcept : rt_(rt) {}
  ~landed_values();
  landed_values(const landed_values&) = delete;
  landed_values& operator=(const landed_values&) = delete;

  struct value {
    detail::extent room;  ///< the arena's bytes (freed unless claimed)
    std::uint64_t tag = 0;
    std::uint32_t number = 0;  ///< an outcome's: which of its values it is
  };
  /// Room for `size` bytes (node_runtime::landing_room); false if there is
  /// none (the value then stays in the frame).
  bool add(std::size_t size, std::uint64_t tag, std::uint32_t number = 0);
  value& back() noexcept { return values_.back(); }
  std::size_t size() const noexcept { return values_.size(); }
  node_runtime& runtime() const noexcept { return rt_; }
  /// Value `i` as an object (counted): a new one, or kept under `id` (unless
  /// that object is here already). @throws usage_error if there is none (or it was claimed)
  detail::ref_node* claim(std::size_t i);
  detail::ref_node* claim_as(std::size_t i, const object_id& id);
  /// Value `i`'s room, handed over (its taker frees it). @throws usage_error as claim
  detail::extent hand_over(std::size_t i) { return take(i).room; }
  /// Which values of its outcome landed, in order (bridge::decode_outcome's `landed`).
  std::vector<std::uint32_t> numbers() const;

 private:
  value take(std::size_t i);

  node_runtime& rt_;
  std::vector<value> values_;
};

/// The landed values of a task or an outcome that arrived (remote_task::landed), or null.
inline landed_values* landed_of(const bridge::remote_task& t) noexcept {
  return static_cast<landed_values*>(t.landed.get());
}
inline landed_values* landed_of(const bridge::task_outcome& o) noexcept {
  return static_cast<landed_values*>(o.landed.get());
}

/// The landing of a long run_task frame: each value argument over
/// max_inline_bytes goes into the arena as it comes; the task's blob then
/// names it as a ref past `objects` (index objects.size() + its number among
/// the landed); a blob malformed, or announcing more than the frame's `total`
/// bytes hold, leaves the task without arguments (running it says so).
/// @throws bridge::wire_error if `first` is not a task's header
std::unique_ptr<bridge::frame_landing> land_task(node_runtime& rt, std::string_view first, std::uint64_t total);

/// The landing of a long task_result frame (`total` bytes): each value over
/// max_inline_bytes goes into the arena as it comes (remote_value::landed
/// once decoded). @throws bridge::wire_error if `first` is not an outcome's start
std::unique_ptr<bridge::frame_landing> land_outcome(node_runtime& rt, std::string_view first, std::uint64_t total);

/// Both, for a link whose long frames may be tasks or outcomes.
bridge::frame_lander lander_for(node_runtime& rt);

}  // namespace manta::runtime

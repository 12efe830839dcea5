// bridge/head_objects.cpp: the head state's object directory: a driver's objects sent
// to nodes, which node holds a copy, and fetches passed on to their driver.
#include "bridge/head_state.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "bridge/head_rules.hpp"

namespace manta::bridge {

using namespace head_rules;

head_state::member_ptr head_state::node_target(const member_ptr& driver, const remote_task& t, routed_task& r,
                                               std::string& why) {
  r.retries_left = 0;  // it is for that node only
  if (t.mode == mode_object && t.object.rfind(driver->node_id + "/", 0) != 0) {
    why = "its object '" + t.object + "' is not one of " + driver->node_id + "'s";
    return nullptr;
  }
  // (An object goes to a driver too, one that fetched it for a call of an
  // actor of its node: only then, so that no member fills another's arena.)
  auto node = connection_of(t.node, false);
  if (!node && t.mode == mode_object && fetching_.count({t.object, t.node})) node = connection_of(t.node, true);
  if (!node) {
    why = "its node " + t.node + " is not in the cluster";
    return nullptr;
  }
  if (t.mode == mode_object) {
    directory_[t.object].insert(t.node);
    fetching_.erase({t.object, t.node});
  }
  return node;
}

void head_state::route_object_note(const member& from, frame_type type, std::string_view body,
                                   std::vector<outgoing>& out) {
  object_note note = decode_object_note(body);  // malformed: the connection ends
  const std::string owner = note.object.substr(0, note.object.find('/'));
  if (type == frame_type::fetch_object) {
    note.node = from.node_id;  // (the asker is who the head says it is)
    if (auto driver = connection_of(owner, true)) {
      out.push_back({driver, type, std::make_shared<const std::string>(encode_object_note(note))});
      fetching_.insert({note.object, note.node});
    } else {
      note.why = "its driver " + owner + " left the cluster";
      out.push_back({member_of(from.node_id), frame_type::object_lost,
                     std::make_shared<const std::string>(encode_object_note(note))});
      if (!out.back().to) out.pop_back();
    }
    return;
  }
  if (owner != from.node_id) return;  // only its own driver speaks for an object
  if (type == frame_type::object_lost) {
    fetching_.erase({note.object, note.node});
    if (auto node = member_of(note.node)) out.push_back({node, type, std::make_shared<const std::string>(body)});
    return;
  }
  auto it = directory_.find(note.object);  // object_freed
  if (it == directory_.end()) return;
  auto freed = std::make_shared<const std::string>(body);
  for (const auto& node : it->second)
    if (auto n = member_of(node)) out.push_back({n, type, freed});
  directory_.erase(it);
}

}  // namespace manta::bridge

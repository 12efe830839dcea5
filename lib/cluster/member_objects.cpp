// cluster/member_objects.cpp: a member's objects that other members ask for
// (the head relays their fetches): sent when sealed, or why not.
#include <optional>
#include <string>
#include <vector>

#include "cluster/cluster_member.hpp"
#include "process/args_blob.hpp"
#include "runtime/node_runtime.hpp"

namespace manta::runtime {

namespace {
/// The id in a key this driver made, if it is one.
std::optional<object_id> id_of_key(const std::string& key, const std::string& driver) {
  if (key.size() != driver.size() + 33 || key.compare(0, driver.size(), driver) != 0) return std::nullopt;
  return id_in_object_key(key);
}
}  // namespace

void cluster_member::send_object(const bridge::object_note& ask) {
  process::context_use use;  // as in remote_finished
  node_runtime::scheduler_lock lock(rt_);
  if (!attached()) return;
  auto lost = [&](const std::string& why) {
    link_->send_control(bridge::frame_type::object_lost, bridge::encode_object_note({ask.object, ask.node, why}));
  };
  const std::optional<object_id> id = id_of_key(ask.object, link_->id());
  object_entry* e = id ? rt_.dir_->acquire(*id) : nullptr;  // counted: a user thread may drop the last ref meanwhile
  if (!e) return lost("it was freed");
  if (e->status() == state_pending) {
    // A ref inside a task's arguments may name an object not made yet: it goes
    // once sealed (the task waits on its node meanwhile).
    auto [asks, first] = asked_pending_.try_emplace(e);
    asks->second.push_back(ask);
    if (first) e->subscribe({subscriber::cluster, 0});
    else detail::release(e);  // (one count per entry)
    return;
  }
  send_object_now(ask, e);
}

void cluster_member::object_settled(object_entry* e) {
  auto it = asked_pending_.find(e);
  if (it == asked_pending_.end()) return;
  std::vector<bridge::object_note> asks = std::move(it->second);
  asked_pending_.erase(it);
  for (std::size_t i = 0; i < asks.size(); ++i) {
    if (i + 1 < asks.size()) detail::acquire(e);  // one count for each send
    send_object_now(asks[i], e);
  }
}

void cluster_member::send_object_now(const bridge::object_note& ask, object_entry* e) {
  auto lost = [&](const std::string& why, std::optional<ipc::error_info> error = {}, bool failed = false) {
    bridge::object_note note{ask.object, ask.node, why};
    if (error) note.error = to_remote(*error);
    note.failed = failed;
    link_->send_control(bridge::frame_type::object_lost, bridge::encode_object_note(note));
  };
  if (!attached()) return detail::release(e);
  if (e->status() == state_failed) {
    // Its own error goes with it: the asker keeps the object as failed.
    const ipc::error_info why = e->error->describe();
    detail::release(e);
    return lost("it failed: " + (why.remote_type.empty() ? "" : why.remote_type + ": ") + why.message, why, true);
  }
  if (e->status() != state_ready || e->actor) {
    detail::release(e);
    return lost("it is not a sealed value");
  }
  bridge::remote_task out;
  out.name = "object " + ask.object;
  out.mode = bridge::mode_object;
  out.arg_count = 1;
  out.node = ask.node;
  out.object = ask.object;
  process::append_arg_header(out.args, process::arg_kind::value, e->type_tag, static_cast<std::uint32_t>(e->size));
  std::vector<cluster_driver::held_argument> held;
  try {
    held.reserve(1);  // (no allocation between a pin and its record)
    rt_.store_->pin(e);  // back from the spill file, if it is there (which may fail: the arena full)
  } catch (const std::exception& ex) {
    detail::release(e);
    return lost(std::string("it could not be read: ") + ex.what(),
                ipc::error_from_exception(std::current_exception(), {}, rt_.pid_));
  }
  held.push_back({out.args.size(), {reinterpret_cast<const char*>(e->data()), e->size}, e});  // (its count: the held one)
  link_->send(std::move(out), std::move(held));  // (gives them back itself if it cannot go)
}

}  // namespace manta::runtime

// cluster/member_actors.cpp: a member's actors on the cluster: named ones
// offered to the head, handles lent to other members in results, and
// get_actor's lookups through the head.
#include <string>

#include <manta/errors.hpp>

#include "cluster/cluster_member.hpp"
#include "runtime/node_runtime.hpp"

namespace manta::runtime {

void cluster_member::offer_named(actor_record& a) {
  if (serving_ || a.remote || !a.remote_key.empty()) return;  // (a node's go through the head)
  // With the cluster gone nobody answers: it starts here at once, its name this
  // driver's alone. (Lost after this, cluster_lost starts the ones waiting.)
  if (!link_->lost().empty()) return;
  a.remote_key = link_->id() + "/d" + std::to_string(++remote_actors_);
  a.awaiting_name = true;  // (it starts once the head took the name: two drivers may pick one at once)
  link_->offer_actor(a.remote_key, a.class_tag, a.name);
}

bridge::returned_handle cluster_member::lend_actor(detail::ref_node* handle) {
  object_entry* e = static_cast<object_entry*>(handle);
  node_runtime::scheduler_lock lock(rt_);
  actor_record& a = *e->actor;
  bridge::returned_handle h;
  h.id = id_text(e->id);
  h.class_tag = a.class_tag;
  h.label = a.label;
  if (!attached()) throw node_died_error("manta: a result holds a handle of actor " + a.label + ", and the cluster is gone");
  if (a.remote && a.remote_key.empty())
    throw usage_error("manta: a result holds a handle of actor " + a.label +
                      ", whose constructor has not gone to the cluster yet (wait for one of its calls first)");
  if (!a.remote) {
    // Its calls from elsewhere come to this driver (host_loop). Offered as
    // for a handle in arguments; the outcome may reach the head first (on the
    // node's other connection), so it tells the head too.
    if (a.remote_key.empty()) {
      a.remote_key = link_->id() + "/d" + std::to_string(++remote_actors_);
      link_->offer_actor(a.remote_key, a.class_tag, a.name);
      if (a.st == actor_record::state::dead) link_->end_actor(a.remote_key, false);
    }
    h.hosted = true;
  }
  h.key = a.remote_key;
  if (a.borrowed) return h;  // another driver's: borrowed there too
  h.owned = true;
  auto& [entry, counts] = lent_[h.key];
  entry = e;
  ++counts;
  detail::acquire(e);
  return h;
}

void cluster_member::actor_returned(const std::string& key) {
  process::context_use use;  // as in remote_finished
  object_entry* e = nullptr;
  {
    node_runtime::scheduler_lock lock(rt_);
    if (auto it = lent_.find(key); it != lent_.end()) {
      e = it->second.first;
      if (--it->second.second == 0) lent_.erase(it);
    }
  }
  if (e) detail::release(e);  // (may end it: its last handle)
}

namespace {
/// What get_actor(`name`) of class `class_tag` says of the head's answer
/// `found`: empty if it names the actor, or if there is none of that name
/// (then found.key is empty too).
std::string lookup_error(const std::string& name, std::uint64_t class_tag, const bridge::actor_lookup& found) {
  if (found.key.empty())
    return found.why.rfind("no actor of the cluster is named", 0) == 0 ? std::string()
                                                                          : "manta: get_actor('" + name + "'): " + found.why;
  if (found.class_tag != class_tag)
    return "manta: the actor named '" + name + "' is a " + detail::actor_class_name(found.class_tag) + ", not a " +
           detail::actor_class_name(class_tag);
  return {};
}
}  // namespace

bool cluster_member::find_actor_later(int slot, std::uint64_t generation, std::uint64_t request, const std::string& name,
                                    std::uint64_t class_tag, std::string& error) {
  if (!attached()) return false;
  if (link_->find_actor_later({slot, generation, request, class_tag, name})) return true;
  const std::string lost = link_->lost();
  error = "manta: get_actor('" + name + "'): " + (lost.empty() ? "this runtime is leaving the cluster" : "the cluster is gone (" + lost + ")");
  return false;
}

void cluster_member::actor_found_for(const cluster_driver::actor_asker& asker, const bridge::actor_lookup& found) {
  std::string error = lookup_error(asker.name, asker.class_tag, found);
  process::context_use use;  // as in remote_finished
  node_runtime::scheduler_lock lock(rt_);
  if (!attached()) return;  // (shutting down)
  if (std::string lost = link_->lost(); !lost.empty() && error.empty() && !found.key.empty())
    error = "manta: get_actor('" + asker.name + "'): the cluster is gone (" + lost + ")";
  rt_.sched_->answer_actor_lookup(asker.slot, asker.generation, asker.request, error.empty() ? found.key : std::string(),
                              asker.class_tag, asker.name, error);
  rt_.sched_->flush_dirty();
}

detail::ref_node* cluster_member::find_actor(const std::string& name, std::uint64_t class_tag) {
  bridge::actor_lookup found = link_->find_actor(name);
  if (std::string error = lookup_error(name, class_tag, found); !error.empty()) throw usage_error(error);
  if (found.key.empty()) return nullptr;
  node_runtime::scheduler_lock lock(rt_);
  if (std::string lost = link_->lost(); !lost.empty())
    throw usage_error("manta: get_actor('" + name + "'): the cluster is gone (" + lost + ")");
  return rt_.sched_->adopt_remote_actor(found.key, class_tag, name);
}

}  // namespace manta::runtime

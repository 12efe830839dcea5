// runtime/node_runtime_remote.cpp: node_runtime and other runtimes: objects
// and actors that come from the cluster (imports, borrowed handles), and
// what it hands to its cluster_port, the only part of the runtime that
// knows a cluster is there.
#include "runtime/node_runtime.hpp"

#include <manta/errors.hpp>


namespace manta::runtime {

void node_runtime::attach_cluster(std::unique_ptr<cluster_port> cluster) {
  scheduler_lock lock(*this);  // dispatch reads cluster_ under it
  cluster_ = std::move(cluster);
}

void node_runtime::cluster_io_due() {
  cluster_io_due_.store(true, std::memory_order_release);
  wake_io();
}

void node_runtime::run_cluster_io() {
  if (!cluster_io_due_.exchange(false, std::memory_order_acq_rel)) return;
  scheduler_lock lock(*this);
  if (cluster_) cluster_->run_io();
}

// ---- scheduler_host's cluster half (under the scheduler's lock)

std::optional<ipc::error_info> node_runtime::send_remote(task_spec& t) {
  if (!cluster_)  // (shutting down: the link is gone)
    return ipc::error_info{ipc::error_kind::node_died, "manta::node_died_error",
                           "manta: task '" + t.name() + "' needs another node, and this runtime left its cluster",
                           t.name(), {}, 0, 0, {}};
  return cluster_->send_remote(t);
}

bool node_runtime::remote_room(const task_spec& t, std::size_t in_flight) {
  return cluster_ && cluster_->remote_room(t, in_flight);
}

bool node_runtime::cluster_room(const detail::task_options& o, std::size_t in_flight) {
  return cluster_ && cluster_->cluster_room(o, in_flight);
}

bool node_runtime::cluster_can_run(const task_spec& t) { return cluster_ && cluster_->can_run(t); }

void node_runtime::end_remote_actor(const std::string& key, bool kill) {
  if (cluster_) cluster_->end_remote_actor(key, kill);
}

void node_runtime::cancel_remote(std::uint64_t key) {
  if (cluster_) cluster_->cancel_remote(key);
}

void node_runtime::object_settled(object_entry* e) {
  if (cluster_) cluster_->object_settled(e);
}

bool node_runtime::find_actor_later(int slot, std::uint64_t generation, std::uint64_t request, const std::string& name,
                                    std::uint64_t class_tag, std::string& error) {
  return cluster_ && cluster_->find_actor_later(slot, generation, request, name, class_tag, error);
}

bool node_runtime::names_in_cluster() { return cluster_ && cluster_->names_in_cluster(); }

void node_runtime::offer_named(actor_record& a) {
  if (cluster_) cluster_->offer_named(a);
}

std::vector<manta::node_info> node_runtime::cluster_nodes() {
  return cluster_ ? cluster_->nodes() : std::vector<manta::node_info>{};
}

detail::ref_node* node_runtime::find_actor(const std::string& name, std::uint64_t class_tag) {
  call_guard guard(*this);
  {
    scheduler_lock lock(*this);
    register_submissions();  // a named actor submitted just now is found
    if (object_entry* e = sched_->find_actor(name, class_tag)) return e;
    if (!cluster_) return nullptr;
  }
  // Not this driver's: another driver's, living on a node of the cluster?
  return cluster_->find_actor(name, class_tag);
}

// ---- what other runtimes' objects and actors become here

void node_runtime::remote_actor_killed(const std::string& key, const std::string& why) {
  process::context_use use;  // as in remote_finished
  scheduler_lock lock(*this);
  sched_->remote_actor_killed(key, why);
  sched_->flush_dirty();
}

void node_runtime::offer_answered(const std::string& key, const std::string& why) {
  process::context_use use;  // as in remote_finished
  scheduler_lock lock(*this);
  sched_->name_answered(key, why);
  sched_->flush_dirty();
}

detail::ref_node* node_runtime::hosted_actor(const std::string& key) {
  call_guard guard(*this);
  scheduler_lock lock(*this);
  return sched_->offered_actor(key);
}

void node_runtime::accept_import(const object_id& id) {
  // An id of this runtime's own epoch comes back when a driver sends this node
  // an object it made (a worker's ids carry its own counter, so no sequence
  // check can tell them from another runtime's: two random epochs alike is 1 in 2^32).
  if ((id.hi >> 32) != epoch_)
    control_->holds_imports.store(true, std::memory_order_release);  // (before any task here reads a ref to it)
}

detail::ref_node* node_runtime::import_object(const object_id& id, const detail::encoded_value& v) {
  if (object_entry* e = dir_->acquire(id)) return e;  // still here: a worker kept a ref to it
  accept_import(id);
  return put_as(id, v);
}

detail::ref_node* node_runtime::borrow_actor(const object_id& id, const std::string& key, std::uint64_t class_tag,
                                             const std::string& label, bool owned) {
  call_guard guard(*this);
  if (object_entry* e = dir_->acquire(id)) {  // still here (a worker kept it), or this node's own record
    if (e->actor) return e;
    detail::release(e);
    throw usage_error("manta: an actor handle names object " + id_text(id) + ", which is not an actor here");
  }
  accept_import(id);
  scheduler_lock lock(*this);
  object_entry* e = sched_->adopt_remote_actor(key, class_tag, label, id);
  e->actor->borrowed = !owned;
  return e;
}

void node_runtime::own_actor(detail::ref_node* handle) {
  auto* e = static_cast<object_entry*>(handle);
  scheduler_lock lock(*this);
  if (e->actor && e->actor->remote && e->actor->remote_key.size()) e->actor->borrowed = false;
}

detail::ref_node* node_runtime::import_failed(const object_id& id, const ipc::error_info& why) {
  if (object_entry* e = dir_->acquire(id)) return e;
  accept_import(id);
  call_guard guard(*this);
  object_entry* e = dir_->create(id, 1);
  e->owner = pid_;
  e->error = ipc::make_failure(why);
  e->state.store(state_failed, std::memory_order_release);
  dir_->insert(e);
  return e;
}

}  // namespace manta::runtime

// cluster/remote_jobs.cpp: the work a node does for other members of the
// cluster (remote_jobs.hpp).
#include "cluster/remote_jobs.hpp"

#include <algorithm>
#include <cstdio>
#include <set>
#include <unordered_set>

#include <manta/errors.hpp>
#include <manta/registry.hpp>

#include "process/args_blob.hpp"
#include "process/context.hpp"
#include "runtime/directory.hpp"
#include "cluster/landing.hpp"

namespace manta::runtime {

std::string host_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return "localhost";
  return host;
}

namespace remote {

bridge::task_outcome failed_outcome(std::uint64_t id, ipc::error_info e) {
  bridge::task_outcome o;
  o.id = id;
  o.ok = false;
  o.error = to_remote(e);
  return o;
}

/// Why `what` (a task or call named `name`) fails: object `key` cannot come.
/// Its driver says with which error (object_store_full: it could not be read
/// back), else node_died_error (its driver left, or it was freed).
ipc::error_info unfetched(const std::string& what, const std::string& name, const std::string& key,
                          const std::string& why, const std::optional<ipc::error_info>& cause) {
  ipc::error_info e{ipc::error_kind::node_died, "manta::node_died_error", {}, name, {}, ::getpid(), 0, {}};
  if (cause) {
    e.kind = cause->kind;
    e.remote_type = cause->remote_type;
  }
  e.message = "manta: " + what + " '" + name + "' needs object " + key + ", which could not be fetched: " + why;
  return e;
}

ipc::error_info usage_failure(const std::string& message, const std::string& function) {
  return {ipc::error_kind::usage, "manta::usage_error", message, function, {}, ::getpid(), 0, {}};
}

/// Whether every object `t` names is here.
bool has_objects(const bridge::remote_task& t, const object_table& objects) {
  return std::all_of(t.objects.begin(), t.objects.end(), [&](const std::string& k) { return objects.has(k); });
}

/// Submits `t` to this node's runtime; an actor's constructor goes into
/// `actors` and leaves the job without results. @throws what submission throws
job start(node_runtime& rt, const bridge::remote_task& t, actor_table& actors, const object_table& objects) {
  using detail::call_mode;
  if (t.mode > static_cast<std::uint8_t>(call_mode::method))
    throw usage_error("manta: task '" + t.name + "' came with a call mode a node does not run");
  const auto mode = static_cast<call_mode>(t.mode);
  const auto kind = mode == call_mode::construct ? detail::callable_kind::constructor
                    : mode == call_mode::method  ? detail::callable_kind::method
                                                 : detail::callable_kind::function;
  const detail::function_info* fn = detail::function_by_id(t.function);
  if (!fn || fn->kind != kind)
    throw usage_error("manta: '" + t.name + "' is not a " +
                      (kind == detail::callable_kind::function ? "function" : "an actor's constructor or method") +
                      " this node's binary registered");
  if ((kind == detail::callable_kind::function) != t.actor.empty())
    throw usage_error("manta: task '" + t.name + "' came without its actor, or with one it does not take");
  if (mode == call_mode::construct && actors.count(t.actor))
    throw usage_error("manta: actor '" + t.actor + "' was started on this node already");
  detail::task_request r;
  if (mode == call_mode::method) {
    auto it = actors.find(t.actor);
    if (it == actors.end())
      throw actor_died_error("manta: the actor of call '" + t.name + "' is not on this node (it was ended)");
    detail::acquire(it->second);
    r.actor = it->second;
  }
  r.function = fn;
  r.mode = mode;
  r.num_returns = t.num_returns;
  r.options.num_cpus = t.num_cpus;
  r.options.num_gpus = t.num_gpus;
  r.options.resources = t.resources;
  r.options.memory = t.memory;
  r.options.max_retries = t.max_retries;
  r.options.retry_exceptions = t.retry_exceptions;
  // (An actor's name lives in its driver: two drivers may name theirs alike.)
  r.options.name = t.name == fn->name || mode == call_mode::construct ? std::string() : t.name;
  r.options.timeout_ns = t.timeout_ns;
  r.options.max_calls = t.max_calls;
  if (mode == call_mode::construct) {
    r.options.max_restarts = t.max_restarts;
    r.options.max_task_retries = t.max_task_retries;
    r.options.max_concurrency = std::max(1, t.max_concurrency);
  }
  // Handles its arguments hold, of actors on nodes: made here first, under their ids.
  std::vector<detail::ref_node*> handles;
  struct release_all {
    std::vector<detail::ref_node*>& v;
    ~release_all() {
      for (auto* n : v) detail::release(n);
    }
  } on_failure{handles};
  for (const auto& h : t.handles) {
    const std::optional<object_id> id = id_from_text(h.id);
    if (!id) throw usage_error("manta: task '" + t.name + "' names an actor handle with a malformed id");
    handles.push_back(rt.borrow_actor(*id, h.key, h.class_tag, h.label));
  }
  detail::arg_writer writer(r);  // large values go into this node's arena first
  process::for_each_arg(t.args, t.arg_count, [&](const process::blob_arg& a) {
    if (a.kind == process::arg_kind::ref && a.size_or_index >= t.objects.size() && landed_of(t)) {
      detail::ref_node* n = landed_of(t)->claim(a.size_or_index - t.objects.size());  // it landed in the arena
      struct released {
        detail::ref_node* n;
        ~released() { detail::release(n); }
      } once_passed{n};
      writer.ref(n, a.tag);
      return;
    }
    if (a.kind == process::arg_kind::ref) {  // an object fetched before (has_objects)
      detail::ref_node* held = a.size_or_index < t.objects.size() ? objects.find(t.objects[a.size_or_index]) : nullptr;
      if (!held) throw usage_error("manta: task '" + t.name + "' names an object this node does not hold");
      writer.ref(held, a.tag);
      return;
    }
    detail::encoded_value v;
    v.type_tag = a.tag;
    v.borrowed = a.bytes;
    v.size = a.size_or_index;
    writer.value(v);
  });
  job j{t.id, std::vector<detail::ref_node*>(t.num_returns, nullptr)};
  j.call = mode == call_mode::method;
  rt.submit(std::move(r), j.returns.data());
  j.handles = std::move(handles);  // (held until it is answered)
  if (mode == call_mode::construct) {
    actors.emplace(t.actor, j.returns[0]);  // the handle: calls find it from now on
    j.returns.clear();
  }
  return j;
}

/// Keeps the value an object frame carries (mode_object) as `t.object`, under
/// the id its driver gave it: refs to it inside other values resolve here.
/// @throws what putting it throws (the arena is full), usage_error for a malformed key
void keep_object(node_runtime& rt, object_table& objects, const bridge::remote_task& t) {
  if (objects.has(t.object) || t.arg_count != 1) return;
  const std::optional<object_id> id = id_in_object_key(t.object);
  if (!id) throw usage_error("manta: object " + t.object + " came with a malformed key");
  if (landed_values* landed = landed_of(t)) {  // it landed in the arena as it came
    objects.keep(t.object, landed->claim_as(0, *id));
    return;
  }
  detail::encoded_value v;
  process::for_each_arg(t.args, t.arg_count, [&](const process::blob_arg& a) {
    if (a.kind != process::arg_kind::value) throw usage_error("manta: object " + t.object + " came as a ref");
    v.type_tag = a.tag;
    v.borrowed = a.bytes;
    v.size = a.size_or_index;
  });
  objects.keep(t.object, rt.import_object(*id, v));
}

/// Keeps object `key` that failed at its driver as failed here (`failed`
/// note), so what names it runs and its get raises the object's own error, as
/// on the driver's node. @returns false if it cannot (a malformed key)
bool keep_failed(node_runtime& rt, object_table& objects, const bridge::object_note& note) {
  if (!note.failed || !note.error || objects.has(note.object)) return false;
  const std::optional<object_id> id = id_in_object_key(note.object);
  if (!id) return false;
  objects.keep(note.object, rt.import_failed(*id, from_remote(*note.error)));
  return true;
}

/// A driver ended one of its actors here: its handle goes (it ends once its
/// calls are done), or it is killed at once.
void end_actor(node_runtime& rt, actor_table& actors, const bridge::actor_end& e) {
  auto it = actors.find(e.actor);
  if (it == actors.end()) return;
  if (e.kill) {
    try {
      rt.kill_actor(it->second);
    } catch (const std::exception&) {  // (the runtime is going)
    }
  }
  detail::release(it->second);
  actors.erase(it);
}

/// The objects refs inside `j`'s results name that their driver may not
/// hold, and refs inside those, each after the ones it holds refs to (the
/// driver keeps them in that order): those this node made, those it got
/// from other nodes (results of its own nested tasks), and every actor
/// handle. Copies of drivers' objects, fetched for tasks here (`fetched`),
/// are not among them.
std::vector<object_entry*> made_here_inside(const node_runtime& rt, const job& j, const object_table& fetched) {
  std::vector<object_entry*> out;
  std::unordered_set<const object_entry*> seen;
  std::vector<std::pair<object_entry*, std::size_t>> path;  // an entry, and its next ref to follow
  auto visit = [&](detail::ref_node* n) {
    auto* e = static_cast<object_entry*>(n);
    // (Every actor handle goes: the receiver makes it, or finds its own.)
    const bool its_drivers = (e->id.hi >> 32) != rt.epoch() && fetched.is_copy(e);
    if (!its_drivers && seen.insert(e).second) path.emplace_back(e, 0);
  };
  for (detail::ref_node* r : j.returns)
    for (detail::ref_node* c : static_cast<object_entry*>(r)->contained) {
      visit(c);
      while (!path.empty()) {
        auto& [e, next] = path.back();
        // (status first: `contained` is written before an entry is sealed, and fixed after)
        if (e->status() == state_ready && next < e->contained.size()) {
          visit(e->contained[next++]);
        } else {
          out.push_back(e);
          path.pop_back();
        }
      }
    }
  return out;
}

/// What `j` still waits for: a result not sealed, or an object made here that
/// one names and that is not made yet; null when it can be answered.
detail::ref_node* awaited(const node_runtime& rt, const job& j, const object_table& fetched) {
  for (detail::ref_node* r : j.returns)
    if (static_cast<object_entry*>(r)->status() == state_pending) return r;
  if (std::none_of(j.returns.begin(), j.returns.end(),
                   [](detail::ref_node* r) { return !static_cast<object_entry*>(r)->contained.empty(); }))
    return nullptr;
  for (object_entry* e : made_here_inside(rt, j, fetched)) {
    if (e->status() == state_pending) return e;
    // An actor this node started on the cluster: its constructor goes on the
    // node's other connection, and the head must know it before the result
    // hands it over. (Not pending: the scheduler wakes the waiters when it is
    // answered.)
    if (e->actor && e->actor->remote && !e->actor->borrowed && !e->actor->answered.load(std::memory_order_acquire))
      return e;
  }
  return nullptr;
}

bool all_awaited(node_runtime& rt, const std::vector<job>& running, const object_table& fetched) {
  for (const job& j : running) {
    detail::ref_node* next = awaited(rt, j, fetched);
    if (!next) return false;
    rt.watch_seal(next);
    // Looked at again after the mark: sealed before it, it woke nobody.
    if (awaited(rt, j, fetched) != next) return false;
  }
  return true;
}

/// The outcome of a job that awaits nothing; its values borrow the results'
/// bytes in the arena (pinned) until done_with. Objects made here that refs
/// in the results name go with them: the driver keeps them under their ids.
bridge::task_outcome finish(cluster_member& member, job& j, const object_table& fetched) {
  node_runtime& rt = member.runtime();
  bridge::task_outcome o;
  o.id = j.id;
  std::size_t bytes = 0;
  std::vector<std::string> kept;  // the keys of the handles it hands over (a count kept of each)
  auto add = [&](detail::ref_node* n, bool carried) {
    auto* e = static_cast<object_entry*>(n);
    if (carried && e->actor) {
      try {
        o.handles.push_back(member.lend_actor(e));
        if (o.handles.back().owned) {
          kept.push_back(o.handles.back().key);
          o.lender = member.id();
        }
      } catch (const std::exception&) {
        o = failed_outcome(j.id, ipc::error_from_exception(std::current_exception(), "", ::getpid()));
      }
    } else if (e->status() == state_failed) {
      if (!carried) {
        o = failed_outcome(j.id, e->error->describe());
        return;
      }
      bridge::remote_value v;
      v.id = id_text(e->id);
      v.error = to_remote(e->error->describe());
      o.values.push_back(std::move(v));
    } else if ((bytes += e->size) > bridge::max_long_body - (1u << 20)) {
      o = failed_outcome(j.id, usage_failure("manta: results of " + std::to_string(bytes) + " bytes (with the objects their "
                                         "refs name) are over the " + std::to_string(bridge::max_long_body >> 30) +
                                         " GiB a result may carry between nodes",
                                     ""));
    } else {
      detail::object_data d;
      try {
        // Sealed: at once, pinned. A spilled one is read back, which may wait
        // (a few seconds at most) for values workers here are writing.
        d = rt.fetch(n, detail::clock::now() + std::chrono::seconds(5));
      } catch (const std::exception&) {  // (the arena too full to read a spilled one back)
        o = failed_outcome(j.id, ipc::error_from_exception(std::current_exception(), "", ::getpid()));
        return;
      }
      j.pinned.push_back(n);
      bridge::remote_value v{d.type_tag, {}, std::string_view(reinterpret_cast<const char*>(d.data), d.size)};
      for (const detail::ref_node* c : e->contained) v.inside.push_back(id_text(c->id));
      if (carried) v.id = id_text(e->id);
      o.values.push_back(std::move(v));
    }
  };
  bool holds_refs = false;
  for (detail::ref_node* n : j.returns) {
    if (!o.ok) break;
    add(n, false);
    holds_refs = holds_refs || !static_cast<object_entry*>(n)->contained.empty();
  }
  if (holds_refs)
    for (object_entry* e : made_here_inside(rt, j, fetched)) {
      if (!o.ok) break;
      add(e, true);
    }
  if (!o.ok) {
    o.values.clear();
    o.handles.clear();
    for (const auto& key : kept) member.actor_returned(key);  // lent before the failure: nobody receives them
  }
  return o;
}

/// Gives back a finished job's results (once its outcome is sent).
void done_with(node_runtime& rt, job& j) {
  for (auto* n : j.pinned) rt.unpin(n);
  j.pinned.clear();
  for (auto* n : j.handles) detail::release(n);
  j.handles.clear();
  for (auto*& n : j.returns) detail::release(std::exchange(n, nullptr));
}

}  // namespace remote
}  // namespace manta::runtime

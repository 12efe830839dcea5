// runtime/node_runtime_cluster.cpp: node_runtime's part in a cluster of
// several nodes. Everything the runtime does for the bridge lives here, so
// that the seam between the single-node runtime and the cluster is one file:
// joining and serving, output sent to drivers, tasks sent to the head and
// their outcomes taken in, objects other nodes ask for, actors offered, lent
// and looked up across the cluster.
#include "runtime/node_runtime.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <unordered_set>

#include <manta/errors.hpp>

#include "observe/log.hpp"
#include "process/args_blob.hpp"
#include "runtime/landing.hpp"

namespace manta::runtime {

void node_runtime::join_cluster(const std::string& address, const std::string& token) {
  auto joined = std::make_unique<cluster_driver>(*this, address, token, resources(false));
  scheduler_lock lock(*this);  // dispatch reads cluster_ under it
  cluster_ = std::move(joined);
}

void node_runtime::serve_cluster(const std::string& address, const std::string& token) {
  serving_ = true;
  join_cluster(address, token);
  // What a driver's tasks print here reaches that driver's terminal too (its log keeps it here).
  output_->set_sink([this](pid_t pid, bool err, std::string_view lines) { forward_output(pid, err, lines); });
}

void node_runtime::forward_output(pid_t pid, bool err, std::string_view lines) {
  // The output thread: it takes no lock of the scheduler's (the lock order
  // puts the context lock first, and shutdown waits for this thread). It
  // queues; the I/O thread attributes the lines and sends them.
  // Bounded as a terminal is: at most 1 MiB a second leaves for the drivers;
  // past that, lines are counted, and the count is sent once the second is over.
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(output_mu_);
    const std::size_t before = waiting_output_.size();
    if (now - output_window_ >= std::chrono::seconds(1)) {
      if (output_dropped_ > 0)
        waiting_output_.push_back({pid, true,
                                   "(manta) " + std::to_string(output_dropped_) +
                                       " bytes of output were not sent (more than 1 MiB a second); the node's worker "
                                       "logs keep them\n",
                                   true});
      output_window_ = now;
      output_sent_ = 0;
      output_dropped_ = 0;
    }
    if (output_sent_ + lines.size() > (1u << 20)) {
      output_dropped_ += lines.size();
    } else {
      output_sent_ += lines.size();
      waiting_output_.push_back({pid, err, std::string(lines), false});
    }
    if (waiting_output_.size() == before) return;  // (dropped, and no note due yet)
  }
  output_waiting_.store(true, std::memory_order_release);
  wake_io();
}

void node_runtime::send_waiting_output() {
  std::vector<waiting_lines> batch;
  {
    std::lock_guard lock(output_mu_);
    batch.swap(waiting_output_);
    output_waiting_.store(false, std::memory_order_relaxed);
  }
  char node[9];  // this runtime's node_id()
  std::snprintf(node, sizeof node, "%08x", epoch_);
  scheduler_lock lock(*this);  // (cluster_ and origins_ are read under it)
  if (!cluster_ || cluster_->ended()) return;
  for (auto& w : batch) {
    const std::uint16_t origin = sched_->origin_of_process(w.pid);
    if (origin == 0 || origin >= origins_.size()) continue;  // no driver's task ran there: the node's log has it
    cluster_->send_control(bridge::frame_type::output,
                           bridge::encode_output({origins_[origin], node, w.note ? 0 : static_cast<std::int32_t>(w.pid),
                                                  w.err, std::move(w.lines)}));
  }
}

void node_runtime::print_remote_output(const bridge::remote_output& o) {
  const std::string prefix = o.pid ? "(pid=" + std::to_string(o.pid) + ", node=" + o.node + ") " : std::string();
  std::string text;
  text.reserve(o.lines.size() + 8 * prefix.size());
  std::size_t start = 0;
  while (start < o.lines.size()) {
    std::size_t nl = o.lines.find('\n', start);
    if (nl == std::string::npos) nl = o.lines.size() - 1;
    text += prefix;
    text.append(o.lines, start, nl - start + 1);
    start = nl + 1;
  }
  if (!text.empty() && text.back() != '\n') text += '\n';
  output_->print(o.err, std::move(text));
}

namespace {
/// The origin (an index into node_runtime::origins_) of what this thread
/// submits: the serving thread and a driver's host thread each set their own.
thread_local std::uint16_t submitting_origin = 0;
}  // namespace

void node_runtime::mark_origin(task_spec& t) {
  t.local_only = serving_;  // the head placed it here: it never spills back
  if (serving_) t.origin = submitting_origin;
}

void node_runtime::set_origin(const std::string& driver) {
  scheduler_lock lock(*this);
  auto it = std::find(origins_.begin(), origins_.end(), driver);
  if (it != origins_.end()) {
    submitting_origin = static_cast<std::uint16_t>(it - origins_.begin());
  } else if (origins_.size() < 65536) {  // (past that, tasks serve no known driver)
    origins_.push_back(driver);
    submitting_origin = static_cast<std::uint16_t>(origins_.size() - 1);
  } else {
    submitting_origin = 0;
  }
}

void node_runtime::host_launch(const launch& l, const std::string& dir) {
  if (launch_over_mpi(l)) {
    // Every other rank waits in the broadcast: it hears of a failure too.
    try {
      launch_head_ = std::make_unique<launch_head>(l, "");
    } catch (const std::exception& e) {
      try {
        send_launch_over_mpi(l, "", "", e.what());
      } catch (const std::exception&) {  // (the first error says more)
      }
      throw;
    }
    send_launch_over_mpi(l, launch_head_->address(), launch_head_->token(), "");
  } else {
    launch_head_ = std::make_unique<launch_head>(l, dir);
  }
  join_cluster(launch_head_->address(), launch_head_->token());
  const auto wanted = static_cast<std::size_t>(l.size - 1);
  const char* limit_env = std::getenv("MANTA_LAUNCH_TIMEOUT");
  const int limit = limit_env && *limit_env ? std::atoi(limit_env) : 60;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(limit);
  for (;;) {
    std::size_t alive = 0;
    for (const auto& n : cluster_->nodes()) alive += n.alive;
    if (alive >= wanted) return;
    if (std::string lost = cluster_->lost(); !lost.empty())
      throw usage_error("manta: the cluster of " + l.launcher + " ended before every rank joined: " + lost);
    if (std::chrono::steady_clock::now() > until)
      throw usage_error("manta: " + std::to_string(alive) + " of the " + std::to_string(wanted) + " other ranks of " +
                        l.launcher + " joined within " + std::to_string(limit) + " s");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::vector<manta::node_info> node_runtime::cluster_nodes() {
  if (!cluster_) return {};
  auto all = cluster_->nodes();
  if (serving_)  // a node serves every driver: their machines are the cluster's too
    for (auto& d : cluster_->drivers()) all.push_back(std::move(d));
  return all;
}

namespace {
/// The id in a key this driver made, if it is one.
std::optional<object_id> id_of_key(const std::string& key, const std::string& driver) {
  if (key.size() != driver.size() + 33 || key.compare(0, driver.size(), driver) != 0) return std::nullopt;
  return id_in_object_key(key);
}
}  // namespace

void node_runtime::remote_actor_killed(const std::string& key, const std::string& why) {
  process::context_use use;  // as in remote_finished
  scheduler_lock lock(*this);
  sched_->remote_actor_killed(key, why);
  sched_->flush_dirty();
}

void node_runtime::offer_named(actor_record& a) {
  if (!cluster_ || serving_ || a.remote || !a.remote_key.empty()) return;  // (a node's go through the head)
  // With the cluster gone nobody answers: it starts here at once, its name this
  // driver's alone. (Lost after this, cluster_lost starts the ones waiting.)
  if (!cluster_->lost().empty()) return;
  a.remote_key = cluster_->id() + "/d" + std::to_string(++remote_actors_);
  a.awaiting_name = true;  // (it starts once the head took the name: two drivers may pick one at once)
  cluster_->offer_actor(a.remote_key, a.class_tag, a.name);
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

void node_runtime::send_object(const bridge::object_note& ask) {
  process::context_use use;  // as in remote_finished
  scheduler_lock lock(*this);
  if (!cluster_) return;
  auto lost = [&](const std::string& why) {
    cluster_->send_control(bridge::frame_type::object_lost, bridge::encode_object_note({ask.object, ask.node, why}));
  };
  const std::optional<object_id> id = id_of_key(ask.object, cluster_->id());
  object_entry* e = id ? dir_->acquire(*id) : nullptr;  // counted: a user thread may drop the last ref meanwhile
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

void node_runtime::object_settled(object_entry* e) {
  auto it = asked_pending_.find(e);
  if (it == asked_pending_.end()) return;
  std::vector<bridge::object_note> asks = std::move(it->second);
  asked_pending_.erase(it);
  for (std::size_t i = 0; i < asks.size(); ++i) {
    if (i + 1 < asks.size()) detail::acquire(e);  // one count for each send
    send_object_now(asks[i], e);
  }
}

void node_runtime::send_object_now(const bridge::object_note& ask, object_entry* e) {
  auto lost = [&](const std::string& why, std::optional<ipc::error_info> error = {}, bool failed = false) {
    bridge::object_note note{ask.object, ask.node, why};
    if (error) note.error = to_remote(*error);
    note.failed = failed;
    cluster_->send_control(bridge::frame_type::object_lost, bridge::encode_object_note(note));
  };
  if (!cluster_) return detail::release(e);
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
    store_->pin(e);  // back from the spill file, if it is there (which may fail: the arena full)
  } catch (const std::exception& ex) {
    detail::release(e);
    return lost(std::string("it could not be read: ") + ex.what(),
                ipc::error_from_exception(std::current_exception(), {}, pid_));
  }
  held.push_back({out.args.size(), {reinterpret_cast<const char*>(e->data()), e->size}, e});  // (its count: the held one)
  cluster_->send(std::move(out), std::move(held));  // (gives them back itself if it cannot go)
}

namespace {
/// Whether actor handle `e` may go to another node: its actor lives on a node
/// of the cluster, started there already, or on this node (offered to the
/// cluster on the way: its calls from anywhere go through the head; a dead
/// one's fail with actor_died_error, as here).
bool travels(const object_entry& e) {
  return e.actor && (!e.actor->remote || !e.actor->remote_key.empty());
}

/// The entries refs inside `t`'s arguments name, and refs inside those, once each.
std::vector<object_entry*> contained_in(const task_spec& t) {
  std::vector<object_entry*> out, todo(t.contained.begin(), t.contained.end());
  for (const object_entry* d : t.deps)
    for (auto* c : d->contained) todo.push_back(static_cast<object_entry*>(c));
  std::unordered_set<const object_entry*> seen;
  while (!todo.empty()) {
    object_entry* e = todo.back();
    todo.pop_back();
    if (!seen.insert(e).second) continue;
    out.push_back(e);
    for (auto* c : e->contained) todo.push_back(static_cast<object_entry*>(c));
  }
  return out;
}
}  // namespace

std::optional<ipc::error_info> node_runtime::send_remote(task_spec& t) {
  auto refuse = [&](ipc::error_kind kind, const char* type, std::string message) {
    return ipc::error_info{kind, type, std::move(message), t.name(), {}, 0, 0, {}};
  };
  if (!cluster_)  // (shutting down: the link is gone)
    return refuse(ipc::error_kind::node_died, "manta::node_died_error",
                  "manta: task '" + t.name() + "' needs another node, and this runtime left its cluster");
  // Refs inside its arguments (and inside what they name, and so on) go by
  // key: the node fetches each before the task runs and keeps it under this
  // driver's id, which the refs' bytes carry.
  std::vector<object_entry*> refs_inside = contained_in(t);
  for (const object_entry* e : refs_inside) {
    if (!e->actor || travels(*e)) continue;
    return refuse(ipc::error_kind::usage, "manta::usage_error",
                  "manta: task '" + t.name() + "' needs another node, and its arguments hold an actor handle (" +
                      e->actor->label +
                      ") of an actor whose constructor has not gone to the cluster yet (wait for one of its calls "
                      "first)");
  }
  // Actors of this node whose handles go: offered to the cluster first (the
  // head learns of them before this task), under keys of their own.
  for (object_entry* e : refs_inside) {
    actor_record* a = e->actor;
    if (!a || a->remote || !a->remote_key.empty()) continue;
    a->remote_key = cluster_->id() + "/d" + std::to_string(++remote_actors_);
    cluster_->offer_actor(a->remote_key, a->class_tag, a->name);
    // A dead one's handle travels too (its calls fail): the head forgets it at once.
    if (a->st == actor_record::state::dead) cluster_->end_actor(a->remote_key, false);
  }
  bridge::remote_task out;
  out.id = t.key;
  out.function = t.fn->id;
  out.name = t.name();
  out.mode = static_cast<std::uint8_t>(t.mode);
  out.num_returns = t.num_returns;
  out.arg_count = t.arg_count;
  out.num_cpus = t.options().num_cpus;
  out.num_gpus = t.options().num_gpus;
  out.resources = t.options().resources;
  out.memory = t.options().memory;
  out.max_retries = t.options().max_retries;
  out.retry_exceptions = t.options().retry_exceptions;
  out.timeout_ns = t.options().timeout_ns;
  out.max_calls = t.options().max_calls;
  if (t.mode == detail::call_mode::construct) {
    // Its key in the cluster: unique there, as this driver's id is.
    t.actor->remote_key = cluster_->id() + "/" + std::to_string(++remote_actors_);
    out.max_restarts = t.options().max_restarts;
    out.max_task_retries = t.options().max_task_retries;
    out.max_concurrency = t.options().max_concurrency;
  }
  if (t.actor) out.actor = t.actor->remote_key;
  // A node's task serves the program of the driver whose task submitted it.
  out.origin = serving_ && t.origin != 0 ? origins_[t.origin] : cluster_->id();
  out.spilled = t.spilled;
  if (t.mode == detail::call_mode::construct && !t.options().name.empty()) {
    out.actor_name = t.options().name;  // get_actor finds it from any driver
    out.class_tag = t.fn->class_tag;
  }
  const std::string_view actor_key = t.actor ? std::string_view(t.actor->remote_key) : std::string_view();
  auto by_ref = [&](const object_entry& e) { return by_reference(e, t.mode, actor_key); };
  const std::uint64_t limit = bridge::max_long_body - (1u << 20);
  std::uint64_t total = t.args.size();
  for (auto* e : t.deps) {
    if (!by_ref(*e)) total += e->size;  // (one by reference travels on its own)
    if (e->size > std::numeric_limits<std::uint32_t>::max())
      return refuse(ipc::error_kind::usage, "manta::usage_error",
                    "manta: task '" + t.name() + "' has an argument of " + std::to_string(e->size) +
                        " bytes; one of at most 4 GiB may travel to another node");
  }
  if (total > limit)
    return refuse(ipc::error_kind::usage, "manta::usage_error",
                  "manta: task '" + t.name() + "' has " + std::to_string(total) + " bytes of arguments, over the " +
                      std::to_string(limit >> 30) + " GiB a task may carry to another node");
  // Every argument as a value: the node that runs it has none of this node's
  // objects. A stored one is sent from the arena by the cluster's sender (not
  // copied here, under the scheduler's lock), pinned and counted until it is.
  std::vector<cluster_driver::held_argument> held;
  held.reserve(t.deps.size());  // (no allocation between a pin and its record)
  try {
    process::for_each_arg(t.args, t.arg_count, [&](const process::blob_arg& a) {
      if (a.kind == process::arg_kind::value) {
        process::append_arg_header(out.args, a.kind, a.tag, a.size_or_index);
        out.args.append(a.bytes, a.size_or_index);
        return;
      }
      object_entry* e = t.deps[a.size_or_index];
      if (by_ref(*e)) {
        // By its key: the node fetches it once (on_nodes: it hears when it is freed).
        e->on_nodes = true;
        process::append_arg_header(out.args, process::arg_kind::ref, a.tag, static_cast<std::uint32_t>(out.objects.size()));
        out.objects.push_back(object_key(cluster_->id(), e->id));
        return;
      }
      process::append_arg_header(out.args, process::arg_kind::value, e->type_tag, static_cast<std::uint32_t>(e->size));
      store_->pin(e);  // back from the spill file, if it is there
      detail::acquire(e);
      held.push_back({out.args.size(), {reinterpret_cast<const char*>(e->data()), e->size}, e});
    });
  } catch (const std::exception&) {
    for (auto& h : held) sent(h.node);  // (the task holds counts too: never the last)
    return ipc::error_from_exception(std::current_exception(), t.name(), pid_);
  }
  for (object_entry* e : refs_inside) {
    if (e->actor) {  // made there under the same id: calls from there go through the head
      out.handles.push_back({id_text(e->id), e->actor->remote_key, e->actor->class_tag, e->actor->label});
      if (t.mode == detail::call_mode::construct) {  // the actor may call it for its whole life
        detail::acquire(e);
        t.actor->ctor_contained.push_back(e);
      }
      continue;
    }
    e->on_nodes = true;
    out.objects.push_back(object_key(cluster_->id(), e->id));
    if (t.mode == detail::call_mode::construct) {
      // The head keeps the constructor to start the actor again on another
      // node, which fetches these then: they live as long as the actor.
      detail::acquire(e);
      t.actor->ctor_contained.push_back(e);
    }
  }
  if (!cluster_->send(std::move(out), std::move(held)))  // (gives them back itself)
    return refuse(ipc::error_kind::node_died, "manta::node_died_error",
                  "manta: task '" + t.name() + "' needs another node, and the cluster is gone (" + cluster_->lost() +
                      ")");
  return std::nullopt;
}

namespace {
/// A plain function call (not an actor's): any node of the cluster can run it.
bool runs_anywhere(const task_spec& t) {
  return !t.actor && (t.mode == detail::call_mode::call || t.mode == detail::call_mode::map ||
                      t.mode == detail::call_mode::starmap);
}
/// What may go to another node when this one can never run it: a plain call,
/// or an actor's constructor (the actor then lives there).
bool may_go_elsewhere(const task_spec& t) { return runs_anywhere(t) || t.mode == detail::call_mode::construct; }
}  // namespace

void node_runtime::send_elsewhere(task_spec& t, const std::string& why) {
  if (!cluster_ || serving_ || !may_go_elsewhere(t)) throw usage_error(why);
  if (std::string lack = cluster_->lacking(t.options()); !lack.empty()) throw usage_error(why + "; and " + lack);
  t.remote = true;
}

void node_runtime::tell_cluster_freed(const object_id& id) {
  if (cluster_) cluster_->object_freed(object_key(cluster_->id(), id));
}

bool node_runtime::cluster_can_run(const task_spec& t) {
  return cluster_ && may_go_elsewhere(t) && cluster_->lacking(t.options()).empty();
}

void node_runtime::end_remote_actor(const std::string& key, bool kill) {
  if (cluster_) cluster_->end_actor(key, kill);
}

void node_runtime::cancel_remote(std::uint64_t key) {
  if (cluster_) cluster_->cancel(key);
}

bool node_runtime::remote_room(const task_spec& t, std::size_t in_flight) {
  // A node spills nothing: the head may place a spilled task back here (the
  // node counts in the table it has), where it would wait behind what the head sent.
  if (!cluster_ || serving_ || !runs_anywhere(t)) return false;
  if (!t.contained.empty() || std::any_of(t.deps.begin(), t.deps.end(), [](auto* e) { return !e->contained.empty(); }))
    for (const object_entry* e : contained_in(t))  // (it would wait there for one not made yet)
      if ((e->actor && !travels(*e)) || e->status() != state_ready) return false;
  return cluster_room(t.options(), in_flight);
}

bool node_runtime::cluster_room(const detail::task_options& o, std::size_t in_flight) {
  return cluster_ && !serving_ && cluster_->spare_cpus(o) > static_cast<double>(in_flight);
}

void node_runtime::prepare_outcome(bridge::task_outcome& o, remote_answer& out,
                                   std::vector<detail::ref_node*>& held) {
  out.id = o.id;
  auto& values = out.values;
  // (remote_result frees the extents placed here if the task is gone meanwhile)
  try {
    if (!o.ok) out.error = from_remote(o.error);
    if (o.ok) {
      // Objects the node made that the results' refs name come first, innermost first: kept
      // here under the node's ids (those refs' bytes carry them).
      auto ids = [](const std::vector<std::string>& texts) {
        std::vector<object_id> found;
        for (const auto& t : texts) {
          auto id = id_from_text(t);
          if (!id) throw usage_error("manta: a task's outcome from the cluster names a malformed object id");
          found.push_back(*id);
        }
        return found;
      };
      // Actor handles first: the values' refs name them.
      for (const auto& h : o.handles) {
        auto id = id_from_text(h.id);
        if (!id) throw usage_error("manta: a task's outcome from the cluster names a malformed actor handle id");
        held.push_back(borrow_actor(*id, h.key, h.class_tag, h.label, h.owned));
        if (h.owned) own_actor(held.back());  // (one this driver borrowed before is its own now)
      }
      for (const auto& v : o.values) {
        if (v.id.empty()) continue;
        auto id = id_from_text(v.id);
        if (!id) throw usage_error("manta: a task's outcome from the cluster carries a malformed object id");
        if (v.error) {
          held.push_back(import_failed(*id, from_remote(*v.error)));
          continue;
        }
        if (v.landed) {  // its bytes are in the arena already
          held.push_back(import_extent(*id, v.tag, landed_of(o)->hand_over(*v.landed), ids(v.inside)));
          continue;
        }
        detail::encoded_value carried;
        carried.type_tag = v.tag;
        carried.borrowed = v.data().data();
        carried.size = v.data().size();
        carried.contained = ids(v.inside);
        held.push_back(import_object(*id, carried));
      }
      for (const auto& v : o.values) {
        if (!v.id.empty()) continue;
        out.inside.push_back(ids(v.inside));
        for (const object_id& id : out.inside.back()) {
          object_entry* e = dir_->acquire(id);
          if (!e)
            throw usage_error("manta: a result from the cluster holds a ref to object " + id_text(id) +
                              ", which this driver does not hold");
          held.push_back(e);
        }
        if (v.landed) {  // its bytes are in the arena already
          const detail::extent room = landed_of(o)->hand_over(*v.landed);
          values.push_back({v.tag, room.size, room.offset, nullptr});
          continue;
        }
        values.push_back({v.tag, v.data().size(), ipc::no_offset, reinterpret_cast<const std::byte*>(v.data().data())});
      }
    }
    for (auto& v : values) {
      if (v.size <= detail::max_inline_bytes || v.offset != ipc::no_offset) continue;
      v.offset = store_->allocate(v.size);  // spills cold objects if it must
      std::memcpy(arena_->base() + v.offset, v.inline_data, v.size);
    }
  } catch (const std::exception&) {
    for (auto& v : values)
      if (v.offset != ipc::no_offset) store_->deallocate(std::exchange(v.offset, ipc::no_offset));
    out.error = ipc::error_from_exception(std::current_exception(), o.error.function, pid_);
    o.ok = false;
    values.clear();
  }
  out.ok = o.ok;
}

void node_runtime::remote_finished(std::vector<bridge::task_outcome>&& batch) {
  std::vector<remote_answer> answers(batch.size());
  process::context_use use;  // the lock order: the context lock before the scheduler's (releases take it)
  // Held until the results hold them: what refs in the results name.
  std::vector<detail::ref_node*> held;
  for (std::size_t i = 0; i < batch.size(); ++i) prepare_outcome(batch[i], answers[i], held);
  {
    // Outcomes that came together are taken under one lock, then one dispatch
    // sends the tasks they made room for.
    scheduler_lock lock(*this);
    for (const remote_answer& a : answers)
      sched_->remote_result(a.id, a.values, a.inside, a.ok ? nullptr : &a.error);
    sched_->dispatch();
    sched_->flush_dirty();  // what their results let go, or told waiting workers
  }
  for (auto* n : held) detail::release(n);  // (the results hold them now, if they were sealed)
}

void node_runtime::cluster_lost(const std::string& why) {
  MANTA_WARN << "the cluster is gone: " << why;
  process::context_use use;  // as in remote_finished
  {
    scheduler_lock lock(*this);
    sched_->fail_remote({ipc::error_kind::node_died, "manta::node_died_error", "the cluster is gone (" + why + ")",
                         {}, {}, 0, 0, {}});
    sched_->name_answered({}, {});  // named actors waiting for the head's word start here
    sched_->flush_dirty();
  }
  give_back_lent();  // nobody can return them now
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

std::string node_runtime::cluster_id() {
  scheduler_lock lock(*this);  // (cluster_ goes under it at shutdown)
  return cluster_ ? cluster_->id() : std::string();
}

void node_runtime::own_actor(detail::ref_node* handle) {
  auto* e = static_cast<object_entry*>(handle);
  scheduler_lock lock(*this);
  if (e->actor && e->actor->remote && e->actor->remote_key.size()) e->actor->borrowed = false;
}

bridge::returned_handle node_runtime::lend_actor(detail::ref_node* handle) {
  object_entry* e = static_cast<object_entry*>(handle);
  scheduler_lock lock(*this);
  actor_record& a = *e->actor;
  bridge::returned_handle h;
  h.id = id_text(e->id);
  h.class_tag = a.class_tag;
  h.label = a.label;
  if (!cluster_) throw node_died_error("manta: a result holds a handle of actor " + a.label + ", and the cluster is gone");
  if (a.remote && a.remote_key.empty())
    throw usage_error("manta: a result holds a handle of actor " + a.label +
                      ", whose constructor has not gone to the cluster yet (wait for one of its calls first)");
  if (!a.remote) {
    // Its calls from elsewhere come to this driver (host_loop). Offered as
    // for a handle in arguments; the outcome may reach the head first (on the
    // node's other connection), so it tells the head too.
    if (a.remote_key.empty()) {
      a.remote_key = cluster_->id() + "/d" + std::to_string(++remote_actors_);
      cluster_->offer_actor(a.remote_key, a.class_tag, a.name);
      if (a.st == actor_record::state::dead) cluster_->end_actor(a.remote_key, false);
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

void node_runtime::actor_returned(const std::string& key) {
  process::context_use use;  // as in remote_finished
  object_entry* e = nullptr;
  {
    scheduler_lock lock(*this);
    if (auto it = lent_.find(key); it != lent_.end()) {
      e = it->second.first;
      if (--it->second.second == 0) lent_.erase(it);
    }
  }
  if (e) detail::release(e);  // (may end it: its last handle)
}

void node_runtime::give_back_lent() {
  decltype(lent_) lent;
  {
    scheduler_lock lock(*this);
    lent.swap(lent_);
  }
  for (auto& [key, kept] : lent)
    for (std::size_t i = 0; i < kept.second; ++i) detail::release(kept.first);
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

bool node_runtime::find_actor_later(int slot, std::uint64_t generation, std::uint64_t request, const std::string& name,
                                    std::uint64_t class_tag, std::string& error) {
  if (!cluster_) return false;
  if (cluster_->find_actor_later({slot, generation, request, class_tag, name})) return true;
  const std::string lost = cluster_->lost();
  error = "manta: get_actor('" + name + "'): " + (lost.empty() ? "this runtime is leaving the cluster" : "the cluster is gone (" + lost + ")");
  return false;
}

void node_runtime::actor_found_for(const cluster_driver::actor_asker& asker, const bridge::actor_lookup& found) {
  std::string error = lookup_error(asker.name, asker.class_tag, found);
  process::context_use use;  // as in remote_finished
  scheduler_lock lock(*this);
  if (!cluster_) return;  // (shutting down)
  if (std::string lost = cluster_->lost(); !lost.empty() && error.empty() && !found.key.empty())
    error = "manta: get_actor('" + asker.name + "'): the cluster is gone (" + lost + ")";
  sched_->answer_actor_lookup(asker.slot, asker.generation, asker.request, error.empty() ? found.key : std::string(),
                              asker.class_tag, asker.name, error);
  sched_->flush_dirty();
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
  bridge::actor_lookup found = cluster_->find_actor(name);
  if (std::string error = lookup_error(name, class_tag, found); !error.empty()) throw usage_error(error);
  if (found.key.empty()) return nullptr;
  scheduler_lock lock(*this);
  if (std::string lost = cluster_->lost(); !lost.empty())
    throw usage_error("manta: get_actor('" + name + "'): the cluster is gone (" + lost + ")");
  return sched_->adopt_remote_actor(found.key, class_tag, name);
}

}  // namespace manta::runtime

// cluster/cluster_member.cpp: a runtime's membership of a cluster
// (cluster_member.hpp): the cluster_port, and what the link's threads ask of
// the runtime.
#include "cluster/cluster_member.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <thread>
#include <unordered_set>

#include <manta/errors.hpp>

#include "observe/log.hpp"
#include "process/args_blob.hpp"
#include "cluster/landing.hpp"
#include "runtime/node_runtime.hpp"

namespace manta::runtime {

/// Lines a node's processes printed, for the drivers whose tasks they ran:
/// bounded as a terminal is, at most 1 MiB a second; past that, lines are
/// counted, and the count is sent once the second is over.
struct cluster_member::output_queue {
  struct lines {
    pid_t pid;
    bool err;
    std::string text;
    bool note;  ///< the runtime's own note (how much was held back), not the process's lines
  };
  std::mutex mu;  // the four below
  std::vector<lines> waiting;
  std::chrono::steady_clock::time_point window{};
  std::size_t sent = 0, dropped = 0;

  /// The output thread: queues what `pid` printed. False if nothing was queued.
  bool queue(pid_t pid, bool err, std::string_view text) {
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard lock(mu);
    const std::size_t before = waiting.size();
    if (now - window >= std::chrono::seconds(1)) {
      if (dropped > 0)
        waiting.push_back({pid, true,
                           "(manta) " + std::to_string(dropped) +
                               " bytes of output were not sent (more than 1 MiB a second); the node's worker "
                               "logs keep them\n",
                           true});
      window = now;
      sent = 0;
      dropped = 0;
    }
    if (sent + text.size() > (1u << 20)) {
      dropped += text.size();
    } else {
      sent += text.size();
      waiting.push_back({pid, err, std::string(text), false});
    }
    return waiting.size() != before;
  }
  std::vector<lines> take() {
    std::lock_guard lock(mu);
    return std::exchange(waiting, {});
  }
};

cluster_member::cluster_member(node_runtime& rt, const std::string& address, const std::string& token, bool serving)
    : cluster_member(rt, serving) {
  join(address, token);
  if (!serving_) return;
  // What a driver's tasks print here reaches that driver's terminal too (its
  // log keeps it here). The sink holds the queue, not this object: the
  // output thread may be in a call of it while this membership ends.
  output_ = std::make_shared<output_queue>();
  rt_.output_->set_sink([queue = output_, &rt = rt_](pid_t pid, bool err, std::string_view lines) {
    if (queue->queue(pid, err, lines)) rt.cluster_io_due();
  });
}

void cluster_member::join(const std::string& address, const std::string& token) {
  link_ = std::make_unique<cluster_driver>(*this, address, token, rt_.resources(false));
}

cluster_member::~cluster_member() {
  if (output_) rt_.output_->set_sink({});
  if (link_) link_->leave();  // (its threads call in: they end before the rest of this object)
}

void cluster_member::leave() {
  link_->leave();
  launch_head_.reset();  // a launch's head: every node is told to stop
}

bool cluster_member::attached() const noexcept { return rt_.cluster_.get() == this; }

std::vector<manta::node_info> cluster_member::nodes() {
  auto all = link_->nodes();
  if (serving_)  // a node serves every driver: their machines are the cluster's too
    for (auto& d : link_->drivers()) all.push_back(std::move(d));
  return all;
}

void cluster_member::object_freed(const object_id& id) { link_->object_freed(object_key(link_->id(), id)); }

void cluster_member::end_remote_actor(const std::string& key, bool kill) { link_->end_actor(key, kill); }

void cluster_member::cancel_remote(std::uint64_t key) { link_->cancel(key); }

void cluster_member::run_io() { send_waiting_output(); }

void cluster_member::send_waiting_output() {
  if (!output_) return;
  std::vector<output_queue::lines> batch = output_->take();
  if (!attached() || link_->ended()) return;
  char node[9];  // this runtime's node_id()
  std::snprintf(node, sizeof node, "%08x", rt_.epoch_);
  for (auto& w : batch) {
    const std::uint16_t origin = rt_.sched_->origin_of_process(w.pid);
    if (origin == 0 || origin >= origins_.size()) continue;  // no driver's task ran there: the node's log has it
    link_->send_control(bridge::frame_type::output,
                        bridge::encode_output({origins_[origin], node, w.note ? 0 : static_cast<std::int32_t>(w.pid),
                                               w.err, std::move(w.text)}));
  }
}

void cluster_member::print_remote_output(const bridge::remote_output& o) {
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
  rt_.output_->print(o.err, std::move(text));
}

namespace {
/// The origin (an index into cluster_member::origins_) of what this thread
/// submits: the serving thread and a driver's host thread each set their own.
thread_local std::uint16_t submitting_origin = 0;
}  // namespace

void cluster_member::mark_origin(task_spec& t) {
  t.local_only = serving_;  // the head placed it here: it never spills back
  if (serving_) t.origin = submitting_origin;
}

void cluster_member::set_origin(const std::string& driver) {
  node_runtime::scheduler_lock lock(rt_);
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

std::unique_ptr<cluster_member> cluster_member::lead_launch(node_runtime& rt, const launch& l,
                                                            const std::string& dir) {
  std::unique_ptr<cluster_member> m(new cluster_member(rt, false));
  if (launch_over_mpi(l)) {
    // Every other rank waits in the broadcast: it hears of a failure too.
    try {
      m->launch_head_ = std::make_unique<launch_head>(l, "");
    } catch (const std::exception& e) {
      try {
        send_launch_over_mpi(l, "", "", e.what());
      } catch (const std::exception&) {  // (the first error says more)
      }
      throw;
    }
    send_launch_over_mpi(l, m->launch_head_->address(), m->launch_head_->token(), "");
  } else {
    m->launch_head_ = std::make_unique<launch_head>(l, dir);
  }
  m->join(m->launch_head_->address(), m->launch_head_->token());
  const auto wanted = static_cast<std::size_t>(l.size - 1);
  const char* limit_env = std::getenv("MANTA_LAUNCH_TIMEOUT");
  const int limit = limit_env && *limit_env ? std::atoi(limit_env) : 60;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(limit);
  for (;;) {
    std::size_t alive = 0;
    for (const auto& n : m->link_->nodes()) alive += n.alive;
    if (alive >= wanted) return m;
    if (std::string lost = m->link_->lost(); !lost.empty())
      throw usage_error("manta: the cluster of " + l.launcher + " ended before every rank joined: " + lost);
    if (std::chrono::steady_clock::now() > until)
      throw usage_error("manta: " + std::to_string(alive) + " of the " + std::to_string(wanted) + " other ranks of " +
                        l.launcher + " joined within " + std::to_string(limit) + " s");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
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

std::optional<ipc::error_info> cluster_member::send_remote(task_spec& t) {
  auto refuse = [&](ipc::error_kind kind, const char* type, std::string message) {
    return ipc::error_info{kind, type, std::move(message), t.name(), {}, 0, 0, {}};
  };
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
    a->remote_key = link_->id() + "/d" + std::to_string(++remote_actors_);
    link_->offer_actor(a->remote_key, a->class_tag, a->name);
    // A dead one's handle travels too (its calls fail): the head forgets it at once.
    if (a->st == actor_record::state::dead) link_->end_actor(a->remote_key, false);
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
    t.actor->remote_key = link_->id() + "/" + std::to_string(++remote_actors_);
    out.max_restarts = t.options().max_restarts;
    out.max_task_retries = t.options().max_task_retries;
    out.max_concurrency = t.options().max_concurrency;
  }
  if (t.actor) out.actor = t.actor->remote_key;
  // A node's task serves the program of the driver whose task submitted it.
  out.origin = serving_ && t.origin != 0 ? origins_[t.origin] : link_->id();
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
        out.objects.push_back(object_key(link_->id(), e->id));
        return;
      }
      process::append_arg_header(out.args, process::arg_kind::value, e->type_tag, static_cast<std::uint32_t>(e->size));
      rt_.store_->pin(e);  // back from the spill file, if it is there
      detail::acquire(e);
      held.push_back({out.args.size(), {reinterpret_cast<const char*>(e->data()), e->size}, e});
    });
  } catch (const std::exception&) {
    for (auto& h : held) rt_.sent(h.node);  // (the task holds counts too: never the last)
    return ipc::error_from_exception(std::current_exception(), t.name(), rt_.pid_);
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
    out.objects.push_back(object_key(link_->id(), e->id));
    if (t.mode == detail::call_mode::construct) {
      // The head keeps the constructor to start the actor again on another
      // node, which fetches these then: they live as long as the actor.
      detail::acquire(e);
      t.actor->ctor_contained.push_back(e);
    }
  }
  if (!link_->send(std::move(out), std::move(held)))  // (gives them back itself)
    return refuse(ipc::error_kind::node_died, "manta::node_died_error",
                  "manta: task '" + t.name() + "' needs another node, and the cluster is gone (" + link_->lost() +
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

bool cluster_member::can_run(const task_spec& t) {
  return may_go_elsewhere(t) && link_->lacking(t.options()).empty();
}

void cluster_member::send_elsewhere(task_spec& t, const std::string& why) {
  if (serving_ || !may_go_elsewhere(t)) throw usage_error(why);
  if (std::string lack = link_->lacking(t.options()); !lack.empty()) throw usage_error(why + "; and " + lack);
  t.remote = true;
}

bool cluster_member::remote_room(const task_spec& t, std::size_t in_flight) {
  // A node spills nothing: the head may place a spilled task back here (the
  // node counts in the table it has), where it would wait behind what the head sent.
  if (serving_ || !runs_anywhere(t)) return false;
  if (!t.contained.empty() || std::any_of(t.deps.begin(), t.deps.end(), [](auto* e) { return !e->contained.empty(); }))
    for (const object_entry* e : contained_in(t))  // (it would wait there for one not made yet)
      if ((e->actor && !travels(*e)) || e->status() != state_ready) return false;
  return cluster_room(t.options(), in_flight);
}

bool cluster_member::cluster_room(const detail::task_options& o, std::size_t in_flight) {
  return !serving_ && link_->spare_cpus(o) > static_cast<double>(in_flight);
}

void cluster_member::prepare_outcome(bridge::task_outcome& o, remote_answer& out,
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
        held.push_back(rt_.borrow_actor(*id, h.key, h.class_tag, h.label, h.owned));
        if (h.owned) rt_.own_actor(held.back());  // (one this driver borrowed before is its own now)
      }
      for (const auto& v : o.values) {
        if (v.id.empty()) continue;
        auto id = id_from_text(v.id);
        if (!id) throw usage_error("manta: a task's outcome from the cluster carries a malformed object id");
        if (v.error) {
          held.push_back(rt_.import_failed(*id, from_remote(*v.error)));
          continue;
        }
        if (v.landed) {  // its bytes are in the arena already
          held.push_back(rt_.import_extent(*id, v.tag, landed_of(o)->hand_over(*v.landed), ids(v.inside)));
          continue;
        }
        detail::encoded_value carried;
        carried.type_tag = v.tag;
        carried.borrowed = v.data().data();
        carried.size = v.data().size();
        carried.contained = ids(v.inside);
        held.push_back(rt_.import_object(*id, carried));
      }
      for (const auto& v : o.values) {
        if (!v.id.empty()) continue;
        out.inside.push_back(ids(v.inside));
        for (const object_id& id : out.inside.back()) {
          object_entry* e = rt_.dir_->acquire(id);
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
      v.offset = rt_.store_->allocate(v.size);  // spills cold objects if it must
      std::memcpy(rt_.arena_->base() + v.offset, v.inline_data, v.size);
    }
  } catch (const std::exception&) {
    for (auto& v : values)
      if (v.offset != ipc::no_offset) rt_.store_->deallocate(std::exchange(v.offset, ipc::no_offset));
    out.error = ipc::error_from_exception(std::current_exception(), o.error.function, rt_.pid_);
    o.ok = false;
    values.clear();
  }
  out.ok = o.ok;
}

void cluster_member::remote_finished(std::vector<bridge::task_outcome>&& batch) {
  std::vector<remote_answer> answers(batch.size());
  process::context_use use;  // the lock order: the context lock before the scheduler's (releases take it)
  // Held until the results hold them: what refs in the results name.
  std::vector<detail::ref_node*> held;
  for (std::size_t i = 0; i < batch.size(); ++i) prepare_outcome(batch[i], answers[i], held);
  {
    // Outcomes that came together are taken under one lock, then one dispatch
    // sends the tasks they made room for.
    node_runtime::scheduler_lock lock(rt_);
    for (const remote_answer& a : answers)
      rt_.sched_->remote_result(a.id, a.values, a.inside, a.ok ? nullptr : &a.error);
    rt_.sched_->dispatch();
    rt_.sched_->flush_dirty();  // what their results let go, or told waiting workers
  }
  for (auto* n : held) detail::release(n);  // (the results hold them now, if they were sealed)
}

void cluster_member::cluster_lost(const std::string& why) {
  MANTA_WARN << "the cluster is gone: " << why;
  process::context_use use;  // as in remote_finished
  {
    node_runtime::scheduler_lock lock(rt_);
    rt_.sched_->fail_remote({ipc::error_kind::node_died, "manta::node_died_error", "the cluster is gone (" + why + ")",
                         {}, {}, 0, 0, {}});
    rt_.sched_->name_answered({}, {});  // named actors waiting for the head's word start here
    rt_.sched_->flush_dirty();
  }
  give_back();  // nobody can return them now
}

void cluster_member::give_back() {
  decltype(lent_) lent;
  decltype(asked_pending_) asked;
  {
    node_runtime::scheduler_lock lock(rt_);
    lent.swap(lent_);
    if (!attached()) asked.swap(asked_pending_);  // (the runtime let go: nothing will settle them here)
  }
  for (auto& [key, kept] : lent)
    for (std::size_t i = 0; i < kept.second; ++i) detail::release(kept.first);
  for (auto& [entry, asks] : asked) detail::release(entry);  // (one count per entry)
}

}  // namespace manta::runtime

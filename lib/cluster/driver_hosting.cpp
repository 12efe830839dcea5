// cluster/driver_hosting.cpp: a driver's hosting of the calls other nodes
// make on the actors it offered (cluster_driver::host_loop), as a node serves
// the head's tasks (node_service.cpp), with the jobs both run (remote_jobs.hpp).
#include "cluster/cluster.hpp"

#include <unistd.h>

#include <algorithm>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <manta/errors.hpp>

#include "bridge/wire.hpp"
#include "cluster/remote_jobs.hpp"
#include "process/context.hpp"
#include "runtime/directory.hpp"
#include "runtime/node_runtime.hpp"

namespace manta::runtime {

using namespace remote;  // (the jobs both serving sides run: remote_jobs.hpp)

void cluster_driver::host_loop() {
  // As a node serves the head's tasks (serve_as_node), for calls alone: each
  // goes to its actor here as this driver's own calls do; its outcome goes back
  // once its results are sealed.
  std::vector<job> running;
  std::uint64_t taken_arrivals = 0;  ///< host_arrivals_ when the inbox was last taken
  const object_table none;  // (results name no copy: what a call's refs name goes back with its outcome)
  // Objects of other members a call names by key are fetched through the head
  // (this driver answers fetches the same way); the call waits parked, and so
  // do later calls of its actor, so that an actor's calls run in order.
  object_table copies;  ///< fetched objects, by key, until their owner frees them
  std::deque<bridge::remote_task> parked;
  std::set<std::string> requested, parked_actors;
  auto answer = [&](bridge::task_outcome o) {
    o.node = id();
    try {
      const std::string head = bridge::encode_outcome_head(o);
      std::vector<std::string_view> pieces{head};
      for (const auto& v : o.values) pieces.push_back(v.data());
      link_->send(bridge::frame_type::task_result, pieces);  // (a long one in parts)
      return;
    } catch (const bridge::wire_error& e) {
      o = failed_outcome(o.id, usage_failure(std::string("manta: the outcome of a call could not be sent back: ") + e.what(),
                                     o.error.function));
    } catch (const std::exception&) {  // the link broke: its end fails what is left
      return;
    }
    try {
      link_->send(bridge::frame_type::task_result, bridge::encode_outcome(o));
    } catch (const std::exception&) {
    }
  };
  // Starts call `t`, or returns the keys of the objects it names that are not
  // here yet (it then starts nothing).
  auto start_call = [&](const bridge::remote_task& t) -> std::vector<std::string> {
    if (t.mode != static_cast<std::uint8_t>(detail::call_mode::method) || !on_driver_key(t.actor) ||
        t.actor.rfind(id() + "/", 0) != 0)
      throw usage_error("manta: " + id() + " was sent '" + t.name + "', which is not a call of an actor it offered");
    object_table objects;  // the objects the call names by key, found here
    struct cleared {
      object_table& o;
      ~cleared() { o.clear(); }
    } on_exit{objects};
    std::vector<std::string> missing;
    for (const auto& key : t.objects) {
      // Keyed by the sender, named by the id this driver gave them (or kept them under).
      detail::ref_node* n = copies.find(key);
      if (n) {
        detail::acquire(n);
      } else if (const std::optional<object_id> oid = id_in_object_key(key)) {
        try {
          n = rt_.ref_from_id(*oid);  // counted
        } catch (const usage_error&) {  // another member's, or freed
        }
      }
      if (!n && key.rfind(id() + "/", 0) == 0)
        throw usage_error("manta: actor call '" + t.name + "' names object " + key + ", which " + id() +
                          " no longer holds (it was freed)");
      if (!n) missing.push_back(key);
      else if (objects.has(key)) detail::release(n);
      else objects.keep(key, n);
    }
    if (!missing.empty()) return missing;
    if (!t.origin.empty()) member_.set_origin(t.origin);  // (what the call starts serves its caller's program)
    detail::ref_node* actor = rt_.hosted_actor(t.actor);  // counted
    if (!actor)
      throw actor_died_error("manta: actor call '" + t.name + "' cannot run: its actor on " + id() + " has ended");
    actor_table actors{{t.actor, actor}};
    struct released {
      detail::ref_node* n;
      ~released() { detail::release(n); }
    } on_return{actor};
    running.push_back(start(rt_, t, actors, objects));
    return {};
  };
  auto fail_call = [&](const bridge::remote_task& t) {
    answer(failed_outcome(t.id, ipc::error_from_exception(std::current_exception(), t.name, ::getpid())));
  };
  // Starts `t` unless a call of its actor waits already; else, or if objects
  // it names must come first, parks it (asking for those).
  auto start_or_park = [&](bridge::remote_task&& t) {
    std::vector<std::string> missing;
    try {
      if (!parked_actors.count(t.actor)) missing = start_call(t);
    } catch (const std::exception&) {
      fail_call(t);
      return;
    }
    if (missing.empty() && !parked_actors.count(t.actor)) return;
    for (const auto& key : missing) {
      if (!requested.insert(key).second) continue;
      try {
        link_->send(bridge::frame_type::fetch_object, bridge::encode_object_note({key, {}, {}}));
      } catch (const std::exception&) {  // the link broke: its end fails what is left
      }
    }
    parked_actors.insert(t.actor);
    parked.push_back(std::move(t));
  };
  // Starts the parked calls whose objects all came, in order (a call whose
  // objects did not come holds its actor's later calls back).
  auto unpark = [&] {
    std::deque<bridge::remote_task> waiting = std::move(parked);
    parked.clear();
    parked_actors.clear();
    for (auto& t : waiting) {
      const bool ready = std::all_of(t.objects.begin(), t.objects.end(),
                                     [&](const std::string& k) { return !requested.count(k); });
      if (ready) start_or_park(std::move(t));
      else {
        parked_actors.insert(t.actor);
        parked.push_back(std::move(t));
      }
    }
  };
  // Object `key` cannot come: the parked calls that name it fail.
  auto object_lost = [&](const std::string& key, const std::string& why, const std::optional<ipc::error_info>& cause) {
    requested.erase(key);
    std::erase_if(parked, [&](const bridge::remote_task& t) {
      if (std::find(t.objects.begin(), t.objects.end(), key) == t.objects.end()) return false;
      answer(failed_outcome(t.id, unfetched("actor call", t.name, key, why, cause)));
      return true;
    });
  };
  bool runtime_gone = false;
  for (;;) {
    std::deque<bridge::remote_task> arrived;
    std::vector<std::uint64_t> cancels;
    std::vector<object_news> news;
    {
      std::unique_lock lock(mu_);
      if (running.empty() || runtime_gone)
        cv_.wait(lock, [&] {
          return stopping_ || !lost_.empty() ||
                 (!runtime_gone && (!host_inbox_.empty() || !host_cancels_.empty() || !host_news_.empty()));
        });
      if (stopping_ || !lost_.empty()) break;
      arrived.swap(host_inbox_);
      cancels.swap(host_cancels_);
      news.swap(host_news_);
      taken_arrivals = host_arrivals_.load();
    }
    process::context_use use;
    // Objects first (values that came, and news), then the calls that waited for them.
    const bool about_objects =
        !news.empty() || std::any_of(arrived.begin(), arrived.end(),
                                     [](const bridge::remote_task& t) { return t.mode == bridge::mode_object; });
    // Values before news: the head sends an object's news after its value, and
    // both may be taken in one round (news first would keep a freed copy).
    std::erase_if(arrived, [&](const bridge::remote_task& t) {
      if (t.mode != bridge::mode_object) return false;
      try {
        if (requested.count(t.object)) keep_object(rt_, copies, t);  // (one asked for: the head sends no other)
        requested.erase(t.object);
      } catch (const std::exception& e) {
        object_lost(t.object, std::string("this driver could not keep it: ") + e.what(),
                    ipc::error_from_exception(std::current_exception(), {}, ::getpid()));
      }
      answer({t.id, true, {}, {}, {}});  // (nobody waits for it: the head drops its route)
      return true;
    });
    for (auto& [type, note] : news) {
      if (type == bridge::frame_type::object_freed) copies.drop(note.object);
      else if (keep_failed(rt_, copies, note)) requested.erase(note.object);
      else object_lost(note.object, note.why, note.error ? std::optional(from_remote(*note.error)) : std::nullopt);
    }
    if (about_objects) unpark();
    for (std::uint64_t call : cancels) {
      // Not started: dropped; started: cancelled in this runtime (dropped from
      // its actor's queue, or left to finish if it runs), answered as any other.
      if (auto it = std::find_if(arrived.begin(), arrived.end(), [&](const auto& t) { return t.id == call; });
          it != arrived.end()) {
        answer(failed_outcome(call, {ipc::error_kind::cancelled, "manta::task_cancelled_error",
                                     "manta: task '" + it->name + "' was cancelled", it->name, {}, ::getpid(), 0, {}}));
        arrived.erase(it);
        continue;
      }
      if (auto it = std::find_if(parked.begin(), parked.end(), [&](const auto& t) { return t.id == call; });
          it != parked.end()) {
        answer(failed_outcome(call, {ipc::error_kind::cancelled, "manta::task_cancelled_error",
                                     "manta: task '" + it->name + "' was cancelled", it->name, {}, ::getpid(), 0, {}}));
        parked.erase(it);
        unpark();  // (the calls of its actor behind it may go)
        continue;
      }
      for (auto& j : running)
        if (j.id == call && !j.returns.empty() && j.returns[0]) {
          try {
            rt_.cancel_producer(j.returns[0]);
          } catch (const std::exception&) {  // (the runtime is stopping)
          }
        }
    }
    {
      node_runtime::submission_batch batch(rt_);  // (the round's calls go in under one lock)
      for (auto& t : arrived) start_or_park(std::move(t));
    }
    const std::uint32_t seen = rt_.seals_seen();  // (before looking: a seal after it ends the wait)
    try {
      if (!running.empty() && all_awaited(rt_, running, none)) {
        raised waiting(host_waits_);
        rt_.wait_sealed(seen, [&] { return host_arrivals_.load() != taken_arrivals; });
      }
      for (auto& j : running) {
        if (awaited(rt_, j, none)) continue;
        answer(finish(member_, j, none));  // sent from the arena
        done_with(rt_, j);
      }
    } catch (const std::exception&) {
      // The runtime is stopping (its waits end with usage_error): nothing more
      // runs here; the head fails these calls when this driver leaves.
      runtime_gone = true;
    }
    std::erase_if(running, [](const job& j) { return j.returns.empty() || !j.returns[0]; });
  }
  process::context_use use;
  for (auto& j : running) {
    for (auto* n : j.returns) detail::release(n);
    for (auto* n : j.handles) detail::release(n);
    for (auto* n : j.pinned) rt_.unpin(n);
  }
  copies.clear();  // (parked calls are failed by the head as this driver leaves)
}

}  // namespace manta::runtime

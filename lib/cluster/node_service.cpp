// cluster/node_service.cpp: a node's service (serve_as_node): the tasks the
// head places on this node, run in its runtime and answered.
#include "cluster/cluster.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>


#include <manta/errors.hpp>
#include <manta/registry.hpp>

#include "bridge/socket_io.hpp"
#include "bridge/token.hpp"
#include "bridge/wire.hpp"
#include "observe/log.hpp"
#include "observe/thread_name.hpp"
#include "process/args_blob.hpp"
#include "process/context.hpp"
#include "runtime/directory.hpp"
#include "cluster/landing.hpp"
#include "runtime/node_runtime.hpp"
#include "cluster/remote_jobs.hpp"

namespace manta::runtime {

using namespace remote;  // (the jobs both serving sides run: remote_jobs.hpp)

std::string serve_as_node(node_runtime& rt, const std::string& address, const std::string& token) {
  std::mutex mu;  // inbox, ended, done
  std::condition_variable cv;
  /// A task from the head, or the end of an actor (in the order they came).
  struct arrival {
    bridge::remote_task task;
    std::optional<bridge::actor_end> end;
    std::optional<std::uint64_t> cancel;  ///< the number of a task sent before
    std::optional<bridge::object_note> note;  ///< an object lost or freed (`note_type`)
    bridge::frame_type note_type{};
  };
  std::deque<arrival> inbox;  ///< from the head, not submitted yet
  std::string ended;
  bool done = false;
  // Rounds of frames put into the inbox, and whether the serving thread waits
  // in the runtime for results: frames that come meanwhile wake it, rather
  // than wait for a result or the end of its wait.
  std::atomic<std::uint64_t> arrivals{0};
  std::atomic<bool> waits_for_results{false};

  // A driver too: its workers' tasks may go to other nodes.
  auto joined = std::make_unique<cluster_member>(rt, address, token, /*serving=*/true);
  cluster_member& member = *joined;
  rt.attach_cluster(std::move(joined));
  bridge::node_info me{host_name(),         static_cast<int>(::getpid()), rt.resources(false),
                       detail::registered_names(), "node",                       manta::node_id()};
  bridge::node_link link(
      address, token, std::move(me),
      [&](const std::string& why) {
        std::lock_guard lock(mu);
        ended = why;
        done = true;
        cv.notify_all();
        arrivals.fetch_add(1);  // (a wait for results ends too)
        if (waits_for_results.load()) rt.wake_waiters();
      },
      [&](std::vector<bridge::frame>&& frames) {
        // Only decoded here: the link's thread must keep reading (submitting may
        // put large arguments into the arena, and spill). Frames that came
        // together go to the serving thread together: a call and its cancel
        // read at once are handled in one round (the call is dropped, not run).
        std::vector<arrival> together;
        for (bridge::frame& f : frames) {
          arrival a;
          if (f.type == bridge::frame_type::run_task) {
            a.task = bridge::decode_task(std::move(f.body));  // malformed: the link ends
            a.task.landed = std::move(f.landed);
          }
          else if (f.type == bridge::frame_type::actor_end) a.end = bridge::decode_actor_end(f.body);
          else if (f.type == bridge::frame_type::cancel_task) a.cancel = bridge::decode_cancel(f.body);
          else if (f.type == bridge::frame_type::object_lost || f.type == bridge::frame_type::object_freed)
            a.note = bridge::decode_object_note(f.body), a.note_type = f.type;
          else continue;
          together.push_back(std::move(a));
        }
        if (together.empty()) return;
        std::lock_guard lock(mu);
        const bool was_empty = inbox.empty();
        std::move(together.begin(), together.end(), std::back_inserter(inbox));
        arrivals.fetch_add(1);
        if (was_empty) cv.notify_all();  // (the serving thread sleeps only on an empty inbox)
        if (waits_for_results.load()) rt.wake_waiters();
      },
      lander_for(rt));  // a long task's large values go into the arena as they come, where they stay
  const std::string me_id = link.node_id();
  std::fprintf(stderr, "manta: joined the cluster at %s as %s\n", address.c_str(), me_id.c_str());

  // Small outcomes found together go back in one write (sent at the end of
  // each round of the loop below); a long one goes at once, in parts.
  std::string outbox;
  auto flush = [&] {
    if (outbox.empty()) return;
    try {
      link.send_encoded(outbox);
    } catch (const std::exception&) {  // the link broke (send ended it): its callback says why
    }
    outbox.clear();
  };
  auto answer = [&](bridge::task_outcome o) {
    o.node = me_id;
    try {
      // The header, then each value as it is (a long outcome goes in parts, uncopied).
      const std::string head = bridge::encode_outcome_head(o);
      std::vector<std::string_view> pieces{head};
      for (const auto& v : o.values) pieces.push_back(v.data());
      if (bridge::total_size(pieces) <= (64u << 10)) {
        bridge::append_frame(outbox, bridge::frame_type::task_result, pieces);
        if (outbox.size() >= (1u << 20)) flush();
        return;
      }
      flush();
      link.send(bridge::frame_type::task_result, pieces);
      return;
    } catch (const bridge::wire_error& e) {
      // Too large to travel (its header: an error's text): the driver hears why, not nothing.
      o = failed_outcome(o.id, usage_failure(std::string("manta: the outcome of a task could not be sent back: ") + e.what(),
                                     o.error.function));
    } catch (const std::exception&) {  // the link broke (send ended it): its callback says why
      return;
    }
    flush();
    try {
      link.send(bridge::frame_type::task_result, bridge::encode_outcome(o));
    } catch (const std::exception&) {
    }
  };

  std::vector<job> running;
  std::uint64_t taken_arrivals = 0;  ///< `arrivals` when the inbox was last taken (under mu)
  std::string why;
  // Tasks go into the runtime 32 per worker at a time; the rest wait here. A
  // runtime's ready queue thousands long makes every dispatch scan it (tasks
  // asking for resources may let later ones pass).
  const std::size_t in_runtime = std::max<std::size_t>(64, 32 * rt.worker_count());
  std::deque<arrival> waiting;
  actor_table actors;
  // Tasks waiting for objects to arrive from their drivers (in arrival order),
  // the objects asked for, and the actors with a call among them (their later
  // calls wait behind it, so calls still run in order).
  object_table objects;
  std::map<std::string, std::string> unstarted;  ///< actors whose constructor failed here: why (until their end)
  std::string origin;  ///< the driver of the task submitted last
  std::map<std::string, std::vector<detail::ref_node*>> ctor_handles;  ///< counted: handles actors here were built with
  std::deque<arrival> parked;  ///< tasks, and ends of actors with a parked task
  std::set<std::string> requested, parked_actors;
  auto actor_of = [](const arrival& a) -> const std::string& { return a.end ? a.end->actor : a.task.actor; };
  bool lost = false;
  // A task that failed because this node's processes are gone is not answered:
  // the node leaves, and the head runs it elsewhere.
  // (Only the runtime's own loss: a task of this node that failed because a
  // nested task was lost on another node failed in its worker, whose pid it names.)
  auto runtime_lost = [&](const bridge::task_outcome& o) {
    return !o.ok && o.error.kind == static_cast<std::uint8_t>(ipc::error_kind::node_died) &&
           (rt.lost() || o.error.pid == 0);
  };
  auto submit_one = [&](const bridge::remote_task& t) {
    if (auto it = unstarted.find(t.actor); it != unstarted.end() && !actors.count(t.actor)) {
      answer(failed_outcome(t.id, {ipc::error_kind::actor_died, "manta::actor_died_error",
                                   "manta: the actor of call '" + t.name + "' could not be started on " + me_id + ": " +
                                       it->second,
                                   t.name, {}, ::getpid(), 0, {}}));
      return;
    }
    try {
      if (t.origin != origin) member.set_origin(origin = t.origin);  // (whose program its nested tasks serve)
      job j = start(rt, t, actors, objects);
      if (j.returns.empty()) {
        answer({t.id, true, {}, {}, {}});  // an actor started: its calls may come
        // The handles its constructor was given, for as long as it lives here.
        auto& kept = ctor_handles[t.actor];
        kept.insert(kept.end(), j.handles.begin(), j.handles.end());
      } else {
        running.push_back(std::move(j));
      }
    } catch (const std::exception&) {
      auto o = failed_outcome(t.id, ipc::error_from_exception(std::current_exception(), t.name, ::getpid()));
      if (t.mode == static_cast<std::uint8_t>(detail::call_mode::construct) && !t.actor.empty())
        unstarted[t.actor] = o.error.message;
      if (runtime_lost(o)) lost = true;
      else answer(std::move(o));
    }
  };
  auto park = [&](arrival&& a) {
    for (const auto& key : a.task.objects) {
      if (objects.has(key) || !requested.insert(key).second) continue;
      try {
        link.send(bridge::frame_type::fetch_object, bridge::encode_object_note({key, {}, {}}));
      } catch (const std::exception&) {  // the link broke: its callback says why
      }
    }
    if (!actor_of(a).empty()) parked_actors.insert(actor_of(a));
    parked.push_back(std::move(a));
  };
  auto end_one = [&](const bridge::actor_end& e) {
    end_actor(rt, actors, e);
    unstarted.erase(e.actor);
    if (auto it = ctor_handles.find(e.actor); it != ctor_handles.end()) {
      for (auto* n : it->second) detail::release(n);
      ctor_handles.erase(it);
    }
  };
  // Takes out the parked tasks whose objects are all here, in order: plain
  // ones go back to the front of `waiting` (under the cap), actors' work now.
  auto unpark = [&] {
    std::deque<arrival> still;
    std::vector<arrival> go;
    std::set<std::string> blocked;
    for (auto& a : parked) {
      const std::string& actor = actor_of(a);
      if ((!a.end && !has_objects(a.task, objects)) || (!actor.empty() && blocked.count(actor))) {
        if (!actor.empty()) blocked.insert(actor);
        still.push_back(std::move(a));
      } else {
        go.push_back(std::move(a));
      }
    }
    parked = std::move(still);
    parked_actors = std::move(blocked);
    for (auto it = go.rbegin(); it != go.rend(); ++it)
      if (actor_of(*it).empty()) waiting.push_front(std::move(*it));
    for (auto& a : go) {
      if (a.end) end_one(*a.end);
      else if (!a.task.actor.empty()) submit_one(a.task);
    }
  };
  auto fail_parked = [&](const arrival& a, ipc::error_kind kind, const char* type, const std::string& message) {
    if (!a.end) answer(failed_outcome(a.task.id, {kind, type, message, a.task.name, {}, ::getpid(), 0, {}}));
  };
  // An object cannot come: the parked tasks that need it fail.
  auto object_lost = [&](const std::string& key, const std::string& why, const std::optional<ipc::error_info>& cause) {
    requested.erase(key);
    std::erase_if(parked, [&](const arrival& a) {
      if (a.end || std::find(a.task.objects.begin(), a.task.objects.end(), key) == a.task.objects.end()) return false;
      if (!a.end) answer(failed_outcome(a.task.id, unfetched("task", a.task.name, key, why, cause)));
      return true;
    });
  };
  for (;;) {
    std::deque<arrival> arrived;
    std::vector<std::uint64_t> cancels;
    std::vector<arrival> about_objects;  // values and notes: handled at once, not behind the tasks that wait
    std::deque<arrival> actor_work;      // constructors, calls, ends: never capped, in order
    {
      std::unique_lock lock(mu);
      // (Idle, it still looks twice a second at its other connection, below.)
      cv.wait_for(lock, std::chrono::milliseconds(500),
                  [&] { return done || !inbox.empty() || !running.empty() || !waiting.empty(); });
      if (!done && member.link_ended()) {
        // Its connection as a driver ended (the head dropped it, or is gone):
        // its tasks could no longer reach the cluster. It leaves, so the head
        // runs its work elsewhere; the node link's own news, if it comes at
        // once, says better why.
        cv.wait_for(lock, std::chrono::seconds(1), [&] { return done; });
        if (!done) {
          const std::string gone = member.link_lost();
          why = gone.find("stopped") != std::string::npos
                    ? std::string()
                    : "its other connection to the head (as a driver, for its tasks' own work) ended: " + gone;
          break;
        }
      }
      if (done) {
        why = ended.find("stopped") != std::string::npos ? std::string() : ended;
        break;
      }
      for (auto& a : inbox) {
        if (a.cancel) cancels.push_back(*a.cancel);  // at once: not behind the tasks that wait
        else if (a.note || (!a.end && a.task.mode == bridge::mode_object)) about_objects.push_back(std::move(a));
        else if (a.end || !a.task.actor.empty()) actor_work.push_back(std::move(a));
        else waiting.push_back(std::move(a));
      }
      inbox.clear();
      taken_arrivals = arrivals.load();
    }
    lost = false;
    if (!about_objects.empty()) {
      process::context_use use;
      for (auto& a : about_objects) {
        if (a.note && a.note_type == bridge::frame_type::object_freed) {
          objects.drop(a.note->object);
        } else if (a.note) {
          if (keep_failed(rt, objects, *a.note)) requested.erase(a.note->object);
          else
            object_lost(a.note->object, a.note->why,
                        a.note->error ? std::optional(from_remote(*a.note->error)) : std::nullopt);
        } else {
          try {
            keep_object(rt, objects, a.task);
            requested.erase(a.task.object);
          } catch (const std::exception& e) {
            object_lost(a.task.object, std::string("this node could not keep it: ") + e.what(),
                        ipc::error_from_exception(std::current_exception(), {}, ::getpid()));
          }
          answer({a.task.id, true, {}, {}, {}});  // (nobody waits for it: the head drops its route)
        }
      }
      unpark();
    }
    for (std::uint64_t id : cancels) {
      // Not submitted yet: dropped; submitted: cancelled in this runtime (a
      // queued actor call is dropped, a running task's worker killed); its
      // outcome goes back as any other. Done already: nothing to do.
      auto cancelled = [&](const std::string& name) {
        answer(failed_outcome(id, {ipc::error_kind::cancelled, "manta::task_cancelled_error",
                                   "manta: task '" + name + "' was cancelled", name, {}, ::getpid(), 0, {}}));
      };
      auto is_it = [&](const arrival& a) { return !a.end && a.task.id == id; };
      if (auto queued = std::find_if(waiting.begin(), waiting.end(), is_it); queued != waiting.end()) {
        cancelled(queued->task.name);
        waiting.erase(queued);
        continue;
      }
      if (auto call = std::find_if(actor_work.begin(), actor_work.end(), is_it); call != actor_work.end()) {
        cancelled(call->task.name);
        actor_work.erase(call);
        continue;
      }
      auto waits = std::find_if(parked.begin(), parked.end(), is_it);
      if (waits != parked.end()) {
        cancelled(waits->task.name);
        parked.erase(waits);
        unpark();  // (the calls of its actor behind it may go)
        continue;
      }
      auto it = std::find_if(running.begin(), running.end(), [&](const job& j) { return j.id == id; });
      if (it != running.end() && !it->returns.empty() && it->returns[0]) {
        process::context_use use;
        rt.cancel_producer(it->returns[0]);
      }
    }
    arrived = std::move(actor_work);
    // Only plain tasks count: calls queued on a slow actor hold up nobody else.
    std::size_t plain = std::count_if(running.begin(), running.end(), [](const job& j) { return !j.call; });
    for (; !waiting.empty() && plain < in_runtime; ++plain) {
      arrived.push_back(std::move(waiting.front()));
      waiting.pop_front();
    }
    if (rt.lost()) {
      // Its processes are gone: the head must send its tasks elsewhere, which it
      // does once this node leaves.
      why = "this node's runtime was lost: " + rt.lost_why();
      break;
    }
    process::context_use use;
    // Tasks of one round go into the runtime under one lock; an actor's
    // end first lets what came before it in.
    std::optional<node_runtime::submission_batch> batch;
    for (auto& a : arrived) {
      if (a.end) batch.reset();
      if (a.end && parked_actors.count(a.end->actor) && a.end->kill) {
        // Killed while its constructor or calls wait for objects: they never run.
        std::erase_if(parked, [&](const arrival& p) {
          if (actor_of(p) != a.end->actor) return false;
          fail_parked(p, ipc::error_kind::actor_died, "manta::actor_died_error",
                      "manta: actor call '" + p.task.name + "' did not run: its actor was killed");
          return true;
        });
        parked_actors.erase(a.end->actor);
        end_one(*a.end);
      } else if (a.end && !parked_actors.count(a.end->actor)) {
        end_one(*a.end);
      } else if (!a.end && has_objects(a.task, objects) && !(!a.task.actor.empty() && parked_actors.count(a.task.actor))) {
        if (!batch) batch.emplace(rt);
        submit_one(a.task);
      } else {
        park(std::move(a));  // (an end: behind its actor's parked calls)
      }
    }
    batch.reset();
    auto sealed = [&](const job& j) { return !awaited(rt, j, objects); };
    const std::uint32_t seen = rt.seals_seen();  // (before looking: a seal after it ends the wait)
    if (!running.empty() && !lost && arrived.empty() && all_awaited(rt, running, objects)) {
      // Nothing done yet: sleep until something is, or tasks arrive (they wake
      // it), or a connection ends (so does that).
      flush();  // (answers made this round, cancels and objects kept, go before the sleep)
      raised waiting(waits_for_results);
      rt.wait_sealed(seen, [&] { return arrivals.load() != taken_arrivals || member.link_ended(); });
    }
    for (auto& j : running) {
      if (lost || !sealed(j)) continue;
      bridge::task_outcome o = finish(member, j, objects);
      if (runtime_lost(o)) lost = true;
      else answer(std::move(o));  // sent from the arena
      done_with(rt, j);
    }
    std::erase_if(running, [](const job& j) { return j.returns.empty() || !j.returns[0]; });
    flush();  // the outcomes of this round, in one write
    if (lost) {
      why = "this node's runtime was lost" + (rt.lost() ? ": " + rt.lost_why() : std::string());
      break;
    }
  }
  process::context_use use;
  for (auto& j : running) {
    for (auto* n : j.returns) detail::release(n);
    for (auto* n : j.handles) detail::release(n);
  }
  for (auto& [key, held] : ctor_handles)
    for (auto* n : held) detail::release(n);
  for (auto& [key, handle] : actors) detail::release(handle);
  objects.clear();
  return why;
}

}  // namespace manta::runtime

// bridge/head_actors.cpp: the head state's actor table: where each actor lives, its
// restarts when its node is lost, its name in the cluster, and the handles of
// it lent in results.
#include "bridge/head_state.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "bridge/head_rules.hpp"

namespace manta::bridge {

using namespace head_rules;

void head_state::lose_actors(const member& c, const std::string& why, std::vector<std::uint64_t> resend,
                             std::vector<outgoing>& out) {
  for (auto& [key, a] : actors_) {
    if (a.node != c.node_id || !a.gone.empty()) continue;
    auto driver = a.driver.lock();
    std::string elsewhere;
    member_ptr next;
    const bool can_restart = driver && !driver->done && a.restarts_left > 0 && !a.ctor.frames.empty();
    if (can_restart) next = place(a.ctor, elsewhere);
    const std::string lost_with = "was lost with " + c.node_id + " (" + why + ")";
    if (next) {
      restart_on(key, a, next, lost_with, out);
      continue;
    }
    if (can_restart && settings_.node_wait.count() > 0) {
      // No alive node has what it asks: it waits for one to join (the lost
      // node started again, or another), as Ray's restarting actors do.
      a.restarting = true;
      a.restart_by = now_ + settings_.node_wait;
      a.lost_with = lost_with;
      a.node.clear();
      a.node_connection.reset();
      restarting_.insert(key);
      std::fprintf(stderr, "manta head: actor %s (%s) %s; it waits up to %lld ms for a node that has what it asks\n",
                   a.ctor.name.c_str(), key.c_str(), lost_with.c_str(),
                   static_cast<long long>(settings_.node_wait.count()));
      continue;
    }
    actor_gone(key, a,
               "was lost with " + c.node_id + " (" + why + ")" +
                   (a.restarts_left <= 0      ? ", past its max_restarts"
                    : a.ctor.frames.empty()   ? ", and its constructor's arguments were more than the head keeps"
                    : !driver || driver->done ? ""
                                              : ", and " + elsewhere),
               out);
    if (a.ctor.driver_id != 0 && driver && !driver->done)  // its constructor was never answered
      out.push_back({driver, frame_type::task_result,
                     std::make_shared<const std::string>(encode_outcome(
                         failed(std::exchange(a.ctor.driver_id, 0), kind_node_died, "manta::node_died_error",
                                "manta: actor '" + a.ctor.name + "' " + a.gone, a.ctor.name, c.node_id)))});
  }
  // Calls that were running go behind their actor's new start, in the order
  // they were sent (routed_ is in the head's order); the others fail.
  for (std::uint64_t id : resend) {
    auto it = routed_.find(id);
    if (it == routed_.end()) continue;
    routed_task& r = it->second;
    auto driver = r.driver.lock();
    auto a = actors_.find(r.actor);
    if (driver && !driver->done && a != actors_.end() && a->second.restarting) {
      // Held until its actor starts again, behind its constructor.
      --r.retries_left;
      r.node.clear();
      r.node_connection.reset();
      a->second.held_calls.emplace_back(id, false);
      continue;
    }
    member_ptr node;
    if (a != actors_.end() && a->second.gone.empty() && a->second.node != c.node_id)
      node = a->second.node_connection.lock();
    if (driver && !driver->done && node && !node->done) {
      --r.retries_left;
      forward(r, node, out);
      continue;
    }
    if (driver && !driver->done)
      out.push_back(
          {driver, frame_type::task_result,
           std::make_shared<const std::string>(encode_outcome(
               failed(r.driver_id, kind_actor_died, "manta::actor_died_error",
                      "manta: actor call '" + r.name + "' was lost with " + c.node_id + " (" + why + ")" +
                          (a == actors_.end() || !a->second.gone.empty() ? ", and its actor did not start again" : ""),
                      r.name, c.node_id)))});
    drop_route(it);
  }
}

void head_state::restart_on(const std::string& key, placed_actor& a, const member_ptr& node,
                            const std::string& lost_with, std::vector<outgoing>& out) {
  // Its constructor runs again there, from the frame the head kept (and
  // numbered as before); its driver hears only if it never heard of the first.
  const bool first = std::exchange(a.first_start, false);
  if (!first) --a.restarts_left;
  routed_task r = a.ctor;
  r.kept = 0;  // (the actor counts the frame)
  routed_task& sent = routed_.insert_or_assign(a.ctor_id, std::move(r)).first->second;
  forward(sent, node, out);
  sent.frames.clear();
  sent.keep = false;
  // (a.ctor.driver_id stays until the start is answered: if this node is
  // lost too before it answers, the next start, or the failure, answers.)
  a.node = node->node_id;
  host(a);
  a.node_connection = node;
  a.restarting = false;
  std::fprintf(stderr, "manta head: actor %s (%s) %s; started %son %s\n", a.ctor.name.c_str(), key.c_str(),
               lost_with.c_str(), first ? "" : "again ", a.node.c_str());
  // The calls held while it waited follow its constructor, in order.
  for (auto [id, fresh] : std::exchange(a.held_calls, {})) {
    auto it = routed_.find(id);
    if (it == routed_.end()) continue;  // its driver left, or cancelled it
    const std::size_t first = out.size();
    forward(it->second, node, out);
    if (fresh) actor_forwarded(id, it->second, it->second.frames.empty() ? nullptr : it->second.frames.front().second);
    settle_kept(out, first, it->second);
  }
}

bool head_state::hold_constructor(const remote_task& t, const routed_task& r, std::string&& body,
                                  std::vector<outgoing>& out) {
  auto it = actors_.find(t.actor);
  if (it == actors_.end() || !it->second.restarting || !it->second.first_start) return false;
  placed_actor& a = it->second;
  const std::uint64_t id = ++next_task_;
  set_id(body, id);
  a.ctor_id = id;
  a.ctor.driver_id = r.driver_id;
  if (kept_bytes_ + body.size() > settings_.max_kept) {
    actor_gone(t.actor, a, a.lost_with + ", and the head keeps no more to start it later", out);
    fail_held(a, a.gone, out);  // (its driver hears)
    restarting_.erase(t.actor);
    return true;
  }
  a.ctor.kept = body.size();
  kept_bytes_ += a.ctor.kept;
  a.ctor.frames = {{frame_type::run_task, std::make_shared<const std::string>(std::move(body))}};
  return true;
}

bool head_state::hold_call(routed_task&& r, std::string&& body) {
  auto a = actors_.find(r.actor);
  if (a == actors_.end() || !a->second.restarting) return false;
  const std::uint64_t id = ++next_task_;
  set_id(body, id);
  routed_task& kept = routed_.emplace(id, std::move(r)).first->second;
  keep_frame(kept, frame_type::run_task, std::make_shared<const std::string>(std::move(body)));
  if (!kept.keep) {  // past what the head keeps
    drop_route(routed_.find(id));
    return false;
  }
  a->second.held_calls.emplace_back(id, true);
  return true;
}

void head_state::fail_held(placed_actor& a, const std::string& why, std::vector<outgoing>& out) {
  // A constructor lost with its node before it answered waits for the restart:
  // with none coming, it is answered here.
  if (auto driver = a.driver.lock(); a.restarting && a.ctor.driver_id != 0 && driver && !driver->done)
    out.push_back({driver, frame_type::task_result,
                   std::make_shared<const std::string>(encode_outcome(
                       failed(std::exchange(a.ctor.driver_id, 0), kind_node_died, "manta::node_died_error",
                              "manta: actor '" + a.ctor.name + "' " + why, a.ctor.name)))});
  a.restarting = false;
  for (auto [id, fresh] : std::exchange(a.held_calls, {})) {
    auto it = routed_.find(id);
    if (it == routed_.end()) continue;
    if (auto driver = it->second.driver.lock(); driver && !driver->done)
      out.push_back(
          {driver, frame_type::task_result,
           std::make_shared<const std::string>(encode_outcome(
               failed(it->second.driver_id, kind_actor_died, "manta::actor_died_error",
                      "manta: actor call '" + it->second.name + "' did not run: its actor " + why, it->second.name)))});
    drop_route(it);
  }
}

head_state::member_ptr head_state::actor_target(const member_ptr& driver, const remote_task& t, routed_task& r,
                                                std::string& why) {
  r.actor = t.actor;
  r.method = t.mode != mode_construct;
  r.retries_left = 0;  // its actor starts again instead (lose_actors)
  auto it = actors_.find(t.actor);
  if (!r.method) {  // (any driver may call an actor it found by name; only its own driver starts it)
    if (t.actor.rfind(driver->node_id + "/", 0) != 0) {
      why = "its actor key '" + t.actor + "' is not one of " + driver->node_id + "'s";
      return nullptr;
    }
    if (it != actors_.end()) {
      why = "an actor '" + t.actor + "' was started already";
      return nullptr;
    }
    // Refused, it stays in the table as gone: the calls sent behind it learn why.
    auto refused = [&] {
      placed_actor& a = actors_[t.actor];
      a.driver = driver;
      a.gone = "could not start: " + why;
      return nullptr;
    };
    if (auto named = actor_names_.find(t.actor_name); !t.actor_name.empty() && named != actor_names_.end()) {
      why = "the name '" + t.actor_name + "' is taken in the cluster (by " + named->second + ")";
      return refused();
    }
    member_ptr node = place(r, why);
    // No alive node has what it asks, but one that had it was lost: it waits
    // for one to join (route_task keeps its constructor), as after a loss.
    const bool waits = !node && why == lost_everywhere && settings_.node_wait.count() > 0;
    if (!node && !waits) return refused();
    if (!t.actor_name.empty()) actor_names_[t.actor_name] = t.actor;
    placed_actor& a = actors_[t.actor];
    a.name = t.actor_name;
    a.class_tag = t.class_tag;
    a.driver = driver;
    a.ctor = r;
    a.restarts_left = t.max_restarts < 0 ? std::numeric_limits<int>::max() : t.max_restarts;
    a.task_retries = t.max_task_retries;
    a.origin = t.origin.empty() ? driver->node_id : t.origin;
    if (waits) {
      a.restarting = a.first_start = true;
      a.restart_by = now_ + settings_.node_wait;
      a.lost_with = unplaced_yet;
      restarting_.insert(t.actor);
      why.clear();
      return nullptr;
    }
    a.node = node->node_id;
    a.node_connection = node;
    host(a);
    return node;
  }
  if (it == actors_.end()) {
    why = "its actor is not in the cluster (it was ended)";
    return nullptr;
  }
  // (Any driver may call it: found by name, or its handle came inside a task's
  // arguments; only its own driver ends it, and others kill only named ones.)
  if (!it->second.gone.empty()) {
    why = "its actor " + it->second.gone;
    return nullptr;
  }
  if (it->second.restarting) {  // (route_task holds it, unless the head keeps no more)
    why = "its actor " + it->second.lost_with + " and waits for a node to start again on";
    return nullptr;
  }
  auto node = it->second.node_connection.lock();
  if (!node || node->done) {
    why = "its actor's node " + it->second.node + " is gone";
    return nullptr;
  }
  return node;
}

head_state::shared_body head_state::actor_refused(const remote_task& t, const std::string& why) {
  if (t.mode == mode_construct) return unplaced(t, why);
  return std::make_shared<const std::string>(
      encode_outcome(failed(t.id, kind_actor_died, "manta::actor_died_error",
                            "manta: actor call '" + t.name + "' cannot run: " + why, t.name)));
}

void head_state::actor_forwarded(std::uint64_t id, routed_task& r, const shared_body& body) {
  if (!r.method) {
    auto it = actors_.find(r.actor);
    if (it != actors_.end()) {
      placed_actor& a = it->second;
      a.ctor_id = id;
      a.ctor.driver_id = r.driver_id;
      if (body && kept_bytes_ + body->size() <= settings_.max_kept) {  // kept to start it again elsewhere
        a.ctor.frames = {{frame_type::run_task, body}};
        a.ctor.kept = body->size();
        kept_bytes_ += a.ctor.kept;
      }
    }
  }
  if (r.method && (body || r.keep)) {
    // A call of an actor with max_task_retries keeps its frame (or the parts
    // of a long one, while the head keeps them) until answered, to run again after a restart.
    auto it = actors_.find(r.actor);
    if (it != actors_.end() && it->second.task_retries != 0 && it->second.restarts_left > 0 &&
        !it->second.ctor.frames.empty()) {  // (it can start again)
      r.retries_left = it->second.task_retries < 0 ? std::numeric_limits<int>::max() : it->second.task_retries;
      return;
    }
  }
  forget_frames(r);  // never sent again as itself: its actor starts again instead
}

void head_state::keep_constructor_part(const std::string& key, const shared_body& part) {
  auto it = actors_.find(key);
  if (it == actors_.end() || !it->second.ctor.keep) return;
  routed_task& ctor = it->second.ctor;
  if (kept_bytes_ + part->size() <= settings_.max_kept) {
    ctor.frames.emplace_back(frame_type::part, part);
    ctor.kept += part->size();
    kept_bytes_ += part->size();
    return;
  }
  forget_frames(ctor);  // past what the head keeps: it is not started again elsewhere
}

void head_state::end_actor(const member& driver, std::string_view body, std::vector<outgoing>& out) {
  const actor_end e = decode_actor_end(body);  // malformed: the driver's connection ends
  auto it = actors_.find(e.actor);
  // Its own driver ends it; any driver holding a handle (found by name, or given) may kill it, and
  // then its own driver hears (its handles fail from then on).
  if (it == actors_.end()) return;
  auto owner = it->second.driver.lock();
  const bool own = owner.get() == &driver;
  if (!own && !e.kill) return;  // (only its own driver ends it; any holder of a handle may kill it)
  // (An actor on a driver's node: its driver hears below, or ended it; one
  // handed over to another driver is killed by its host.)
  if (auto node = it->second.node_connection.lock();
      node && !node->done && it->second.gone.empty() &&
      (!it->second.on_driver || (e.kill && node.get() != &driver && node != owner)))
    out.push_back({node, frame_type::actor_end, std::make_shared<const std::string>(body)});
  if (!own && owner && !owner->done)
    out.push_back({owner, frame_type::actor_end, std::make_shared<const std::string>(body)});
  fail_held(it->second, e.kill ? "was killed" : "was ended", out);
  const std::string key = it->first;
  forget_actor(it, out);
  answer_lookups(key, out);  // (as ended)
}

void head_state::host_actor(const member_ptr& driver, std::string_view body, std::vector<outgoing>& out) {
  const actor_lookup l = decode_actor_lookup(body);  // malformed: the driver's connection ends
  const std::string_view number = std::string_view(l.key).substr(std::min(l.key.size(), driver->node_id.size() + 2));
  if (l.key.rfind(driver->node_id + "/d", 0) != 0 || number.empty() ||
      number.find_first_not_of("0123456789") != std::string_view::npos)
    throw wire_error("manta bridge: " + driver->node_id + " offered an actor key that is not one of its own: " + l.key);
  if (actors_.count(l.key)) return;  // (offered before)
  // A named one waits for the answer (request set): its constructor runs only if the name is its own.
  auto answer = [&](std::string why) {
    actor_lookup reply = l;
    reply.why = std::move(why);
    if (l.request != 0)
      out.push_back({driver, frame_type::actor_found, std::make_shared<const std::string>(encode_actor_lookup(reply))});
    else if (!reply.why.empty())
      out.push_back({driver, frame_type::actor_end,
                     std::make_shared<const std::string>(encode_actor_end({l.key, true, reply.why}))});
  };
  if (auto named = actor_names_.find(l.name); !l.name.empty() && named != actor_names_.end()) {
    answer("the name '" + l.name + "' is taken in the cluster (by " + named->second + ")");
    return;
  }
  answer({});
  if (!l.name.empty()) actor_names_[l.name] = l.key;
  placed_actor& a = actors_[l.key];
  a.name = l.name;
  a.driver = driver;
  a.node = driver->node_id;
  a.node_connection = driver;
  a.on_driver = true;
  a.class_tag = l.class_tag;
  a.origin = driver->node_id;
  a.ctor.name = l.name.empty() ? l.key : l.name;  // (what messages call it)
}

void head_state::find_named(const member_ptr& driver, std::string_view body, std::vector<outgoing>& out) {
  actor_lookup l = decode_actor_lookup(body);  // malformed: the driver's connection ends
  auto named = actor_names_.find(l.name);
  auto a = named == actor_names_.end() ? actors_.end() : actors_.find(named->second);
  if (a != actors_.end() && !a->second.complete && a->second.gone.empty()) {
    waiting_lookups_[a->first].emplace_back(driver, std::move(l));  // answered once its constructor went whole
    return;
  }
  if (a == actors_.end()) {
    l.why = "no actor of the cluster is named '" + l.name + "'";
  } else if (!a->second.gone.empty()) {
    l.why = "the actor named '" + l.name + "' " + a->second.gone;
  } else {
    l.key = a->first;
    l.class_tag = a->second.class_tag;
  }
  out.push_back({driver, frame_type::actor_found, std::make_shared<const std::string>(encode_actor_lookup(l))});
}

void head_state::answer_lookups(const std::string& key, std::vector<outgoing>& out) {
  auto waiting = waiting_lookups_.find(key);
  if (waiting == waiting_lookups_.end()) return;
  auto a = actors_.find(key);
  for (auto& [to, l] : waiting->second) {
    auto driver = to.lock();
    if (!driver || driver->done) continue;
    if (a == actors_.end() || !a->second.gone.empty()) {
      l.why = "the actor named '" + l.name + "' " + (a == actors_.end() ? std::string("was ended") : a->second.gone);
    } else {
      l.key = key;
      l.class_tag = a->second.class_tag;
    }
    out.push_back({driver, frame_type::actor_found, std::make_shared<const std::string>(encode_actor_lookup(l))});
  }
  waiting_lookups_.erase(waiting);
}

void head_state::take_over_handles(const task_outcome& o, const member_ptr& driver, std::vector<outgoing>& out) {
  if (o.lender.empty()) return;
  auto lender = connection_of(o.lender, true);  // (gone: its counts went with it)
  for (const returned_handle& h : o.handles) {
    if (!h.owned || !lender) continue;  // (borrowed: nothing changes hands)
    auto it = actors_.find(h.key);
    const bool hosted_new = it == actors_.end() && h.hosted && h.key.rfind(o.lender + "/", 0) == 0;
    const bool owned_by_lender = it != actors_.end() && it->second.driver.lock() == lender;
    if (!driver || driver->done || lender == driver || (!hosted_new && !owned_by_lender)) {
      // Nobody receives it, it came back to the member that lent it, or that
      // member did not own it (or it ended): nothing changes hands.
      out.push_back({lender, frame_type::actor_returned, std::make_shared<const std::string>(h.key)});
      continue;
    }
    if (hosted_new) {
      placed_actor& a = actors_[h.key];  // as host_actor would, owned by the receiver
      a.node = lender->node_id;
      a.node_connection = lender;
      a.on_driver = true;
      a.class_tag = h.class_tag;
      a.origin = driver->node_id;
      a.ctor.name = h.label;
      it = actors_.find(h.key);
    }
    it->second.driver = driver;
    it->second.lenders.push_back(lender);
  }
}

void head_state::actor_gone(const std::string& key, placed_actor& a, std::string why, std::vector<outgoing>& out) {
  unhost(a);
  a.gone = std::move(why);
  if (auto named = actor_names_.find(a.name); named != actor_names_.end() && named->second == key)
    actor_names_.erase(named);  // (the name is free again, as for an actor that died on one machine)
  answer_lookups(key, out);
}

void head_state::host(const placed_actor& a) {
  ++hosted_[a.node];
  auto& held = held_[a.node];
  held["CPU"] += a.ctor.num_cpus;
  held["GPU"] += a.ctor.num_gpus;
  held["memory"] += static_cast<double>(a.ctor.memory);
  for (const auto& [name, amount] : a.ctor.resources) held[name] += amount;
}

void head_state::unhost(placed_actor& a) {
  if (!a.gone.empty() || a.on_driver) return;
  if (auto it = hosted_.find(a.node); it != hosted_.end()) --it->second;
  if (auto it = held_.find(a.node); it != held_.end()) {
    it->second["CPU"] -= a.ctor.num_cpus;
    it->second["GPU"] -= a.ctor.num_gpus;
    it->second["memory"] -= static_cast<double>(a.ctor.memory);
    for (const auto& [name, amount] : a.ctor.resources) it->second[name] -= amount;
  }
}

std::map<std::string, head_state::placed_actor>::iterator head_state::forget_actor(
    std::map<std::string, placed_actor>::iterator it, std::vector<outgoing>& out) {
  for (const auto& lent : it->second.lenders)
    if (auto lender = lent.lock(); lender && !lender->done)
      out.push_back({lender, frame_type::actor_returned, std::make_shared<const std::string>(it->first)});
  unhost(it->second);
  if (auto named = actor_names_.find(it->second.name); named != actor_names_.end() && named->second == it->first)
    actor_names_.erase(named);
  kept_bytes_ -= it->second.ctor.kept;
  return actors_.erase(it);
}

}  // namespace manta::bridge

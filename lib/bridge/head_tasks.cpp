// bridge/head_tasks.cpp: the head state's task router: tasks placed on nodes, their
// parts forwarded as they come, their outcomes routed back, cancels passed on,
// and work lost with its node waiting for another.
#include "bridge/head_state.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "bridge/head_rules.hpp"

namespace manta::bridge {

using namespace head_rules;

void head_state::route_task(const member_ptr& driver, std::string&& body, std::vector<outgoing>& out) {
  remote_task t = decode_task(body, /*with_args=*/false);  // a malformed task ends the driver's connection
  routed_task r = routed_from(driver, t);
  std::string why;
  member_ptr node = !t.actor.empty()  ? actor_target(driver, t, r, why)
                    : !t.node.empty() ? node_target(driver, t, r, why)
                                      : place(r, why);
  if (!node && r.method && hold_call(std::move(r), std::move(body))) return;  // its actor restarts
  // (Only the wait actor_target made, which leaves `why` empty: not a refused second constructor of that key.)
  if (!node && !t.actor.empty() && !r.method && why.empty() && hold_constructor(t, r, std::move(body), out)) return;
  if (!node && t.actor.empty() && t.node.empty() && !t.spilled && why == lost_everywhere &&
      settings_.node_wait.count() > 0) {
    if (hold_task(std::move(r), std::move(body))) return;  // a node that can run it may join
    why += " (and the head keeps no more tasks waiting for one)";
  }
  if (!node) {
    if (r.method && actors_.count(t.actor) && actors_[t.actor].restarting)
      why += " (the head keeps no more calls for it)";
    out.push_back({driver, frame_type::task_result, t.actor.empty() ? unplaced(t, why) : actor_refused(t, why)});
    return;
  }
  const std::uint64_t id = ++next_task_;
  set_id(body, id);  // renumbered in place: the body is not copied on its way
  auto frame = std::make_shared<const std::string>(std::move(body));
  routed_task& kept = routed_.emplace(id, std::move(r)).first->second;
  keep_frame(kept, frame_type::run_task, frame);
  const std::size_t first = out.size();
  forward(kept, node, out);
  // Not kept (past max_kept): it counts against the node's queue like any frame.
  if (!kept.keep) out.push_back({node, frame_type::run_task, frame, false});
  if (!kept.actor.empty())
    actor_forwarded(id, kept, frame);
  else if (!t.node.empty())
    forget_frames(kept);  // its node is lost: nobody needs it sent again
  settle_kept(out, first, kept);
}

void head_state::settle_kept(std::vector<outgoing>& out, std::size_t from, const routed_task& r) const {
  const routed_task* ctor = nullptr;  // (an actor's constructor keeps its frames with the actor)
  if (!r.actor.empty() && !r.method)
    if (auto a = actors_.find(r.actor); a != actors_.end()) ctor = &a->second.ctor;
  auto holds = [](const routed_task& t, const shared_body& body) {
    return std::any_of(t.frames.begin(), t.frames.end(), [&](const auto& f) { return f.second == body; });
  };
  for (std::size_t i = from; i < out.size(); ++i)
    if (out[i].kept) out[i].kept = holds(r, out[i].body) || (ctor && holds(*ctor, out[i].body));
}

head_state::routed_task head_state::routed_from(const member_ptr& driver, const remote_task& t) {
  routed_task r;
  r.driver = driver;
  r.driver_id = t.id;
  r.name = t.name;
  r.num_cpus = t.num_cpus;
  r.num_gpus = t.num_gpus;
  r.resources = t.resources;
  r.memory = t.memory;
  r.objects = t.objects;
  r.spilled = t.spilled;
  r.retries_left = t.max_retries < 0 ? std::numeric_limits<int>::max() : t.max_retries;  // negative: no limit
  return r;
}

head_state::shared_body head_state::unplaced(const remote_task& t, const std::string& why) {
  const bool never = why.rfind("no node", 0) == 0 || nodes_.empty();
  return std::make_shared<const std::string>(encode_outcome(
      failed(t.id, never ? kind_usage : kind_node_died, never ? "manta::usage_error" : "manta::node_died_error",
             "manta: task '" + t.name + "' cannot run on the cluster: " + why, t.name)));
}

void head_state::keep_frame(routed_task& r, frame_type type, const shared_body& body) {
  if (r.keep && kept_bytes_ + body->size() <= settings_.max_kept) {
    r.frames.emplace_back(type, body);
    r.kept += body->size();
    kept_bytes_ += body->size();
    return;
  }
  // Past what the head keeps: it runs where it is sent, and fails if that node is lost.
  r.keep = false;
  kept_bytes_ -= r.kept;
  r.kept = 0;
  r.frames.clear();
}

void head_state::drop_route(std::map<std::uint64_t, routed_task>::iterator it) {
  kept_bytes_ -= it->second.kept;
  routed_.erase(it);
}

void head_state::forward(routed_task& r, const member_ptr& node, std::vector<outgoing>& out) {
  r.node = node->node_id;
  r.node_connection = node;
  ++running_[r.node];
  // The node fetches what it lacks of these now: later tasks naming them find them there.
  for (const auto& key : r.objects) directory_[key].insert(r.node);
  for (const auto& [type, body] : r.frames) out.push_back({node, type, body, true});
}

void head_state::route_part(const member_ptr& from, std::string&& body, std::vector<outgoing>& out) {
  std::string_view bytes;
  const part_header h = decode_part_header(body, bytes);  // malformed: the connection ends
  if (h.first) {
    // Its length is held to what it announced, as the receiver's assembler will.
    if (from->in_streams.count(h.stream)) throw wire_error("manta bridge: a stream started twice");
    if (from->in_streams.size() >= max_open_streams) throw wire_error("manta bridge: too many long frames at once");
    if (bytes.size() > h.total) throw wire_error("manta bridge: a long frame runs past its length");
    if ((bytes.size() == h.total) != h.last)
      throw wire_error("manta bridge: a long frame's last part is not at its end");
    std::uint64_t id = 0;  // 0: nobody takes it; the rest of it is dropped
    if (h.type == frame_type::run_task && from->driver) {
      remote_task t = decode_task(bytes, /*with_args=*/false);  // the header comes whole in the first part
      routed_task r = routed_from(from, t);
      std::string why;
      member_ptr node = !t.actor.empty()  ? actor_target(from, t, r, why)
                        : !t.node.empty() ? node_target(from, t, r, why)
                                          : place(r, why);
      if (auto a = actors_.find(t.actor); !node && r.method && a != actors_.end() && a->second.restarting) {
        // Its actor waits for a node: the call waits at the head, its parts kept as they come.
        id = ++next_task_;
        put_u64(body, first_bytes_at, id);
        put_u64(body, stream_at, id);
        r.complete = h.last;
        routed_task& held = routed_.emplace(id, std::move(r)).first->second;
        keep_frame(held, frame_type::part, std::make_shared<const std::string>(std::move(body)));
        if (held.keep) {
          a->second.held_calls.emplace_back(id, true);
        } else {
          out.push_back(
              {from, frame_type::task_result, actor_refused(t, why + " (the head keeps no more calls for it)")});
          drop_route(routed_.find(id));
          id = 0;
        }
      } else if (!node) {
        if (auto a = actors_.find(t.actor); why.empty() && a != actors_.end() && t.mode == mode_construct &&
                                            a->second.restarting && a->second.first_start) {
          // (It would wait for a node, but only a whole constructor is kept before its start.)
          why = a->second.lost_with + ", and a constructor over 8 MiB cannot wait at the head for a node";
          restarting_.erase(t.actor);
          a->second.first_start = false;
          actor_gone(t.actor, a->second, "could not start: " + why, out);
          a->second.ctor.driver_id = 0;               // (its constructor is answered below)
          fail_held(a->second, a->second.gone, out);  // the calls held behind it
        }
        out.push_back({from, frame_type::task_result, t.actor.empty() ? unplaced(t, why) : actor_refused(t, why)});
      } else {
        id = ++next_task_;
        put_u64(body, first_bytes_at, id);  // renumbered in place, and its stream with it
        put_u64(body, stream_at, id);
        r.complete = h.last;
        auto part = std::make_shared<const std::string>(std::move(body));
        routed_task& kept = routed_.emplace(id, std::move(r)).first->second;
        keep_frame(kept, frame_type::part, part);
        const std::size_t first = out.size();
        forward(kept, node, out);
        if (!kept.keep) out.push_back({node, frame_type::part, part, false});
        if (!kept.actor.empty())
          actor_forwarded(id, kept, nullptr);
        else if (!t.node.empty())
          forget_frames(kept);
        if (!kept.actor.empty() && !kept.method) keep_constructor_part(kept.actor, part);
        settle_kept(out, first, kept);
        if (!kept.actor.empty() && !kept.method && !h.last)
          if (auto a = actors_.find(kept.actor); a != actors_.end()) a->second.complete = false;
      }
    } else if (h.type == frame_type::task_result) {
      const task_outcome o = decode_outcome_head(bytes, h.total);  // checked here: a driver gets no malformed one
      auto it = routed_.find(o.id);
      if (it == routed_.end() || it->second.node != from->node_id) take_over_handles(o, nullptr, out);
      if (it != routed_.end() && it->second.node == from->node_id) {  // else nobody waits for it here
        id = o.id;
        routed_task& r = it->second;
        put_u64(body, first_bytes_at, r.driver_id);
        put_u64(body, stream_at, id);
        auto driver = r.driver.lock();
        if (driver && !driver->done)
          out.push_back({driver, frame_type::part, std::make_shared<const std::string>(std::move(body))});
        r.outcome_streaming = !h.last;
        if (h.last) {
          take_over_handles(o, driver, out);
          --running_[r.node];
          drop_route(it);
        } else {
          r.lends = o;  // taken over once its last part went
        }
      }
    } else {
      throw wire_error("manta bridge: a long frame of a kind that is never long");
    }
    if (!h.last) from->in_streams[h.stream] = {id, h.total - bytes.size(), h.type == frame_type::task_result};
    return;
  }
  auto stream = from->in_streams.find(h.stream);
  if (stream == from->in_streams.end()) {
    if (h.abort) return;
    throw wire_error("manta bridge: a part of a stream that never began");
  }
  const std::uint64_t id = stream->second.id;
  const bool outcome = stream->second.outcome;
  if (h.abort) {
    from->in_streams.erase(stream);
  } else {
    if (bytes.size() > stream->second.left) throw wire_error("manta bridge: a long frame runs past its length");
    stream->second.left -= bytes.size();
    if ((stream->second.left == 0) != h.last)
      throw wire_error("manta bridge: a long frame's last part is not at its end");
    if (h.last) from->in_streams.erase(stream);
  }
  auto it = routed_.find(id);
  if (id == 0 || it == routed_.end()) return;  // dropped
  routed_task& r = it->second;
  put_u64(body, stream_at, id);
  auto part = std::make_shared<const std::string>(std::move(body));
  if (from->driver && !outcome) {
    if (h.abort) {  // the driver gave it up: so does its node
      if (auto node = r.node_connection.lock()) out.push_back({node, frame_type::part, part});
      if (!r.actor.empty() && !r.method)
        if (auto a = actors_.find(r.actor); a != actors_.end())
          actor_gone(a->first, a->second, "its constructor was not sent whole", out);
      if (!r.node.empty()) --running_[r.node];  // (empty: it waits for a node)
      drop_route(it);
      return;
    }
    keep_frame(r, frame_type::part, part);
    if (!r.keep && r.method && r.node.empty()) {
      // A call held for its actor's restart, past what the head keeps: it can never go.
      if (auto driver = r.driver.lock(); driver && !driver->done)
        out.push_back({driver, frame_type::task_result,
                       std::make_shared<const std::string>(encode_outcome(
                           failed(r.driver_id, kind_actor_died, "manta::actor_died_error",
                                  "manta: actor call '" + r.name +
                                      "' did not run: its actor waits for a node to start "
                                      "again on, and its arguments were more than the head keeps meanwhile",
                                  r.name)))});
      drop_route(it);
      return;
    }
    if (!r.actor.empty() && !r.method) keep_constructor_part(r.actor, part);
    r.complete = h.last;
    if (auto node = r.node_connection.lock(); node && !node->done) {
      out.push_back({node, frame_type::part, part, true});
      settle_kept(out, out.size() - 1, r);  // kept by the head (its task's, or its actor's): not counted
    }
    if (h.last && !r.actor.empty() && !r.method)
      if (auto a = actors_.find(r.actor); a != actors_.end()) {
        a->second.complete = true;  // queued behind its last part: calls forwarded from now come after it
        answer_lookups(a->first, out);
      }
    return;
  }
  if (r.node != from->node_id) return;
  auto driver = r.driver.lock();
  if (driver && !driver->done) out.push_back({driver, frame_type::part, part});
  if (h.last) {
    take_over_handles(r.lends, driver, out);
    --running_[r.node];
    drop_route(it);
  } else if (h.abort) {
    r.outcome_streaming = false;  // (the node answers again, whole or in parts, lending them again)
    take_over_handles(r.lends, nullptr, out);
    r.lends = {};
  }
}

void head_state::route_outcome(member& from, std::string&& body, std::vector<outgoing>& out) {
  task_outcome o = decode_outcome(body, /*with_values=*/false);  // a malformed outcome ends the node's connection
  auto it = routed_.find(o.id);
  // A task of a driver that left, or one sent elsewhere since: nobody waits for it here.
  if (it == routed_.end() || it->second.node != from.node_id) {
    take_over_handles(o, nullptr, out);
    return;
  }
  auto driver = it->second.driver.lock();
  const std::uint64_t driver_id = it->second.driver_id;
  if (!it->second.actor.empty() && !it->second.method) {
    auto a = actors_.find(it->second.actor);
    if (a != actors_.end()) {
      a->second.ctor.driver_id = 0;  // answered: a start elsewhere later answers nobody
      if (!o.ok)
        actor_gone(a->first, a->second, "could not be started on " + from.node_id + ": " + o.error.message, out);
    }
  }
  --running_[it->second.node];
  drop_route(it);
  if (driver_id == 0) return;  // an actor started again elsewhere: its driver heard of it the first time
  if (driver && !driver->done) {
    set_id(body, driver_id);
    out.push_back({driver, frame_type::task_result, std::make_shared<const std::string>(std::move(body))});
  }
  take_over_handles(o, driver, out);  // (behind the outcome: a return to that same driver comes after it)
}

void head_state::place_restarting(std::vector<outgoing>& out) {
  const auto now = now_;
  std::erase_if(waiting_tasks_, [&](std::uint64_t id) {
    auto it = routed_.find(id);
    if (it == routed_.end()) return true;  // its driver left, or cancelled it
    routed_task& r = it->second;
    auto driver = r.driver.lock();
    std::string why;
    // (Parts of it that came meanwhile may have passed what the head keeps: then it cannot go.)
    if (auto node = driver && !driver->done && r.keep ? place(r, why) : nullptr) {
      forward(r, node, out);
      return true;
    }
    if (driver && !driver->done && r.keep && now < r.wait_by) return false;
    if (driver && !driver->done)
      out.push_back({driver, frame_type::task_result,
                     std::make_shared<const std::string>(encode_outcome(
                         failed(r.driver_id, kind_node_died, "manta::node_died_error",
                                "manta: task '" + r.name + "' " + r.lost_with +
                                    (r.keep ? ", and no node that can run it joined within " +
                                                  std::to_string(settings_.node_wait.count()) + " ms"
                                            : ", and its arguments were more than the head keeps to send again"),
                                r.name)))});
    drop_route(it);
    return true;
  });
  for (auto k = restarting_.begin(); k != restarting_.end();) {
    auto it = actors_.find(*k);
    if (it == actors_.end() || !it->second.restarting) {  // ended or killed meanwhile
      k = restarting_.erase(k);
      continue;
    }
    placed_actor& a = it->second;
    auto driver = a.driver.lock();
    const bool driven = driver && !driver->done;
    std::string why;
    if (auto node = driven ? place(a.ctor, why) : nullptr) {
      restart_on(*k, a, node, a.lost_with, out);
      k = restarting_.erase(k);
      continue;
    }
    if (driven && now < a.restart_by) {
      ++k;
      continue;
    }
    actor_gone(*k, a,
               a.lost_with + ", and no node that has what it asks joined within " +
                   std::to_string(settings_.node_wait.count()) + " ms",
               out);
    fail_held(a, a.gone, out);
    k = restarting_.erase(k);
  }
}

bool head_state::hold_task(routed_task&& r, std::string&& body) {
  const std::uint64_t id = ++next_task_;
  set_id(body, id);
  routed_task& kept = routed_.emplace(id, std::move(r)).first->second;
  keep_frame(kept, frame_type::run_task, std::make_shared<const std::string>(std::move(body)));
  if (!kept.keep) {
    drop_route(routed_.find(id));
    return false;
  }
  kept.wait_by = now_ + settings_.node_wait;
  kept.lost_with = unplaced_yet;
  waiting_tasks_.push_back(id);
  return true;
}

void head_state::forget_frames(routed_task& r) {
  kept_bytes_ -= r.kept;
  r.kept = 0;
  r.frames.clear();
  r.keep = false;
}

void head_state::cancel_routed(const member& driver, std::string_view body, std::vector<outgoing>& out) {
  const std::uint64_t driver_id = decode_cancel(body);
  for (auto& [id, r] : routed_) {
    if (r.driver_id != driver_id || r.driver.lock().get() != &driver) continue;
    r.retries_left = 0;    // nobody waits for it: not run again if its node is lost
    if (r.node.empty()) {  // held for its restarting actor: it never goes
      drop_route(routed_.find(id));
      return;
    }
    if (auto node = r.node_connection.lock(); node && !node->done) {
      out.push_back({node, frame_type::cancel_task, std::make_shared<std::string>(encode_cancel(id))});
    }
    return;
  }
}

}  // namespace manta::bridge

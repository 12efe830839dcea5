// bridge/head_state.cpp: the head state's node table: joins, losses, silence,
// the table the drivers are sent, and where each frame goes.
#include "bridge/head_state.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "bridge/head_rules.hpp"

namespace manta::bridge {

using nlohmann::json;
using namespace head_rules;

std::chrono::milliseconds silence_limit() {
  const char* text = std::getenv("MANTA_SILENCE_LIMIT_S");
  if (!text || !*text) return std::chrono::seconds(30);
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(seconds >= 1) || seconds > 86400)
    throw std::invalid_argument(std::string("manta: MANTA_SILENCE_LIMIT_S=") + text +
                                " is not a number of seconds from 1 to 86400 (how long a silent peer is waited for)");
  return std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
}

head_state::head_state(settings s) : settings_(s) {}

bool head_state::join(const member_ptr& m, std::string_view join_body, const std::string& where, clock::time_point now,
                      std::vector<outgoing>& out) {
  now_ = now;
  auto refuse = [&](std::string why) {
    out.push_back({m, frame_type::refused, std::make_shared<const std::string>(std::move(why))});
    m->done = true;
    return false;
  };
  node_info info;
  try {
    json j = json::parse(join_body);
    info.host = j.at("host").get<std::string>();
    info.pid = j.at("pid").get<int>();
    info.resources = j.at("resources").get<std::map<std::string, double>>();
    info.functions = j.at("functions").get<std::vector<std::string>>();
    info.role = j.value("role", std::string("node"));
    info.id = j.value("id", std::string());
    if (info.role != "node" && info.role != "driver") throw std::invalid_argument("role '" + info.role + "'");
  } catch (const std::exception& e) {
    return refuse(std::string("a malformed join: ") + e.what());
  }
  std::sort(info.functions.begin(), info.functions.end());
  const bool driver = info.role == "driver";
  if (std::string difference = registry_difference(info.functions); !difference.empty())
    return refuse("its binary differs from the cluster's: " + difference);
  // A node keeps its runtime's id (what node_id() says there) when it is a plain, unused one.
  const bool plain = !info.id.empty() && info.id.size() <= 16 &&
                     info.id.find_first_not_of("0123456789abcdef") == std::string::npos &&
                     std::none_of(nodes_.begin(), nodes_.end(), [&](const node_state& n) { return n.id == info.id; });
  m->node_id = driver  ? "driver-" + std::to_string(++next_driver_)
               : plain ? info.id
                       : "node-" + std::to_string(++next_node_);
  m->driver = driver;
  m->last_heard = now;
  members_.push_back(m);
  // `joined` is the first frame it reads: before the node can be chosen, or a driver told the table.
  out.push_back({m, frame_type::joined, std::make_shared<const std::string>(m->node_id)});
  if (driver) {
    m->joined_as = std::move(info);
    m->address = where;
    tell_drivers(out);  // (it too: the table lists the drivers' machines)
    return true;
  }
  nodes_.push_back({m->node_id, where, std::move(info), true, {}});
  tell_drivers(out);
  place_restarting(out);  // actors waiting for a node like it start there
  return true;
}

void head_state::take(const member_ptr& m, frame&& f, clock::time_point now, std::vector<outgoing>& out) {
  now_ = now;
  m->last_heard = now;
  route_frame(m, m->driver, std::move(f), out);
}

void head_state::lose(member& m, const std::string& why, clock::time_point now, std::vector<outgoing>& out) {
  if (m.done) return;
  now_ = now;
  m.done = true;
  member_ptr held;  // (the caller's reference stays valid while its entry goes)
  std::erase_if(members_, [&](const member_ptr& x) { return x.get() == &m && (held = x, true); });
  lose_member(m, why, out);
}

std::vector<head_state::member_ptr> head_state::drop_silent(clock::time_point now, std::vector<outgoing>& out) {
  now_ = now;
  std::vector<member_ptr> silent;
  for (const auto& m : members_)
    if (now - m->last_heard >= settings_.lost_after) silent.push_back(m);
  const std::string why = "no heartbeat for " + std::to_string(settings_.lost_after.count()) + " ms";
  for (const auto& m : silent) lose(*m, why, now, out);
  if (!restarting_.empty() || !waiting_tasks_.empty()) place_restarting(out);  // (their waits end here)
  return silent;
}

void head_state::stop(std::vector<outgoing>& out) const {
  // Drivers first: told the cluster stopped before their nodes leave, their
  // tasks fail saying so, not "lost with <node>".
  auto body = std::make_shared<const std::string>("the cluster was stopped");
  for (const auto& m : members_)
    if (m->driver) out.push_back({m, frame_type::stop, body});
  for (const auto& m : members_)
    if (!m->driver) out.push_back({m, frame_type::stop, body});
}

head_state::sizes head_state::held() const noexcept {
  return {members_.size(),   routed_.size(), actors_.size(), waiting_tasks_.size() + restarting_.size(),
          directory_.size(), kept_bytes_};
}

bool head_state::keeps(const shared_body& body) const noexcept {
  auto in = [&](const routed_task& r) {
    return std::any_of(r.frames.begin(), r.frames.end(), [&](const auto& f) { return f.second == body; });
  };
  return std::any_of(routed_.begin(), routed_.end(), [&](const auto& r) { return in(r.second); }) ||
         std::any_of(actors_.begin(), actors_.end(), [&](const auto& a) { return in(a.second.ctor); });
}

void head_state::route_frame(const member_ptr& c, bool driver, frame&& f, std::vector<outgoing>& out) {
  if (f.type == frame_type::run_task && driver) route_task(c, std::move(f.body), out);
  // (A driver answers calls of the actors of its own node that it offered.)
  else if (f.type == frame_type::task_result)
    route_outcome(*c, std::move(f.body), out);
  else if (f.type == frame_type::part)
    route_part(c, std::move(f.body), out);
  else if (f.type == frame_type::actor_end && driver)
    end_actor(*c, f.body, out);
  else if (f.type == frame_type::cancel_task && driver)
    cancel_routed(*c, f.body, out);
  else if (f.type == frame_type::find_actor && driver)
    find_named(c, f.body, out);
  else if (f.type == frame_type::host_actor && driver)
    host_actor(c, f.body, out);
  // (A driver fetches too: for a call of an actor of its own node naming another member's object.)
  else if (f.type == frame_type::fetch_object ||
           ((f.type == frame_type::object_lost || f.type == frame_type::object_freed) && driver))
    route_object_note(*c, f.type, f.body, out);
  else if (f.type == frame_type::output) {
    // A node's lines for a driver's terminal (sent on its link as a driver):
    // passed on as they came, or dropped if that driver is gone.
    const std::string to = decode_output(f.body).driver;  // malformed: the connection ends
    if (auto d = connection_of(to, true); d && d != c)
      out.push_back({d, frame_type::output, std::make_shared<const std::string>(std::move(f.body))});
  }
}

std::string head_state::registry_difference(const std::vector<std::string>& functions) {
  if (!have_reference_) {
    reference_ = functions;
    have_reference_ = true;
    return {};
  }
  auto [mine, theirs] = std::mismatch(reference_.begin(), reference_.end(), functions.begin(), functions.end());
  if (mine == reference_.end() && theirs == functions.end()) return {};
  if (theirs == functions.end() || (mine != reference_.end() && *mine < *theirs))
    return "it lacks '" + *mine + "', which the cluster's first node registered";
  return "it registers '" + *theirs + "', which the cluster's first node does not";
}

std::string lacking(const std::map<std::string, double>& has, double cpus, double gpus,
                    const std::map<std::string, double>& custom, double memory) {
  auto short_of = [&](const std::string& name, double want) -> std::string {
    if (want <= 0) return {};
    auto it = has.find(name);
    double have = it == has.end() ? 0 : it->second;
    if (have >= want) return {};
    auto number = [](double x) {  // (bytes of memory whole, not as 1.1e+12)
      char text[32];
      std::snprintf(text, sizeof text, x == std::floor(x) && std::fabs(x) < 1e18 ? "%.0f" : "%g", x);
      return std::string(text);
    };
    return name + ": " + number(want) + " asked, " + number(have) + " there";
  };
  if (auto w = short_of("CPU", cpus); !w.empty()) return w;
  if (auto w = short_of("GPU", gpus); !w.empty()) return w;
  if (auto w = short_of("memory", memory); !w.empty()) return w;
  for (const auto& [name, want] : custom)
    if (auto w = short_of(name, want); !w.empty()) return w;
  return {};
}

head_state::member_ptr head_state::place(const routed_task& t, std::string& why) {
  // The least loaded node whose resources, less what its actors hold for
  // life, cover what `t` asks; failing that, the least loaded whose totals do
  // (`t` waits there until its actors give some back). Among nodes with a CPU
  // free, one that holds more of the objects `t` names comes first.
  member_ptr best;
  double best_load = 0;
  bool best_has_room = false;
  std::size_t best_held = 0;
  std::string first_lack;
  bool any_fits = false;
  for (const auto& n : nodes_) {
    std::string lack = lacking(n.info.resources, t.num_cpus, t.num_gpus, t.resources, static_cast<double>(t.memory));
    if (!lack.empty()) {
      if (first_lack.empty()) first_lack = n.id + " has " + lack;
      continue;
    }
    any_fits = true;
    if (!n.alive) continue;
    auto c =
        std::find_if(members_.begin(), members_.end(), [&](const auto& x) { return x->node_id == n.id && !x->done; });
    if (c == members_.end()) continue;
    std::map<std::string, double> free = n.info.resources;
    if (auto held = held_.find(n.id); held != held_.end())
      for (const auto& [name, amount] : held->second) free[name] -= amount;
    const bool has_room = lacking(free, t.num_cpus, t.num_gpus, t.resources, static_cast<double>(t.memory)).empty();
    auto cpus = n.info.resources.find("CPU");
    double load = (running_[n.id] + hosted_[n.id]) / std::max(1.0, cpus == n.info.resources.end() ? 1.0 : cpus->second);
    std::size_t held = 0;
    if (load < 1)
      for (const auto& key : t.objects)
        if (auto d = directory_.find(key); d != directory_.end() && d->second.count(n.id)) ++held;
    const bool better = !best || (has_room && !best_has_room) ||
                        (has_room == best_has_room && (held > best_held || (held == best_held && load < best_load)));
    if (better) {
      best = *c;
      best_load = load;
      best_has_room = has_room;
      best_held = held;
    }
  }
  if (!best)
    why = nodes_.empty() ? "the cluster has no node"
          : any_fits     ? std::string(lost_everywhere)
                         : "no node of the cluster has what it needs (" + first_lack + ")";
  return best;
}

void head_state::lose_member(member& c, const std::string& why, std::vector<outgoing>& out) {
  if (c.node_id.empty()) return;  // a tool's request, or a peer that never joined
  auto abort_part = [](std::uint64_t stream) {
    return std::make_shared<const std::string>(encode_part_header({stream, false, false, true}));
  };
  if (c.driver) {
    // Its tasks are cancelled on their nodes (a running one's worker is
    // killed, and the tasks it started elsewhere are cancelled with it):
    // their outcomes have nobody to go to. Its actors' calls end with them below.
    for (auto it = routed_.begin(); it != routed_.end();) {
      auto next = std::next(it);
      auto d = it->second.driver.lock();
      if (!d || d.get() == &c) {
        auto node = it->second.node_connection.lock();
        if (!it->second.complete) {  // its node drops the parts it has
          if (node) out.push_back({node, frame_type::part, abort_part(it->first)});
        } else if (node && !node->done && it->second.actor.empty()) {
          out.push_back({node, frame_type::cancel_task, std::make_shared<std::string>(encode_cancel(it->first))});
        }
        if (!it->second.node.empty()) --running_[it->second.node];  // (empty: held for a restarting actor)
        drop_route(it);
      }
      it = next;
    }
    // Calls of the actors on its own node that it offered: nobody answers them now.
    for (auto it = routed_.begin(); it != routed_.end();) {
      auto next = std::next(it);
      if (it->second.node == c.node_id) {
        if (auto d = it->second.driver.lock(); d && !d->done) {
          if (it->second.outcome_streaming) out.push_back({d, frame_type::part, abort_part(it->first)});
          out.push_back({d, frame_type::task_result,
                         std::make_shared<const std::string>(encode_outcome(failed(
                             it->second.driver_id, kind_actor_died, "manta::actor_died_error",
                             "manta: actor call '" + it->second.name + "' was lost: its actor lived on the node of " +
                                 c.node_id + ", which left the cluster (" + why + ")",
                             it->second.name, c.node_id)))});
        }
        drop_route(it);
      }
      it = next;
    }
    running_.erase(c.node_id);
    for (auto it = directory_.begin(); it != directory_.end();) {  // (calls' objects it was sent by value, or fetched)
      it->second.erase(c.node_id);
      it = it->second.empty() ? directory_.erase(it) : std::next(it);
    }
    std::erase_if(fetching_, [&](const auto& f) { return f.second == c.node_id; });
    // Its actors end with it, as a driver's do on one node; so do those its
    // program's tasks started on nodes (owned by a node's driver connection,
    // which hears, as of a kill).
    for (auto it = actors_.begin(); it != actors_.end();) {
      auto d = it->second.driver.lock();
      const bool its_program = it->second.origin == c.node_id;
      if (d && d.get() != &c && !its_program) {
        // One it handed over to another driver lived on its node: gone with it.
        if (it->second.on_driver && it->second.node_connection.lock().get() == &c && it->second.gone.empty())
          actor_gone(it->first, it->second,
                     "was lost: it lived on the node of " + c.node_id + ", which left the cluster (" + why + ")", out);
        ++it;
        continue;
      }
      auto end = std::make_shared<const std::string>(encode_actor_end({it->first, true}));
      if (auto node = it->second.node_connection.lock();
          node && !node->done && it->second.gone.empty() && !it->second.on_driver)
        out.push_back({node, frame_type::actor_end, end});
      if (d && d.get() != &c && !d->done) out.push_back({d, frame_type::actor_end, end});
      fail_held(it->second, "ended with the driver " + c.node_id, out);
      const std::string key = it->first;
      it = forget_actor(it, out);
      answer_lookups(key, out);  // (as ended)
    }
    // Copies of its objects on nodes go with it, and fetches it never answered fail.
    const std::string prefix = c.node_id + "/";
    for (auto it = fetching_.begin(); it != fetching_.end();) {
      if (it->first.rfind(prefix, 0) != 0) {
        ++it;
        continue;
      }
      if (auto n = member_of(it->second))
        out.push_back({n, frame_type::object_lost,
                       std::make_shared<const std::string>(
                           encode_object_note({it->first, it->second, "its driver left the cluster"}))});
      it = fetching_.erase(it);
    }
    for (auto it = directory_.begin(); it != directory_.end();) {
      if (it->first.rfind(prefix, 0) != 0) {
        ++it;
        continue;
      }
      auto note = std::make_shared<const std::string>(encode_object_note({it->first, {}, "its driver left"}));
      for (const auto& node : it->second)
        if (auto n = member_of(node)) out.push_back({n, frame_type::object_freed, note});
      it = directory_.erase(it);
    }
    tell_drivers(out);  // (its machine leaves the table)
    return;
  }
  for (auto& n : nodes_)
    if (n.id == c.node_id && n.alive) {
      n.alive = false;
      n.lost_why = why;
    }
  // The table lists the last lost nodes, not every one since the head began:
  // nodes come and go for as long as it runs, and every change sends the table.
  auto lost = std::count_if(nodes_.begin(), nodes_.end(), [](const node_state& n) { return !n.alive; });
  for (auto it = nodes_.begin(); lost > static_cast<std::ptrdiff_t>(lost_nodes_listed) && it != nodes_.end();)
    if (!it->alive)
      it = nodes_.erase(it), --lost;
    else
      ++it;
  running_.erase(c.node_id);
  hosted_.erase(c.node_id);
  held_.erase(c.node_id);
  for (auto it = directory_.begin(); it != directory_.end();) {
    it->second.erase(c.node_id);
    it = it->second.empty() ? directory_.erase(it) : std::next(it);
  }
  std::erase_if(fetching_, [&](const auto& f) { return f.second == c.node_id; });
  std::vector<std::uint64_t> resend;  // calls that may run again once their actor starts again
  for (auto it = routed_.begin(); it != routed_.end();) {
    auto following = std::next(it);
    routed_task& r = it->second;
    if (r.node != c.node_id) {
      it = following;
      continue;
    }
    auto driver = r.driver.lock();
    if (!driver || driver->done) {
      drop_route(it);
      it = following;
      continue;
    }
    if (std::exchange(r.outcome_streaming, false)) {  // the driver drops what came of its outcome
      out.push_back({driver, frame_type::part, abort_part(it->first)});
      take_over_handles(std::exchange(r.lends, {}), nullptr, out);
    }
    if (r.method && r.keep && !r.frames.empty() && r.retries_left > 0) {
      resend.push_back(it->first);  // (lose_actors sends it again, or fails it)
      it = following;
      continue;
    }
    if (!r.actor.empty()) {
      // An actor's call is not run again (unless it may be, above): its actor's
      // state went with the node (the actor starts again below). Its
      // constructor is answered by that start.
      std::string message;
      if (r.method)
        message = "manta: actor call '" + r.name + "' was lost with " + c.node_id + " (" + why + ")";
      else if (!actors_.count(r.actor))
        message = "manta: actor '" + r.name + "' was lost with " + c.node_id + " (" + why + ") while it started";
      if (!message.empty())
        out.push_back({driver, frame_type::task_result,
                       std::make_shared<const std::string>(
                           encode_outcome(failed(r.driver_id, r.method ? kind_actor_died : kind_node_died,
                                                 r.method ? "manta::actor_died_error" : "manta::node_died_error",
                                                 std::move(message), r.name, c.node_id)))});
      drop_route(it);  // (its node's count went with the node)
      it = following;
      continue;
    }
    std::string elsewhere;
    member_ptr next = r.retries_left > 0 && r.keep ? place(r, elsewhere) : nullptr;
    if (next) {
      --r.retries_left;
      forward(r, next, out);
      it = following;
      continue;
    }
    if (r.retries_left > 0 && r.keep && !r.spilled && settings_.node_wait.count() > 0) {
      // No alive node can run it: it waits for one to join (place_restarting).
      --r.retries_left;
      r.node.clear();
      r.node_connection.reset();
      r.wait_by = now_ + settings_.node_wait;
      r.lost_with = "was lost with " + c.node_id + " (" + why + ")";
      waiting_tasks_.push_back(it->first);
      it = following;
      continue;
    }
    std::string message = "manta: task '" + r.name + "' was lost with " + c.node_id + " (" + why + ")" +
                          (!r.keep             ? ", and its arguments were more than the head keeps to send again"
                           : elsewhere.empty() ? ", past its max_retries"
                                               : ", and " + elsewhere);
    out.push_back(
        {driver, frame_type::task_result,
         std::make_shared<const std::string>(encode_outcome(
             failed(r.driver_id, kind_node_died, "manta::node_died_error", std::move(message), r.name, c.node_id)))});
    drop_route(it);
    it = following;
  }
  lose_actors(c, why, std::move(resend), out);
  tell_drivers(out);
}

head_state::member_ptr head_state::connection_of(const std::string& id, bool driver) const {
  // (A connection that has not joined, a tool's or one in its handshake, has
  // no id: a frame naming none must not reach it.)
  if (id.empty()) return nullptr;
  for (const auto& c : members_)
    if (c->node_id == id && c->driver == driver && !c->done) return c;
  return nullptr;
}

head_state::member_ptr head_state::member_of(const std::string& id) const {
  auto c = connection_of(id, false);
  return c ? c : connection_of(id, true);
}

void head_state::tell_drivers(std::vector<outgoing>& out) {
  shared_body table;
  for (auto& c : members_) {
    if (!c->driver || c->done) continue;
    if (!table) table = std::make_shared<const std::string>(nodes_json());
    out.push_back({c, frame_type::cluster_update, table});
  }
}

std::string head_state::nodes_json() const {
  json rows = json::array();
  for (const auto& n : nodes_) {
    auto running = running_.find(n.id);
    json r = {{"id", n.id},
              {"address", n.address},
              {"host", n.info.host},
              {"pid", n.info.pid},
              {"resources", n.info.resources},
              {"alive", n.alive},
              {"tasks_running", running == running_.end() ? 0 : running->second},
              {"actors", hosted_.count(n.id) ? hosted_.at(n.id) : 0},
              {"objects", std::count_if(directory_.begin(), directory_.end(),
                                        [&](const auto& o) { return o.second.count(n.id) != 0; })}};
    if (!n.alive) r["lost_why"] = n.lost_why;
    rows.push_back(std::move(r));
  }
  // The drivers' machines (runtimes too, running their own program's tasks),
  // but not a node's own link as a driver (it joins as both, under one runtime id).
  json drivers = json::array();
  for (const auto& m : members_) {
    if (!m->driver) continue;
    const std::string& runtime = m->joined_as.id;
    if (!runtime.empty() &&
        std::any_of(nodes_.begin(), nodes_.end(), [&](const node_state& n) { return n.id == runtime; }))
      continue;
    drivers.push_back({{"id", m->node_id},
                       {"node_id", runtime},
                       {"address", m->address},
                       {"host", m->joined_as.host},
                       {"pid", m->joined_as.pid},
                       {"resources", m->joined_as.resources}});
  }
  // Frames to one driver may leave from different threads: the version orders them.
  return json{{"nodes", std::move(rows)}, {"drivers", std::move(drivers)}, {"version", ++table_version_}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

}  // namespace manta::bridge

// bridge/task_wire.cpp: tasks and outcomes as frame bodies:
// [8-byte id][4-byte header length][JSON header][raw bytes].
#include "bridge/task_wire.hpp"

#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "bridge/wire.hpp"

namespace manta::bridge {

using nlohmann::json;

namespace {

constexpr std::size_t prefix = sizeof(std::uint64_t) + sizeof(std::uint32_t);

/// The id, the header's length and the header: what goes before the payload.
std::string head_bytes(std::uint64_t id, const json& header) {
  const std::string h = header.dump(-1, ' ', false, json::error_handler_t::replace);
  const auto hlen = static_cast<std::uint32_t>(h.size());
  std::string body(prefix, '\0');
  std::memcpy(body.data(), &id, sizeof id);
  std::memcpy(body.data() + sizeof id, &hlen, sizeof hlen);
  body += h;
  return body;
}

struct parts {
  std::uint64_t id;
  json header;
  std::string_view payload;    ///< what of it is in the body given
  std::uint64_t payload_size;  ///< its whole length
};

/// @param total  the whole body's length (`body` may be its start)
parts split(std::string_view body, std::uint64_t total) {
  if (body.size() < prefix || total < body.size()) throw wire_error("manta bridge: a task frame shorter than its prefix");
  parts p{};
  std::uint32_t hlen = 0;
  std::memcpy(&p.id, body.data(), sizeof p.id);
  std::memcpy(&hlen, body.data() + sizeof p.id, sizeof hlen);
  if (hlen > body.size() - prefix) throw wire_error("manta bridge: a task frame's header runs past its end");
  try {
    p.header = json::parse(body.substr(prefix, hlen));
  } catch (const json::exception& e) {
    throw wire_error(std::string("manta bridge: a task frame's header is not JSON: ") + e.what());
  }
  if (!p.header.is_object()) throw wire_error("manta bridge: a task frame's header is not an object");
  p.payload = body.substr(prefix + hlen);
  p.payload_size = total - prefix - hlen;
  return p;
}
parts split(std::string_view body) { return split(body, body.size()); }

}  // namespace

std::string encode_task(const remote_task& t) { return encode_task_head(t) + t.args; }

std::string encode_task_head(const remote_task& t) {
  json h = {{"function", t.function},   {"name", t.name},
            {"mode", t.mode},           {"num_returns", t.num_returns},
            {"arg_count", t.arg_count}, {"num_cpus", t.num_cpus},
            {"num_gpus", t.num_gpus},   {"resources", t.resources},
            {"memory", t.memory},       {"max_retries", t.max_retries},
            {"retry_exceptions", t.retry_exceptions}, {"timeout_ns", t.timeout_ns},
            {"max_calls", t.max_calls}};
  if (!t.actor.empty()) {
    h["actor"] = t.actor;
    h["max_restarts"] = t.max_restarts;
    h["max_task_retries"] = t.max_task_retries;
    h["max_concurrency"] = t.max_concurrency;
    if (!t.actor_name.empty()) {
      h["actor_name"] = t.actor_name;
      h["class_tag"] = t.class_tag;
    }
  }
  if (!t.objects.empty()) h["objects"] = t.objects;
  for (const auto& a : t.handles) h["handles"].push_back({a.id, a.key, a.class_tag, a.label});
  if (!t.origin.empty()) h["origin"] = t.origin;
  if (t.spilled) h["spilled"] = true;
  if (!t.node.empty()) h["node"] = t.node;
  if (!t.object.empty()) h["object"] = t.object;
  return head_bytes(t.id, h);
}

namespace {
remote_task decode_task_header(const parts& p) {
  remote_task t;
  t.id = p.id;
  try {
    const json& h = p.header;
    t.function = h.at("function").get<std::uint64_t>();
    t.name = h.at("name").get<std::string>();
    t.mode = h.at("mode").get<std::uint8_t>();
    t.num_returns = h.at("num_returns").get<std::uint16_t>();
    t.arg_count = h.at("arg_count").get<std::uint16_t>();
    t.num_cpus = h.at("num_cpus").get<double>();
    t.num_gpus = h.at("num_gpus").get<double>();
    t.resources = h.at("resources").get<std::map<std::string, double>>();
    t.memory = h.at("memory").get<std::uint64_t>();
    t.max_retries = h.at("max_retries").get<int>();
    t.retry_exceptions = h.at("retry_exceptions").get<bool>();
    t.timeout_ns = h.at("timeout_ns").get<std::uint64_t>();
    t.max_calls = h.at("max_calls").get<int>();
    t.actor = h.value("actor", std::string());
    t.max_restarts = h.value("max_restarts", 0);
    t.max_task_retries = h.value("max_task_retries", 0);
    t.max_concurrency = h.value("max_concurrency", 1);
    t.actor_name = h.value("actor_name", std::string());
    t.class_tag = h.value("class_tag", std::uint64_t{0});
    t.objects = h.value("objects", std::vector<std::string>());
    if (h.contains("handles"))
      for (const json& a : h.at("handles")) {
        remote_task::handle one{a.at(0).get<std::string>(), a.at(1).get<std::string>(), a.at(2).get<std::uint64_t>(),
                                a.at(3).get<std::string>()};
        if (one.id.size() != 32 || one.id.find_first_not_of("0123456789abcdef") != std::string::npos || one.key.empty())
          throw wire_error("manta bridge: a task names an actor handle with a malformed id or key");
        t.handles.push_back(std::move(one));
      }
    t.node = h.value("node", std::string());
    t.object = h.value("object", std::string());
    t.origin = h.value("origin", std::string());
    t.spilled = h.value("spilled", false);
  } catch (const json::exception& e) {
    throw wire_error(std::string("manta bridge: a malformed task: ") + e.what());
  }
  if (t.num_returns == 0) throw wire_error("manta bridge: a task with no result");
  return t;
}
}  // namespace

remote_task decode_task(std::string_view body, bool with_args) {
  parts p = split(body);
  remote_task t = decode_task_header(p);
  if (with_args) t.args.assign(p.payload);
  return t;
}

remote_task decode_task(std::string&& body) {
  parts p = split(body);
  remote_task t = decode_task_header(p);
  body.erase(0, body.size() - p.payload.size());  // (a move within the string: no second copy)
  t.args = std::move(body);
  return t;
}

std::string encode_outcome(const task_outcome& o) {
  std::string body = encode_outcome_head(o);
  if (o.ok)
    for (const auto& v : o.values) body += v.data();
  return body;
}

namespace {
json error_json(const remote_error& e) {
  return {{"kind", e.kind},         {"remote_type", e.remote_type}, {"message", e.message},
          {"function", e.function}, {"chain", e.chain},             {"stack", e.stack},
          {"pid", e.pid},           {"signal", e.signal}};
}
remote_error read_error(const json& e) {
  remote_error out;
  out.kind = e.at("kind").get<std::uint8_t>();
  out.remote_type = e.at("remote_type").get<std::string>();
  out.message = e.at("message").get<std::string>();
  out.function = e.at("function").get<std::string>();
  out.chain = e.at("chain").get<std::string>();
  out.stack = e.at("stack").get<std::string>();
  out.pid = e.at("pid").get<std::int32_t>();
  out.signal = e.at("signal").get<std::int32_t>();
  return out;
}
}  // namespace

std::string encode_outcome_head(const task_outcome& o) {
  json h = {{"ok", o.ok}, {"node", o.node}};
  if (o.ok) {
    json values = json::array();
    for (const auto& v : o.values) {
      json value = {{"tag", v.tag}, {"size", v.data().size()}};
      if (!v.inside.empty()) value["inside"] = v.inside;
      if (!v.id.empty()) value["id"] = v.id;
      if (v.error) value["error"] = error_json(*v.error);
      values.push_back(std::move(value));
    }
    h["values"] = std::move(values);
  } else {
    h["error"] = error_json(o.error);
  }
  return head_bytes(o.id, h);
}

namespace {
/// The outcome in `p`; its values' sizes are checked against the payload's
/// whole length, and each is copied out when `take` says so.
template <class Take>
task_outcome read_outcome(const parts& p, Take&& take) {
  task_outcome o;
  o.id = p.id;
  try {
    const json& h = p.header;
    o.ok = h.at("ok").get<bool>();
    o.node = h.at("node").get<std::string>();
    if (o.ok) {
      std::uint64_t at = 0;
      const json& values = h.at("values");
      for (std::size_t i = 0; i < values.size(); ++i) {
        const auto size = values[i].at("size").get<std::uint64_t>();
        if (size > p.payload_size - at) throw wire_error("manta bridge: an outcome's values run past its end");
        o.values.push_back({values[i].at("tag").get<std::uint64_t>(), {}});
        remote_value& v = o.values.back();
        v.inside = values[i].value("inside", std::vector<std::string>());
        v.id = values[i].value("id", std::string());
        auto id_text = [](const std::string& t) {
          return t.size() == 32 && t.find_first_not_of("0123456789abcdef") == std::string::npos;
        };
        if ((!v.id.empty() && !id_text(v.id)) || !std::all_of(v.inside.begin(), v.inside.end(), id_text))
          throw wire_error("manta bridge: an outcome names an object id that is not 32 hex digits");
        if (values[i].contains("error")) v.error = read_error(values[i].at("error"));
        take(o.values.back(), at, size, i + 1 == values.size());
        at += size;
      }
      if (at != p.payload_size) throw wire_error("manta bridge: an outcome with bytes past its values");
    } else {
      o.error = read_error(h.at("error"));
    }
  } catch (const json::exception& e) {
    throw wire_error(std::string("manta bridge: a malformed outcome: ") + e.what());
  }
  return o;
}
}  // namespace

task_outcome decode_outcome(std::string_view body, bool with_values) {
  parts p = split(body);
  task_outcome o = read_outcome(p, [&](remote_value& v, std::uint64_t at, std::uint64_t size, bool) {
    if (with_values) v.bytes.assign(p.payload.substr(at, size));
  });
  if (!with_values) o.values.clear();
  return o;
}

task_outcome decode_outcome(std::string&& body) {
  parts p = split(body);
  const std::size_t payload_at = body.size() - p.payload.size();
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;  // each value's place in the payload
  task_outcome o = read_outcome(
      p, [&](remote_value&, std::uint64_t at, std::uint64_t size, bool) { spans.emplace_back(at, size); });
  if (o.ok && !o.values.empty()) {
    // A gigabyte of results is not copied on the link's thread (which must keep its heartbeats going).
    o.frame = std::make_shared<const std::string>(std::move(body));
    const std::string_view all(*o.frame);
    for (std::size_t i = 0; i < o.values.size(); ++i)
      o.values[i].borrowed = all.substr(payload_at + spans[i].first, spans[i].second);
  }
  return o;
}

task_outcome decode_outcome_head(std::string_view start, std::uint64_t total) {
  parts p = split(start, total);
  task_outcome o = read_outcome(p, [](remote_value&, std::uint64_t, std::uint64_t, bool) {});
  o.values.clear();
  return o;
}

std::uint64_t peek_id(std::string_view body) {
  if (body.size() < sizeof(std::uint64_t)) throw wire_error("manta bridge: a task frame without its number");
  std::uint64_t id;
  std::memcpy(&id, body.data(), sizeof id);
  return id;
}

std::string with_id(std::string_view body, std::uint64_t id) {
  std::string out(body);
  set_id(out, id);
  return out;
}

void set_id(std::string& body, std::uint64_t id) {
  if (body.size() < sizeof id) throw wire_error("manta bridge: a task frame without its number");
  std::memcpy(body.data(), &id, sizeof id);
}

std::string encode_actor_end(const actor_end& e) {
  json j{{"actor", e.actor}, {"kill", e.kill}};
  if (!e.why.empty()) j["why"] = e.why;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string encode_actor_lookup(const actor_lookup& l) {
  return json{{"request", l.request}, {"name", l.name}, {"key", l.key}, {"class_tag", l.class_tag}, {"why", l.why}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

actor_lookup decode_actor_lookup(std::string_view body) {
  try {
    const json j = json::parse(body);
    return {j.at("request").get<std::uint64_t>(), j.at("name").get<std::string>(), j.at("key").get<std::string>(),
            j.at("class_tag").get<std::uint64_t>(), j.at("why").get<std::string>()};
  } catch (const json::exception& e) {
    throw wire_error(std::string("manta bridge: a malformed actor lookup: ") + e.what());
  }
}

std::string encode_object_note(const object_note& n) {
  return json{{"object", n.object}, {"node", n.node}, {"why", n.why}}.dump(-1, ' ', false,
                                                                           json::error_handler_t::replace);
}

object_note decode_object_note(std::string_view body) {
  try {
    const json j = json::parse(body);
    return {j.at("object").get<std::string>(), j.at("node").get<std::string>(), j.at("why").get<std::string>()};
  } catch (const json::exception& e) {
    throw wire_error(std::string("manta bridge: a malformed object note: ") + e.what());
  }
}

actor_end decode_actor_end(std::string_view body) {
  try {
    const json j = json::parse(body);
    return {j.at("actor").get<std::string>(), j.at("kill").get<bool>(), j.value("why", std::string())};
  } catch (const json::exception& e) {
    throw wire_error(std::string("manta bridge: a malformed actor_end: ") + e.what());
  }
}

}  // namespace manta::bridge

// bridge/task_wire.cpp: tasks and outcomes as frame bodies:
// [8-byte id][4-byte header length][binary header][raw bytes]. The small
// frames (actor ends, lookups, object notes, output) have the same layout.
#include "bridge/task_wire.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "bridge/wire.hpp"
#include "ipc/frame.hpp"

namespace manta::bridge {

namespace {

constexpr std::size_t prefix = sizeof(std::uint64_t) + sizeof(std::uint32_t);

/// Writes a header's fields, little-endian as the host (every member runs the
/// same binary, checked at join); a string is its 4-byte length, then its bytes.
class header_writer {
 public:
  explicit header_writer(std::uint64_t id) : out_(prefix, '\0') { std::memcpy(out_.data(), &id, sizeof id); }
  template <class T>
    requires std::is_arithmetic_v<T>
  void put(T v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put(std::string_view s) {
    put(static_cast<std::uint32_t>(s.size()));
    out_.append(s);
  }
  void put(const std::string& s) { put(std::string_view(s)); }
  void put(const std::vector<std::string>& v) {
    put(static_cast<std::uint32_t>(v.size()));
    for (const auto& s : v) put(s);
  }
  void put(const std::map<std::string, double>& m) {
    put(static_cast<std::uint32_t>(m.size()));
    for (const auto& [name, amount] : m) {
      put(name);
      put(amount);
    }
  }
  /// The id, the header's length and the header: what goes before the payload.
  std::string done() && {
    const auto hlen = static_cast<std::uint32_t>(out_.size() - prefix);
    std::memcpy(out_.data() + sizeof(std::uint64_t), &hlen, sizeof hlen);
    return std::move(out_);
  }

 private:
  std::string out_;
};

/// Reads what header_writer wrote, with the bounds-checked reader of the
/// runtime's own pipes; anything that runs past the header, a count larger
/// than the bytes left could hold, a number that is not finite or bytes past
/// the fields is a wire_error naming `what` (a task, an outcome).
class header_reader {
 public:
  header_reader(std::string_view header, const char* what)
      : in_(reinterpret_cast<const std::byte*>(header.data()), header.size()), what_(what) {}
  template <class T>
    requires std::is_arithmetic_v<T>
  T get() {
    const T v = checked([&] { return in_.get<T>(); });
    if constexpr (std::is_floating_point_v<T>)
      if (!std::isfinite(v)) fail("a number that is not finite");
    return v;
  }
  bool flag() {
    const auto b = get<std::uint8_t>();
    if (b > 1) fail("a flag that is neither 0 nor 1");
    return b == 1;
  }
  std::string text() {
    return checked([&] { return in_.string(); });
  }
  /// A count of items each at least `least` bytes long.
  std::uint32_t count(std::size_t least) {
    return static_cast<std::uint32_t>(checked([&] { return in_.count(least); }));
  }
  std::vector<std::string> texts() {
    std::vector<std::string> v(count(sizeof(std::uint32_t)));
    for (auto& s : v) s = text();
    return v;
  }
  std::map<std::string, double> amounts() {
    std::map<std::string, double> m;
    for (auto n = count(sizeof(std::uint32_t) + sizeof(double)); n > 0; --n) {
      std::string name = text();
      m[std::move(name)] = get<double>();
    }
    return m;
  }
  void end() const {
    if (in_.remaining() != 0) fail("bytes past its header's fields");
  }
  [[noreturn]] void fail(const char* why) const {
    throw wire_error(std::string("manta bridge: a malformed ") + what_ + ": " + why);
  }

 private:
  template <class Read>
  auto checked(Read&& read) -> decltype(read()) {
    try {
      return read();
    } catch (const ipc::protocol_error&) {
      fail("a field runs past its header's end, or a count past its bytes");
    }
  }
  ipc::frame_reader in_;
  const char* what_;
};

/// An actor handle's fields, as tasks and outcomes carry them.
void put_handle(header_writer& w, const remote_task::handle& h) {
  w.put(h.id);
  w.put(h.key);
  w.put(h.class_tag);
  w.put(h.label);
}
void read_handle(header_reader& r, remote_task::handle& h) {
  h.id = r.text();
  h.key = r.text();
  h.class_tag = r.get<std::uint64_t>();
  h.label = r.text();
  if (h.id.size() != 32 || h.id.find_first_not_of("0123456789abcdef") != std::string::npos || h.key.empty())
    r.fail("an actor handle with a malformed id or key");
}
/// The least bytes a handle's fields take (three lengths and the class).
constexpr std::size_t handle_bytes = 3 * sizeof(std::uint32_t) + sizeof(std::uint64_t);

struct parts {
  std::uint64_t id;
  std::string_view header;
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
  p.header = body.substr(prefix, hlen);
  p.payload = body.substr(prefix + hlen);
  p.payload_size = total - prefix - hlen;
  return p;
}
parts split(std::string_view body) { return split(body, body.size()); }

/// What a task's flags byte says.
enum task_flags : std::uint8_t { is_actor = 1, is_named = 2, is_spilled = 4, retries_exceptions = 8 };

}  // namespace

std::string encode_task(const remote_task& t) { return encode_task_head(t) + t.args; }

std::string encode_task_head(const remote_task& t) {
  header_writer w(t.id);
  std::uint8_t flags = 0;
  if (!t.actor.empty()) flags |= is_actor;
  if (!t.actor.empty() && !t.actor_name.empty()) flags |= is_named;
  if (t.spilled) flags |= is_spilled;
  if (t.retry_exceptions) flags |= retries_exceptions;
  w.put(flags);
  w.put(t.function);
  w.put(t.name);
  w.put(t.mode);
  w.put(t.num_returns);
  w.put(t.arg_count);
  w.put(t.num_cpus);
  w.put(t.num_gpus);
  w.put(t.resources);
  w.put(t.memory);
  w.put(static_cast<std::int32_t>(t.max_retries));
  w.put(t.timeout_ns);
  w.put(static_cast<std::int32_t>(t.max_calls));
  if (flags & is_actor) {
    w.put(t.actor);
    w.put(static_cast<std::int32_t>(t.max_restarts));
    w.put(static_cast<std::int32_t>(t.max_task_retries));
    w.put(static_cast<std::int32_t>(t.max_concurrency));
    if (flags & is_named) {
      w.put(t.actor_name);
      w.put(t.class_tag);
    }
  }
  w.put(t.objects);
  w.put(static_cast<std::uint32_t>(t.handles.size()));
  for (const auto& a : t.handles) put_handle(w, a);
  w.put(t.origin);
  w.put(t.node);
  w.put(t.object);
  return std::move(w).done();
}

namespace {
remote_task decode_task_header(const parts& p) {
  remote_task t;
  t.id = p.id;
  header_reader r(p.header, "task");
  const auto flags = r.get<std::uint8_t>();
  if (flags > (is_actor | is_named | is_spilled | retries_exceptions) || ((flags & is_named) && !(flags & is_actor)))
    r.fail("unknown flags");
  t.function = r.get<std::uint64_t>();
  t.name = r.text();
  t.mode = r.get<std::uint8_t>();
  t.num_returns = r.get<std::uint16_t>();
  t.arg_count = r.get<std::uint16_t>();
  t.num_cpus = r.get<double>();
  t.num_gpus = r.get<double>();
  t.resources = r.amounts();
  t.memory = r.get<std::uint64_t>();
  t.max_retries = r.get<std::int32_t>();
  t.retry_exceptions = flags & retries_exceptions;
  t.timeout_ns = r.get<std::uint64_t>();
  t.max_calls = r.get<std::int32_t>();
  if (flags & is_actor) {
    t.actor = r.text();
    if (t.actor.empty()) r.fail("an actor's call with no actor");
    t.max_restarts = r.get<std::int32_t>();
    t.max_task_retries = r.get<std::int32_t>();
    t.max_concurrency = r.get<std::int32_t>();
    if (flags & is_named) {
      t.actor_name = r.text();
      t.class_tag = r.get<std::uint64_t>();
    }
  }
  t.objects = r.texts();
  for (auto n = r.count(handle_bytes); n > 0; --n) read_handle(r, t.handles.emplace_back());
  t.origin = r.text();
  t.node = r.text();
  t.object = r.text();
  t.spilled = flags & is_spilled;
  r.end();
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
void put_error(header_writer& w, const remote_error& e) {
  w.put(e.kind);
  w.put(e.remote_type);
  w.put(e.message);
  w.put(e.function);
  w.put(e.chain);
  w.put(e.stack);
  w.put(e.pid);
  w.put(e.signal);
}
remote_error read_error(header_reader& r) {
  remote_error out;
  out.kind = r.get<std::uint8_t>();
  out.remote_type = r.text();
  out.message = r.text();
  out.function = r.text();
  out.chain = r.text();
  out.stack = r.text();
  out.pid = r.get<std::int32_t>();
  out.signal = r.get<std::int32_t>();
  return out;
}
}  // namespace

std::string encode_outcome_head(const task_outcome& o) {
  header_writer w(o.id);
  w.put(static_cast<std::uint8_t>(o.ok));
  w.put(o.node);
  if (o.ok) {
    w.put(static_cast<std::uint32_t>(o.values.size()));
    for (const auto& v : o.values) {
      w.put(v.tag);
      w.put(static_cast<std::uint64_t>(v.data().size()));
      w.put(v.inside);
      w.put(v.id);
      w.put(static_cast<std::uint8_t>(v.error.has_value()));
      if (v.error) put_error(w, *v.error);
    }
    w.put(static_cast<std::uint32_t>(o.handles.size()));
    for (const auto& h : o.handles) {
      put_handle(w, h);
      w.put(static_cast<std::uint8_t>((h.owned ? 1 : 0) | (h.hosted ? 2 : 0)));
    }
    w.put(o.lender);
  } else {
    put_error(w, o.error);
  }
  return std::move(w).done();
}

namespace {
/// The outcome in `p`; its values' sizes are checked against the payload's
/// whole length, and each is copied out when `take` says so.
/// Values numbered in `outside` (in order) have no bytes in the payload: they landed outside it.
template <class Take>
task_outcome read_outcome(const parts& p, Take&& take, std::span<const std::uint32_t> outside = {}) {
  task_outcome o;
  o.id = p.id;
  header_reader r(p.header, "outcome");
  o.ok = r.flag();
  o.node = r.text();
  if (o.ok) {
    std::uint64_t at = 0;
    // (each value's fields take at least 25 bytes: tag, size, two counts, a flag)
    const auto n = r.count(2 * sizeof(std::uint64_t) + 2 * sizeof(std::uint32_t) + 1);
    std::size_t next_outside = 0;
    for (std::uint32_t i = 0; i < n; ++i) {
      remote_value& v = o.values.emplace_back();
      v.tag = r.get<std::uint64_t>();
      const auto size = r.get<std::uint64_t>();
      if (next_outside < outside.size() && outside[next_outside] == i) v.landed = static_cast<std::uint32_t>(next_outside++);
      else if (size > p.payload_size - at) throw wire_error("manta bridge: an outcome's values run past its end");
      v.inside = r.texts();
      v.id = r.text();
      auto id_text = [](const std::string& t) {
        return t.size() == 32 && t.find_first_not_of("0123456789abcdef") == std::string::npos;
      };
      if ((!v.id.empty() && !id_text(v.id)) || !std::all_of(v.inside.begin(), v.inside.end(), id_text))
        throw wire_error("manta bridge: an outcome names an object id that is not 32 hex digits");
      if (r.flag()) v.error = read_error(r);
      if (v.landed) continue;
      take(v, at, size, i + 1 == n);
      at += size;
    }
    if (at != p.payload_size) throw wire_error("manta bridge: an outcome with bytes past its values");
    if (next_outside != outside.size()) throw wire_error("manta bridge: an outcome's landed values are not its own");
    for (auto k = r.count(handle_bytes + 1); k > 0; --k) {
      returned_handle& h = o.handles.emplace_back();
      read_handle(r, h);
      const auto how = r.get<std::uint8_t>();
      if (how > 3 || how == 2) r.fail("an actor handle handed over with unknown flags");  // (hosted: owned too)
      h.owned = how & 1;
      h.hosted = how & 2;
    }
    o.lender = r.text();
  } else {
    o.error = read_error(r);
  }
  r.end();
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

task_outcome decode_outcome(std::string&& body, std::span<const std::uint32_t> landed) {
  parts p = split(body);
  const std::size_t payload_at = body.size() - p.payload.size();
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;  // each value's place in the payload
  task_outcome o = read_outcome(
      p, [&](remote_value&, std::uint64_t at, std::uint64_t size, bool) { spans.emplace_back(at, size); }, landed);
  if (o.ok && !spans.empty()) {
    // A gigabyte of results is not copied on the link's thread (which must keep its heartbeats going).
    o.frame = std::make_shared<const std::string>(std::move(body));
    const std::string_view all(*o.frame);
    auto span = spans.begin();
    for (remote_value& v : o.values)
      if (!v.landed) v.borrowed = all.substr(payload_at + span->first, span->second), ++span;
  }
  return o;
}

outcome_layout layout_of_outcome(std::string_view start, std::uint64_t total) {
  parts p = split(start, total);
  outcome_layout l;
  l.head = start.size() - p.payload.size();
  read_outcome(p, [&](remote_value&, std::uint64_t, std::uint64_t size, bool) { l.sizes.push_back(size); });
  return l;
}

task_outcome decode_outcome_head(std::string_view start, std::uint64_t total) {
  parts p = split(start, total);
  task_outcome o = read_outcome(p, [](remote_value&, std::uint64_t, std::uint64_t, bool) {});
  o.values.clear();
  return o;
}

std::string encode_cancel(std::uint64_t id) { return std::string(reinterpret_cast<const char*>(&id), sizeof id); }

std::uint64_t decode_cancel(std::string_view body) {
  if (body.size() != sizeof(std::uint64_t)) throw wire_error("manta bridge: a malformed cancel_task");
  return peek_id(body);
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

namespace {
/// The header of a small frame's body (no payload: nothing is allowed past it).
header_reader small_header(std::string_view body, const char* what) {
  const parts p = split(body);
  if (!p.payload.empty()) throw wire_error(std::string("manta bridge: a malformed ") + what + ": bytes past its header");
  return header_reader(p.header, what);
}
}  // namespace

std::string encode_actor_end(const actor_end& e) {
  header_writer w(0);
  w.put(e.actor);
  w.put(static_cast<std::uint8_t>(e.kill));
  w.put(e.why);
  return std::move(w).done();
}

actor_end decode_actor_end(std::string_view body) {
  header_reader r = small_header(body, "actor_end");
  actor_end e;
  e.actor = r.text();
  e.kill = r.flag();
  e.why = r.text();
  r.end();
  return e;
}

std::string encode_actor_lookup(const actor_lookup& l) {
  header_writer w(l.request);
  w.put(l.name);
  w.put(l.key);
  w.put(l.class_tag);
  w.put(l.why);
  return std::move(w).done();
}

actor_lookup decode_actor_lookup(std::string_view body) {
  header_reader r = small_header(body, "actor lookup");
  actor_lookup l;
  l.request = peek_id(body);
  l.name = r.text();
  l.key = r.text();
  l.class_tag = r.get<std::uint64_t>();
  l.why = r.text();
  r.end();
  return l;
}

std::string encode_output(const remote_output& o) {
  header_writer w(0);
  w.put(o.driver);
  w.put(o.node);
  w.put(o.pid);
  w.put(static_cast<std::uint8_t>(o.err));
  return std::move(w).done() + o.lines;
}

remote_output decode_output(std::string_view body) {
  const parts p = split(body);
  header_reader r(p.header, "output frame");
  remote_output o;
  o.driver = r.text();
  o.node = r.text();
  o.pid = r.get<std::int32_t>();
  o.err = r.flag();
  r.end();
  o.lines.assign(p.payload);
  return o;
}

std::string encode_object_note(const object_note& n) {
  header_writer w(0);
  w.put(n.object);
  w.put(n.node);
  w.put(n.why);
  w.put(static_cast<std::uint8_t>(n.error.has_value()));
  if (n.error) {
    put_error(w, *n.error);
    w.put(static_cast<std::uint8_t>(n.failed));
  }
  return std::move(w).done();
}

object_note decode_object_note(std::string_view body) {
  header_reader r = small_header(body, "object note");
  object_note n;
  n.object = r.text();
  n.node = r.text();
  n.why = r.text();
  if (r.flag()) {
    n.error = read_error(r);
    n.failed = r.flag();
  }
  r.end();
  return n;
}

}  // namespace manta::bridge

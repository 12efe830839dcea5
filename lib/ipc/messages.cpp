// ipc/messages.cpp: the encodings of every message, writer and reader together.
#include "ipc/messages.hpp"

namespace manta::ipc {

// ---- shared encodings

void write_location(frame_writer& w, const value_location& v) {
  w.align();
  w.put(v.type_tag);
  w.put(v.size);
  w.put(v.offset);
  if (v.offset == no_offset) {
    w.bytes(v.inline_data, v.size);
    w.align();
  }
}

value_location read_location(frame_reader& r) {
  value_location v;
  r.align();
  v.type_tag = r.get<std::uint64_t>();
  v.size = r.get<std::uint64_t>();
  v.offset = r.get<std::uint64_t>();
  if (v.offset == no_offset) {
    v.inline_data = r.bytes(v.size);
    r.align();
  }
  return v;
}

void write_error(frame_writer& w, const error_info& e) {
  w.put(static_cast<std::uint8_t>(e.kind));
  w.put(e.pid);
  w.put(e.signal);
  w.string(e.remote_type);
  w.string(e.message);
  w.string(e.function);
  w.string(e.chain);
  w.string(e.stack);
}

error_info read_error(frame_reader& r) {
  error_info e;
  auto kind = r.get<std::uint8_t>();
  if (kind > last_error_kind) throw protocol_error("manta: bad error kind");
  e.kind = static_cast<error_kind>(kind);
  e.pid = r.get<std::int32_t>();
  e.signal = r.get<std::int32_t>();
  e.remote_type = r.string();
  e.message = r.string();
  e.function = r.string();
  e.chain = r.string();
  e.stack = r.string();
  return e;
}

void write_ids(frame_writer& w, std::span<const object_id> ids) {
  w.put(static_cast<std::uint32_t>(ids.size()));
  w.align();
  w.bytes(ids.data(), ids.size_bytes());
}

std::span<const object_id> read_ids(frame_reader& r) {
  auto n = r.get<std::uint32_t>();
  r.align();
  if (n > r.remaining() / sizeof(object_id)) throw protocol_error("manta: a count larger than its frame");
  auto* p = reinterpret_cast<const object_id*>(r.bytes(n * sizeof(object_id)));
  return {p, n};
}

namespace {
void write_id_list(frame_writer& w, const id_list& l) {
  w.put(l.offset);
  if (l.offset == no_offset) write_ids(w, l.ids);
  else w.put(l.count);
}

id_list read_id_list(frame_reader& r) {
  id_list l;
  l.offset = r.get<std::uint64_t>();
  if (l.offset == no_offset) {
    l.ids = read_ids(r);
    l.count = l.ids.size();
  } else {
    l.count = r.get<std::uint64_t>();  // checked against its extent by the receiver
  }
  return l;
}

detail::call_mode read_mode(frame_reader& r) {
  auto m = r.get<std::uint8_t>();
  if (m > static_cast<std::uint8_t>(detail::call_mode::method)) throw protocol_error("manta: bad call mode");
  return static_cast<detail::call_mode>(m);
}
}  // namespace

void write_options(frame_writer& w, const detail::task_options& o) {
  w.put(o.num_cpus);
  w.put(o.num_gpus);
  w.put(static_cast<std::int32_t>(o.max_retries));
  w.put(static_cast<std::uint8_t>(o.retry_exceptions));
  w.put(static_cast<std::int32_t>(o.max_restarts));
  w.put(static_cast<std::int32_t>(o.max_task_retries));
  w.put(static_cast<std::int32_t>(o.max_concurrency));
  w.string(o.name);
  w.put(o.timeout_ns);
  w.put(static_cast<std::int32_t>(o.max_calls));
  w.put(o.memory);
  w.put(static_cast<std::uint32_t>(o.resources.size()));
  for (const auto& [name, amount] : o.resources) {
    w.string(name);
    w.put(amount);
  }
}

detail::task_options read_options(frame_reader& r) {
  detail::task_options o;
  o.num_cpus = r.get<double>();
  o.num_gpus = r.get<double>();
  o.max_retries = r.get<std::int32_t>();
  o.retry_exceptions = r.get<std::uint8_t>() != 0;
  o.max_restarts = r.get<std::int32_t>();
  o.max_task_retries = r.get<std::int32_t>();
  o.max_concurrency = r.get<std::int32_t>();
  o.name = r.string();
  o.timeout_ns = r.get<std::uint64_t>();
  o.max_calls = r.get<std::int32_t>();
  o.memory = r.get<std::uint64_t>();
  // Each entry is at least a length and an amount.
  auto n = r.count(sizeof(std::uint32_t) + sizeof(double));
  for (std::size_t i = 0; i < n; ++i) {
    std::string name = r.string();
    o.resources[name] = r.get<double>();
  }
  return o;
}

// ---- driver -> worker

void run_task::write(frame_writer& w) const {
  w.put(static_cast<std::uint8_t>(ahead));  // first: a process sees it without reading the rest
  w.put(ahead_seq);
  w.put(key);
  w.put(function);
  w.put(static_cast<std::uint8_t>(mode));
  w.put(concurrency);
  w.string(name);
  write_ids(w, returns);
  w.put(grant_offset);
  w.put(grant_size);
  w.put(static_cast<std::uint32_t>(gpus.size()));
  w.bytes(gpus.data(), gpus.size_bytes());
  w.put(static_cast<std::uint32_t>(args.size()));
  for (const auto& a : args) write_location(w, a);
}

run_task run_task::read(frame_reader& r, std::vector<value_location>& args_storage) {
  run_task m;
  m.ahead = r.get<std::uint8_t>() != 0;
  m.ahead_seq = r.get<std::uint64_t>();
  m.key = r.get<std::uint64_t>();
  m.function = r.get<std::uint64_t>();
  m.mode = read_mode(r);
  m.concurrency = r.get<std::uint16_t>();
  m.name = r.string_view();
  m.returns = read_ids(r);
  m.grant_offset = r.get<std::uint64_t>();
  m.grant_size = r.get<std::uint64_t>();
  auto ngpus = r.count(sizeof(std::int32_t));
  m.gpus = {reinterpret_cast<const std::int32_t*>(r.bytes(ngpus * sizeof(std::int32_t))), ngpus};
  auto nargs = r.count(3 * sizeof(std::uint64_t));  // each location is at least 24 bytes
  args_storage.clear();
  args_storage.reserve(nargs);
  for (std::size_t i = 0; i < nargs; ++i) args_storage.push_back(read_location(r));
  m.args = args_storage;
  return m;
}

void object_ready::write(frame_writer& w) const {
  w.put(id);
  w.put(static_cast<std::uint8_t>(ok));
  if (ok) write_location(w, location);
  else write_error(w, error);
}

object_ready object_ready::read(frame_reader& r) {
  object_ready m;
  m.id = r.get<object_id>();
  m.ok = r.get<std::uint8_t>() != 0;
  if (m.ok) m.location = read_location(r);
  else m.error = read_error(r);
  return m;
}

void alloc_reply::write(frame_writer& w) const {
  w.put(request);
  w.put(offset);
  w.string(error);
}

alloc_reply alloc_reply::read(frame_reader& r) {
  alloc_reply m;
  m.request = r.get<std::uint64_t>();
  m.offset = r.get<std::uint64_t>();
  m.error = r.string_view();
  return m;
}

void actor_reply::write(frame_writer& w) const {
  w.put(request);
  w.put(id);
  w.string(error);
}

actor_reply actor_reply::read(frame_reader& r) {
  actor_reply m;
  m.request = r.get<std::uint64_t>();
  m.id = r.get<object_id>();
  m.error = r.string_view();
  return m;
}

void resources_reply::write(frame_writer& w) const {
  w.put(request);
  w.put(static_cast<std::uint32_t>(amounts.size()));
  for (const auto& [name, amount] : amounts) {
    w.string(name);
    w.put(amount);
  }
}

resources_reply resources_reply::read(frame_reader& r) {
  resources_reply m;
  m.request = r.get<std::uint64_t>();
  auto n = r.count(sizeof(std::uint32_t) + sizeof(double));
  for (std::size_t i = 0; i < n; ++i) {
    std::string name = r.string();
    m.amounts[name] = r.get<double>();
  }
  return m;
}

void nodes_reply::write(frame_writer& w) const {
  w.put(request);
  w.put(static_cast<std::uint32_t>(nodes.size()));
  for (const auto& n : nodes) {
    w.string(n.id);
    w.string(n.address);
    w.put(static_cast<std::uint8_t>(n.alive));
    w.put(static_cast<std::uint32_t>(n.resources.size()));
    for (const auto& [name, amount] : n.resources) {
      w.string(name);
      w.put(amount);
    }
  }
}

nodes_reply nodes_reply::read(frame_reader& r) {
  nodes_reply m;
  m.request = r.get<std::uint64_t>();
  auto n = r.count(3 * sizeof(std::uint32_t) + 1);
  for (std::size_t i = 0; i < n; ++i) {
    node row;
    row.id = r.string();
    row.address = r.string();
    row.alive = r.get<std::uint8_t>() != 0;
    auto k = r.count(sizeof(std::uint32_t) + sizeof(double));
    for (std::size_t j = 0; j < k; ++j) {
      std::string name = r.string();
      row.resources[name] = r.get<double>();
    }
    m.nodes.push_back(std::move(row));
  }
  return m;
}

// ---- worker -> driver

void task_done::write(frame_writer& w) const {
  w.put(key);
  w.put(static_cast<std::uint8_t>(ok));
  w.put(static_cast<std::uint8_t>(grant_used));
  w.put(ns);
  w.put(started_ns);
  w.put(thread);
  if (!ok) {
    write_error(w, error);
    return;
  }
  w.put(static_cast<std::uint32_t>(results.size()));
  for (const auto& res : results) {
    write_id_list(w, res.contained);
    write_location(w, res.location);
  }
}

task_done task_done::read(frame_reader& r) {
  task_done m;
  m.key = r.get<std::uint64_t>();
  m.ok = r.get<std::uint8_t>() != 0;
  m.grant_used = r.get<std::uint8_t>() != 0;
  m.ns = r.get<std::uint64_t>();
  m.started_ns = r.get<std::uint64_t>();
  m.thread = r.get<std::int32_t>();
  if (!m.ok) {
    m.error = read_error(r);
    return m;
  }
  auto n = r.count(4 * sizeof(std::uint64_t));  // each result is at least 32 bytes
  for (std::size_t i = 0; i < n; ++i) {
    result res;
    res.contained = read_id_list(r);
    res.location = read_location(r);
    m.results.push_back(std::move(res));
  }
  return m;
}

void submit::write(frame_writer& w) const {
  w.put(function);
  w.put(parent);
  w.put(static_cast<std::uint8_t>(mode));
  w.put(arg_count);
  write_options(w, options);
  w.put(actor);
  write_ids(w, returns);
  write_ids(w, deps);
  write_ids(w, contained);
  w.string(args);
}

submit submit::read(frame_reader& r) {
  submit m;
  m.function = r.get<std::uint64_t>();
  m.parent = r.get<std::uint64_t>();
  m.mode = read_mode(r);
  m.arg_count = r.get<std::uint16_t>();
  m.options = read_options(r);
  m.actor = r.get<object_id>();
  m.returns = read_ids(r);
  m.deps = read_ids(r);
  m.contained = read_ids(r);
  m.args = r.string_view();
  return m;
}

void put::write(frame_writer& w) const {
  w.put(id);
  write_id_list(w, contained);
  write_location(w, location);
}

put put::read(frame_reader& r) {
  put m;
  m.id = r.get<object_id>();
  m.contained = read_id_list(r);
  m.location = read_location(r);
  return m;
}

template <msg Type>
void ids_message<Type>::write(frame_writer& w) const {
  write_ids(w, ids);
}

template <msg Type>
ids_message<Type> ids_message<Type>::read(frame_reader& r) {
  return {read_ids(r)};
}

template struct ids_message<msg::add_ref>;
template struct ids_message<msg::release>;
template struct ids_message<msg::subscribe>;
template struct ids_message<msg::kill_actor>;
template struct ids_message<msg::cancel>;

void alloc_request::write(frame_writer& w) const {
  w.put(request);
  w.put(size);
}

alloc_request alloc_request::read(frame_reader& r) {
  alloc_request m;
  m.request = r.get<std::uint64_t>();
  m.size = r.get<std::uint64_t>();
  return m;
}

void block::write(frame_writer& w) const {
  w.put(key);
  w.put(needed);
  w.put(wait);
  write_ids(w, ids);
}

block block::read(frame_reader& r) {
  block m;
  m.key = r.get<std::uint64_t>();
  m.needed = r.get<std::uint32_t>();
  m.wait = r.get<std::uint32_t>();
  m.ids = read_ids(r);
  return m;
}

void unblock::write(frame_writer& w) const {
  w.put(key);
  w.put(wait);
}

unblock unblock::read(frame_reader& r) {
  unblock m;
  m.key = r.get<std::uint64_t>();
  m.wait = r.get<std::uint32_t>();
  return m;
}

void free_alloc::write(frame_writer& w) const { w.put(offset); }

free_alloc free_alloc::read(frame_reader& r) { return {.offset = r.get<std::uint64_t>()}; }

void find_actor::write(frame_writer& w) const {
  w.put(request);
  w.put(class_tag);
  w.string(name);
}

find_actor find_actor::read(frame_reader& r) {
  find_actor m;
  m.request = r.get<std::uint64_t>();
  m.class_tag = r.get<std::uint64_t>();
  m.name = r.string_view();
  return m;
}

void resources_request::write(frame_writer& w) const {
  w.put(request);
  w.put(static_cast<std::uint8_t>(available));
}

resources_request resources_request::read(frame_reader& r) {
  resources_request m;
  m.request = r.get<std::uint64_t>();
  m.available = r.get<std::uint8_t>() != 0;
  return m;
}

}  // namespace manta::ipc

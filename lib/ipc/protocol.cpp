// ipc/protocol.cpp: encodings of errors and value locations.
#include "ipc/protocol.hpp"

#include <manta/errors.hpp>

namespace manta::ipc {

void write_error(frame_writer& w, const error_info& e) {
  w.put(static_cast<std::uint8_t>(e.kind));
  w.put(e.pid);
  w.put(e.signal);
  w.string(e.remote_type);
  w.string(e.message);
  w.string(e.function);
  w.string(e.chain);
}

error_info read_error(frame_reader& r) {
  error_info e;
  auto kind = r.get<std::uint8_t>();
  if (kind > static_cast<std::uint8_t>(error_kind::cancelled)) throw protocol_error("manta: bad error kind");
  e.kind = static_cast<error_kind>(kind);
  e.pid = r.get<std::int32_t>();
  e.signal = r.get<std::int32_t>();
  e.remote_type = r.string();
  e.message = r.string();
  e.function = r.string();
  e.chain = r.string();
  return e;
}

void throw_error(const error_info& e) {
  switch (e.kind) {
    case error_kind::task_exception:
      throw task_error(e.remote_type, e.message, e.function, e.pid, e.chain);
    case error_kind::worker_crashed:
      throw worker_crashed_error(e.message + (e.chain.empty() ? "" : " (via " + e.chain + ")"),
                                 e.function, e.pid, e.signal);
    case error_kind::actor_died:
      throw actor_died_error(e.message);
    case error_kind::object_store_full:
      throw object_store_full(e.message);
    case error_kind::usage:
      throw usage_error(e.message);
    case error_kind::cancelled:
      throw task_cancelled_error(e.message + (e.chain.empty() ? "" : " (via " + e.chain + ")"));
  }
  throw error(e.message);
}

error_info chained(const error_info& cause, const std::string& dependent) {
  error_info e = cause;
  e.chain = cause.chain.empty() ? dependent : dependent + " <- " + cause.chain;
  return e;
}

void write_location(frame_writer& w, std::uint64_t tag, std::uint64_t size, std::uint64_t offset,
                    const void* inline_bytes) {
  w.align();
  w.put(tag);
  w.put(size);
  w.put(offset);
  if (offset == no_offset) {
    w.bytes(inline_bytes, size);
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

}  // namespace manta::ipc

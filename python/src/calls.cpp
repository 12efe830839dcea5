// python/src/calls.cpp: building a Python call's task request.
#include "calls.hpp"

#include <cstring>

#include <manta/errors.hpp>

#include "values.hpp"

namespace manta::python {
namespace {

template <class T>
void append(std::string& s, const T& v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <class T>
T read(const std::byte*& at, const std::byte* end) {
  if (static_cast<std::size_t>(end - at) < sizeof(T)) throw usage_error("manta: a malformed Python call header");
  T v;
  std::memcpy(&v, at, sizeof v);
  at += sizeof v;
  return v;
}

}  // namespace

call_header read_header(const detail::arg_view& a) {
  if (a.type_tag != call_tag) throw usage_error("manta: a Python call without its header");
  const std::byte* at = a.data;
  const std::byte* end = a.data + a.size;
  call_header h;
  h.function.hi = read<std::uint64_t>(at, end);
  h.function.lo = read<std::uint64_t>(at, end);
  const auto count = read<std::uint32_t>(at, end);
  const auto method_size = read<std::uint32_t>(at, end);
  if (count > a.size / 16) throw usage_error("manta: a malformed Python call header");
  h.arg_ids.resize(count);
  for (auto& id : h.arg_ids) {
    id.hi = read<std::uint64_t>(at, end);
    id.lo = read<std::uint64_t>(at, end);
  }
  if (static_cast<std::size_t>(end - at) < method_size) throw usage_error("manta: a malformed Python call header");
  h.method.assign(reinterpret_cast<const char*>(at), method_size);
  return h;
}

std::vector<detail::ref_node*> submit_call(const detail::function_info& callable, detail::call_mode mode,
                                           const object_ref* function, const object_ref* actor,
                                           const std::string& method, py::handle payload, py::handle refs,
                                           const detail::task_options& options, int num_returns) {
  if (num_returns < 1 || num_returns > 65535) throw py::value_error("manta: num_returns must be 1..65535");
  detail::task_request request;
  request.function = &callable;
  request.mode = mode;
  request.options = options;
  request.num_returns = static_cast<std::uint16_t>(num_returns);

  // The payload first: whether it goes inline or as a stored object decides
  // the header, which must be argument 0.
  encoded_object encoded(payload);
  detail::counted_ref stored;  // the payload, when it holds large buffers
  if (encoded.has_buffers()) stored = detail::counted_ref(put_encoded(encoded));

  std::vector<const object_ref*> arg_refs;
  if (!refs.is_none())
    for (py::handle r : refs) arg_refs.push_back(&r.cast<const object_ref&>());

  std::string header;
  const object_id fn = function ? function->id() : object_id{};
  append(header, fn.hi);
  append(header, fn.lo);
  append(header, static_cast<std::uint32_t>(1 + arg_refs.size()));
  append(header, static_cast<std::uint32_t>(method.size()));
  append(header, stored.id().hi);
  append(header, stored.id().lo);
  for (const object_ref* r : arg_refs) {
    if (!r->node()) throw py::value_error("manta: an empty ObjectRef passed as an argument");
    append(header, r->id().hi);
    append(header, r->id().lo);
  }
  header += method;

  detail::arg_writer w(request);
  detail::encoded_value h;
  h.type_tag = call_tag;
  h.borrowed = header.data();
  h.size = header.size();
  w.value(h);
  if (stored) {
    w.ref(stored.node(), flat_tag);
  } else {
    const detail::encoded_value v = encoded.inline_value();
    if (v.size < large_pickle_bytes) {
      w.value(v);
    } else {
      py::gil_scoped_release nogil;  // written into the arena: may wait for room
      w.value(v);
    }
  }
  for (const object_ref* r : arg_refs) w.ref(r->node(), pickle_tag);
  // The function's pickle lives while the call does (a lambda's RemoteFunction may go first).
  if (function) request.contained.push_back(fn);
  if (actor) {
    if (!actor->node()) throw py::value_error("manta: a method called on an empty actor handle");
    detail::acquire(actor->node());
    request.actor = actor->node();
  }
  std::vector<detail::ref_node*> out(static_cast<std::size_t>(num_returns));
  {
    // Released: local mode runs the call here, and another thread's call may
    // hold the runtime while it waits for the GIL.
    py::gil_scoped_release nogil;
    detail::submit(std::move(request), out.data());
  }
  return out;
}

}  // namespace manta::python

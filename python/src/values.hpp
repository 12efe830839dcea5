// python/src/values.hpp: a Python value as the object store holds it. Values
// are pickled (protocol 5); every out-of-band buffer of 64 KiB or more (numpy
// arrays, bytearrays, memoryviews) is written once into the arena after the
// pickle, and read back as a read-only view of the arena that keeps its object
// pinned for as long as anything views it.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <manta/detail/core.hpp>

namespace manta::python {
namespace py = pybind11;

/// Type tags of the stored forms (C++ values have their type's tag).
inline constexpr std::uint64_t pickle_tag = 0x6d2e70792e706b31;  ///< a pickle, no buffers
inline constexpr std::uint64_t flat_tag = 0x6d2e70792e666c31;    ///< a pickle and its buffers
inline constexpr std::uint64_t call_tag = 0x6d2e70792e636c31;    ///< a call's header (calls.cpp)

/// Buffers smaller than this stay inside the pickle.
inline constexpr std::size_t out_of_band_bytes = 64 * 1024;
/// A pickle this large is stored with the GIL released: the store may wait
/// for room (spilling) meanwhile.
inline constexpr std::size_t large_pickle_bytes = 64 * 1024;

/// The Python functions of manta._serialization, looked up once at import.
struct python_side {
  py::object serialize;  ///< value -> (bytes, [PickleBuffer] or None)
  py::object dumps;      ///< pickle.dumps, for values of plain types
  py::object loads;      ///< pickle.loads
};
python_side& side();
void load_side();

/// A value pickled, its buffers held until written. Refs pickled inside it are
/// collected as `contained`. Needs the GIL, except `write_flat`.
class encoded_object {
 public:
  explicit encoded_object(py::handle value);
  ~encoded_object();
  encoded_object(const encoded_object&) = delete;
  encoded_object& operator=(const encoded_object&) = delete;

  bool has_buffers() const noexcept { return !buffers_.empty(); }
  /// The pickle alone (only without buffers), borrowed from this object.
  detail::encoded_value inline_value() const;
  /// Bytes of the flat form: header, pickle, buffers 64-byte aligned.
  std::size_t flat_size() const noexcept { return flat_size_; }
  /// Writes the flat form; needs no GIL (the buffers are held).
  void write_flat(std::byte* out) const noexcept;

  std::vector<object_id> contained;

 private:
  py::bytes pickle_;
  std::vector<Py_buffer> buffers_;
  std::vector<std::size_t> offsets_;
  std::size_t flat_size_ = 0;
};

/// Stores the value as an object; returns a node holding one count. Large
/// buffers are copied once, into an arena extent, with the GIL released.
detail::ref_node* put_encoded(const encoded_object& e);

/// The Python value of stored bytes. `pinned`, if not null, is a counted node
/// whose object this caller fetched (pinned): this takes it over, and lets it
/// go at once, or, when the value views the arena, once the last view is gone.
/// @throws py::type_error for a value a C++ program stored
py::object decode(const detail::object_data& data, detail::ref_node* pinned);

/// As decode, but buffers are copied out of the arena and `pinned` let go at
/// once: for values kept long (a worker's cached functions), which must not
/// pin their objects for as long.
py::object decode_copied(const detail::object_data& data, detail::ref_node* pinned);

/// Lets go of a node fetched and pinned by this caller (unpin, then release).
void drop_pinned(detail::ref_node* n) noexcept;

/// One pin of a fetched object, shared by every view of its bytes. A task's
/// argument is viewed first with no pin of its own (`node` null: the runtime
/// pins a task's inputs while it runs), and pinned only if a view outlives it.
struct pin_holder {
  explicit pin_holder(detail::ref_node* n, object_id i = {}) noexcept : node(n), id(i) {}
  pin_holder(const pin_holder&) = delete;
  pin_holder& operator=(const pin_holder&) = delete;
  ~pin_holder() { drop_pinned(node); }
  detail::ref_node* node;
  object_id id;
};

/// The views a task's stored arguments: read where the runtime put them, with
/// no request to the driver. `keep_escaped`, once the call's own references are
/// gone, pins the objects that something still views (an actor's field, a
/// global): their bytes stay valid after the task's end.
class argument_views {
 public:
  py::object decode(const detail::object_data& d, const object_id& id);
  void keep_escaped();

 private:
  std::vector<std::shared_ptr<pin_holder>> holders_;
};

/// Registers the view type (module.cpp).
void define_value_types(py::module_& m);

}  // namespace manta::python

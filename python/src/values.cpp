// python/src/values.cpp: pickled values in and out of the object store.
#include "values.hpp"

#include <cstring>
#include <memory>
#include <string>

#include <manta/errors.hpp>

namespace manta::python {
namespace {

python_side* the_side = nullptr;

constexpr std::uint32_t flat_magic = 0x3559504d;  // "MPY5"
constexpr std::size_t align = 64;

struct flat_header {
  std::uint32_t magic;
  std::uint32_t count;
  std::uint64_t pickle_offset;
  std::uint64_t pickle_size;
};
struct flat_entry {
  std::uint64_t offset;
  std::uint64_t size;
};

std::size_t aligned(std::size_t n) { return (n + align - 1) & ~(align - 1); }

/// A read-only window of the arena: what numpy arrays and memoryviews of a
/// stored value look through. Keeps the object pinned while it lives.
struct arena_view {
  std::shared_ptr<pin_holder> pin;
  const std::byte* data = nullptr;
  std::size_t size = 0;
};

bool plain(PyObject* o) noexcept {
  PyTypeObject* t = Py_TYPE(o);
  return o == Py_None || t == &PyLong_Type || t == &PyFloat_Type || t == &PyUnicode_Type || t == &PyBytes_Type ||
         t == &PyBool_Type;
}

/// Plain values, flat tuples or lists of them, and a call's (args, kwargs) of
/// them, hold no refs, buffers or code: the C pickler alone does them.
bool plain_value(PyObject* o) noexcept {
  if (plain(o)) return true;
  const bool tuple = PyTuple_CheckExact(o);
  if (!tuple && !PyList_CheckExact(o)) return false;
  const Py_ssize_t n = tuple ? PyTuple_GET_SIZE(o) : PyList_GET_SIZE(o);
  if (n > 64) return false;
  for (Py_ssize_t i = 0; i < n; ++i)
    if (!plain(tuple ? PyTuple_GET_ITEM(o, i) : PyList_GET_ITEM(o, i))) return false;
  return true;
}

bool plain_call(PyObject* o) noexcept {
  if (!PyTuple_CheckExact(o) || PyTuple_GET_SIZE(o) != 2) return false;
  PyObject* args = PyTuple_GET_ITEM(o, 0);
  PyObject* kwargs = PyTuple_GET_ITEM(o, 1);
  if (!PyTuple_CheckExact(args) || !plain_value(args)) return false;
  if (kwargs == Py_None) return true;
  if (!PyDict_CheckExact(kwargs) || PyDict_GET_SIZE(kwargs) > 64) return false;
  Py_ssize_t at = 0;
  PyObject *key, *value;
  while (PyDict_Next(kwargs, &at, &key, &value))
    if (!plain(value)) return false;
  return true;
}

}  // namespace

python_side& side() { return *the_side; }

void load_side() {
  auto* s = new python_side;  // lives as long as the interpreter: never freed
  py::module_ ser = py::module_::import("manta._serialization");
  s->serialize = ser.attr("serialize");
  s->dumps = py::module_::import("pickle").attr("dumps");
  s->loads = py::module_::import("pickle").attr("loads");
  the_side = s;
}

void drop_pinned(detail::ref_node* n) noexcept {
  if (!n) return;
  detail::unpin(n);
  detail::release(n);
}

encoded_object::encoded_object(py::handle value) {
  if (plain_call(value.ptr()) || plain_value(value.ptr())) {
    pickle_ = side().dumps(value, 5);
    return;
  }
  py::tuple out;
  {
    detail::ref_collector collect(contained);
    out = side().serialize(value);
  }
  pickle_ = out[0];
  py::handle buffers = out[1];
  if (!buffers.is_none()) {
    for (py::handle b : buffers) {
      Py_buffer view;
      if (PyObject_GetBuffer(b.ptr(), &view, PyBUF_SIMPLE) != 0) throw py::error_already_set();
      buffers_.push_back(view);
    }
  }
  if (buffers_.empty()) return;
  std::size_t at = aligned(sizeof(flat_header) + buffers_.size() * sizeof(flat_entry));
  at = aligned(at + static_cast<std::size_t>(PyBytes_GET_SIZE(pickle_.ptr())));
  for (const Py_buffer& v : buffers_) {
    offsets_.push_back(at);
    at = aligned(at + static_cast<std::size_t>(v.len));
  }
  flat_size_ = at;
}

encoded_object::~encoded_object() {
  for (Py_buffer& v : buffers_) PyBuffer_Release(&v);
}

detail::encoded_value encoded_object::inline_value() const {
  detail::encoded_value v;
  v.type_tag = pickle_tag;
  v.borrowed = PyBytes_AS_STRING(pickle_.ptr());
  v.size = static_cast<std::size_t>(PyBytes_GET_SIZE(pickle_.ptr()));
  v.contained = contained;
  return v;
}

void encoded_object::write_flat(std::byte* out) const noexcept {
  const std::size_t pickle_size = static_cast<std::size_t>(PyBytes_GET_SIZE(pickle_.ptr()));
  flat_header h{flat_magic, static_cast<std::uint32_t>(buffers_.size()),
                aligned(sizeof(flat_header) + buffers_.size() * sizeof(flat_entry)), pickle_size};
  std::memcpy(out, &h, sizeof h);
  for (std::size_t i = 0; i < buffers_.size(); ++i) {
    flat_entry e{offsets_[i], static_cast<std::uint64_t>(buffers_[i].len)};
    std::memcpy(out + sizeof h + i * sizeof e, &e, sizeof e);
  }
  std::memcpy(out + h.pickle_offset, PyBytes_AS_STRING(pickle_.ptr()), pickle_size);
  for (std::size_t i = 0; i < buffers_.size(); ++i)
    std::memcpy(out + offsets_[i], buffers_[i].buf, static_cast<std::size_t>(buffers_[i].len));
}

detail::ref_node* put_encoded(const encoded_object& e) {
  if (!e.has_buffers()) {
    const detail::encoded_value v = e.inline_value();
    if (v.size < large_pickle_bytes) return detail::put_value(v);
    py::gil_scoped_release nogil;  // a large one may wait for the arena (spilling)
    return detail::put_value(v);
  }
  if (!e.contained.empty()) {
    // put_extent cannot carry refs: a value holding both goes through a copy.
    detail::encoded_value v;
    v.type_tag = flat_tag;
    v.owned.resize(e.flat_size());
    {
      py::gil_scoped_release nogil;
      e.write_flat(reinterpret_cast<std::byte*>(v.owned.data()));
    }
    v.size = v.owned.size();
    v.contained = e.contained;
    py::gil_scoped_release nogil;
    return detail::put_value(v);
  }
  py::gil_scoped_release nogil;
  detail::extent x = detail::allocate_extent(e.flat_size());
  e.write_flat(x.data);
  try {
    return detail::put_extent(flat_tag, x, e.flat_size());
  } catch (...) {
    detail::free_extent(x);
    throw;
  }
}

namespace {

/// The value of a stored pickle and its buffers, viewed through `pin`, or
/// copied when `pin` is null.
py::object decode_flat(const detail::object_data& d, const std::shared_ptr<pin_holder>& pin) {
  if (d.type_tag != flat_tag)
    throw py::type_error("manta: the object holds a value stored by C++ (" + detail::type_name_of_tag(d.type_tag) +
                         "), not a Python one");
  flat_header h;
  if (d.size < sizeof h) throw py::value_error("manta: a stored Python value is malformed");
  std::memcpy(&h, d.data, sizeof h);
  const std::size_t table_end = sizeof h + std::size_t{h.count} * sizeof(flat_entry);
  if (h.magic != flat_magic || table_end > d.size || h.pickle_offset > d.size ||
      h.pickle_size > d.size - h.pickle_offset)
    throw py::value_error("manta: a stored Python value is malformed");
  py::list buffers;
  for (std::uint32_t i = 0; i < h.count; ++i) {
    flat_entry e;
    std::memcpy(&e, d.data + sizeof h + i * sizeof e, sizeof e);
    if (e.offset > d.size || e.size > d.size - e.offset)
      throw py::value_error("manta: a stored Python value is malformed");
    if (pin)
      buffers.append(py::cast(arena_view{pin, d.data + e.offset, e.size}));
    else
      buffers.append(py::bytearray(reinterpret_cast<const char*>(d.data + e.offset), e.size));
  }
  auto pickle = py::memoryview::from_memory(const_cast<std::byte*>(d.data + h.pickle_offset),
                                            static_cast<py::ssize_t>(h.pickle_size), true);
  return side().loads(pickle, py::arg("buffers") = buffers);
}

}  // namespace

py::object decode(const detail::object_data& d, detail::ref_node* pinned) {
  if (d.type_tag == pickle_tag) {
    py::object value;
    try {
      value = side().loads(py::memoryview::from_memory(const_cast<std::byte*>(d.data),
                                                       static_cast<py::ssize_t>(d.size), true));
    } catch (...) {
      drop_pinned(pinned);
      throw;
    }
    drop_pinned(pinned);
    return value;
  }
  return decode_flat(d, std::make_shared<pin_holder>(pinned));
}

py::object decode_copied(const detail::object_data& d, detail::ref_node* pinned) {
  if (d.type_tag == pickle_tag) return decode(d, pinned);
  py::object value;
  try {
    value = decode_flat(d, nullptr);
  } catch (...) {
    drop_pinned(pinned);
    throw;
  }
  drop_pinned(pinned);
  return value;
}

py::object argument_views::decode(const detail::object_data& d, const object_id& id) {
  if (d.type_tag != flat_tag || id.empty()) return python::decode(d, nullptr);
  auto pin = std::make_shared<pin_holder>(nullptr, id);
  py::object value = decode_flat(d, pin);
  holders_.push_back(std::move(pin));
  return value;
}

void argument_views::keep_escaped() {
  for (auto& pin : holders_) {
    if (pin.use_count() == 1) continue;  // nothing views it any more
    if (pin->node) continue;             // pinned by an earlier call of this (which then threw)
    // Still viewed: pinned for the views before the task's end lets its input go.
    detail::ref_node* n = detail::ref_from_id(pin->id);
    try {
      py::gil_scoped_release nogil;
      detail::fetch(n, detail::no_deadline);
    } catch (...) {
      detail::release(n);
      throw;
    }
    pin->node = n;
  }
  holders_.clear();
}

void define_value_types(py::module_& m) {
  py::class_<arena_view>(m, "ArenaView", py::buffer_protocol())
      .def_buffer([](arena_view& v) {
        return py::buffer_info(const_cast<std::byte*>(v.data), 1, py::format_descriptor<std::uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(v.size)}, {py::ssize_t{1}}, /*readonly=*/true);
      })
      .def("__len__", [](const arena_view& v) { return v.size; })
      .def_property_readonly("address", [](const arena_view& v) {
        return reinterpret_cast<std::uintptr_t>(v.data);
      });
}

}  // namespace manta::python

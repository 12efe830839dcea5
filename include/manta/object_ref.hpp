// object_ref.hpp: futures of values in the object store, and the calls that
// create and read them: put, get, get_view, wait.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include <manta/buffer.hpp>
#include <manta/detail/core.hpp>
#include <manta/detail/progress.hpp>
#include <manta/errors.hpp>
#include <manta/serialization.hpp>

namespace manta {

/// A copyable, serialisable future of a `T` stored in the object store. The object
/// lives while any process holds a copy. Default-constructed refs are empty.
/// Thread-safe to copy and destroy from any thread; valid across fork only inside
/// manta's own processes.
///
///     manta::object_ref<int> r = manta::task(square).remote(4);
///     int v = manta::get(r);
template <class T>
class object_ref : public detail::counted_ref {
 public:
  using value_type = T;
  using counted_ref::counted_ref;

  friend bool operator==(const object_ref& a, const object_ref& b) noexcept {
    return a.id() == b.id();
  }
};

template <class T>
inline constexpr bool is_object_ref_v = false;
template <class T>
inline constexpr bool is_object_ref_v<object_ref<T>> = true;

namespace detail {

inline void check_ref(const void* node) {
  if (!node) throw usage_error("manta: get/wait on an empty object_ref");
}

template <class T>
void check_tag(const object_data& d) {
  if (d.type_tag != type_tag<T>())
    throw usage_error("manta: object_ref<" + type_name_of_tag(type_tag<T>()) +
                      "> refers to an object stored as " + type_name_of_tag(d.type_tag));
}

/// Holds the pin `fetch` took, so the object stays in memory (not spilled) while
/// its bytes are read. Copies pin again.
class fetch_pin {
 public:
  fetch_pin() = default;
  explicit fetch_pin(ref_node* n) noexcept : n_(n) {}  // adopts fetch's pin
  fetch_pin(const fetch_pin& o) noexcept : n_(o.n_) {
    if (n_) repin(n_);
  }
  fetch_pin(fetch_pin&& o) noexcept : n_(std::exchange(o.n_, nullptr)) {}
  fetch_pin& operator=(fetch_pin o) noexcept {
    std::swap(n_, o.n_);
    return *this;
  }
  ~fetch_pin() {
    if (n_) unpin(n_);
  }

 private:
  ref_node* n_ = nullptr;
};

template <class T>
T fetch_value(detail::ref_node* n, deadline until) {
  check_ref(n);
  object_data d = fetch(n, until);
  fetch_pin pin(n);
  check_tag<T>(d);
  if constexpr (!std::is_void_v<T>) return decode<T>({d.data, d.size});
}

template <class T>
constexpr bool is_contiguous_raw_v = is_raw_v<T> && !std::is_arithmetic_v<T>;

/// Element type of contiguous raw data (char for anything else).
template <class T, class = void>
struct element_of {
  using type = char;
};
template <class T>
struct element_of<T, std::enable_if_t<is_contiguous_raw_v<T>>> {
  using type = std::remove_cvref_t<decltype(*std::declval<T&>().data())>;
};

}  // namespace detail

/// Store `value` once and return a ref to it. Large values are written once into
/// the shared-memory arena; workers read them in place.
/// @throws object_store_full if it cannot fit; usage_error without a runtime.
template <class T>
object_ref<std::remove_cvref_t<T>> put(const T& value) {
  using V = std::remove_cvref_t<T>;
  static_assert(!detail::is_buffer_v<V>, "manta: put a buffer with put(std::move(buffer))");
  return object_ref<V>(detail::put_value(detail::encode<V>(value)));
}

/// Seal a buffer as an object without copying it.
template <class E>
object_ref<std::vector<E>> put(buffer<E>&& b) {
  std::size_t bytes = b.size() * sizeof(E);
  detail::extent x = std::move(b).release();
  try {
    return object_ref<std::vector<E>>(
        detail::put_extent(detail::type_tag<std::vector<E>>(), x, bytes));
  } catch (...) {
    detail::free_extent(x);
    throw;
  }
}

/// Block until the object is ready and return a copy of it.
/// @throws task_error if the producing task threw; worker_crashed_error; usage_error.
template <class T>
T get(const object_ref<T>& ref) {
  return detail::fetch_value<T>(ref.node(), detail::no_deadline);
}

/// As `get(ref)`, giving up after `timeout` with timeout_error.
template <class T, class Rep, class Period>
T get(const object_ref<T>& ref, std::chrono::duration<Rep, Period> timeout) {
  return detail::fetch_value<T>(ref.node(), detail::deadline_after(timeout));
}

/// Block until every ref is ready; values in the order of `refs`.
template <class T>
auto get(const std::vector<object_ref<T>>& refs) {
  detail::progress_bar bar(refs.size(), "get");
  if constexpr (std::is_void_v<T>) {
    for (const auto& r : refs) {
      get(r);
      bar.advance();
    }
  } else {
    std::vector<T> out;
    out.reserve(refs.size());
    for (const auto& r : refs) {
      out.push_back(get(r));
      bar.advance();
    }
    return out;
  }
}

/// As `get(refs)`, with one `timeout` for all of them.
template <class T, class Rep, class Period>
auto get(const std::vector<object_ref<T>>& refs, std::chrono::duration<Rep, Period> timeout) {
  auto until = detail::deadline_after(timeout);
  detail::progress_bar bar(refs.size(), "get");
  if constexpr (std::is_void_v<T>) {
    for (const auto& r : refs) {
      detail::fetch_value<T>(r.node(), until);
      bar.advance();
    }
  } else {
    std::vector<T> out;
    out.reserve(refs.size());
    for (const auto& r : refs) {
      out.push_back(detail::fetch_value<T>(r.node(), until));
      bar.advance();
    }
    return out;
  }
}

/// Read-only, zero-copy access to a sealed object; pins it while alive.
/// For std::vector<E> / std::array<E, N>: data(), size(), span(), begin(), end(), [i].
/// For std::string: str(). For other types: operator* and -> (decoded once).
template <class T>
class view {
 public:
  view() = default;
  view(object_ref<T> ref, detail::fetch_pin pin, detail::object_data d)
      : ref_(std::move(ref)), pin_(std::move(pin)), data_(d) {
    if constexpr (detail::is_contiguous_raw_v<T>) {
      using E = element_type;
      if (reinterpret_cast<std::uintptr_t>(data_.data) % alignof(E) != 0) {
        aligned_.resize(data_.size / sizeof(E));
        std::memcpy(aligned_.data(), data_.data, data_.size);
        data_.data = reinterpret_cast<const std::byte*>(aligned_.data());
      }
    } else {
      value_.emplace(detail::decode<T>({data_.data, data_.size}));
    }
  }

  using element_type = typename detail::element_of<T>::type;

  view(const view& o) : ref_(o.ref_), pin_(o.pin_), data_(o.data_), aligned_(o.aligned_), value_(o.value_) {
    if (!aligned_.empty()) data_.data = reinterpret_cast<const std::byte*>(aligned_.data());
  }
  view(view&&) noexcept = default;
  /// The view it held goes with the old value: its pin before its ref, so the
  /// pin never outlives the object it pins.
  view& operator=(view o) noexcept {
    swap(o);
    return *this;
  }
  void swap(view& o) noexcept {
    std::swap(ref_, o.ref_);
    std::swap(pin_, o.pin_);
    std::swap(data_, o.data_);
    aligned_.swap(o.aligned_);
    value_.swap(o.value_);
  }

  const element_type* data() const noexcept
    requires detail::is_contiguous_raw_v<T>
  {
    return reinterpret_cast<const element_type*>(data_.data);
  }
  std::size_t size() const noexcept
    requires detail::is_contiguous_raw_v<T>
  {
    return data_.size / sizeof(element_type);
  }
  std::span<const element_type> span() const noexcept
    requires detail::is_contiguous_raw_v<T>
  {
    return {data(), size()};
  }
  const element_type* begin() const noexcept
    requires detail::is_contiguous_raw_v<T>
  {
    return data();
  }
  const element_type* end() const noexcept
    requires detail::is_contiguous_raw_v<T>
  {
    return data() + size();
  }
  const element_type& operator[](std::size_t i) const noexcept
    requires detail::is_contiguous_raw_v<T>
  {
    return data()[i];
  }
  std::string_view str() const noexcept
    requires std::is_same_v<T, std::string>
  {
    return {reinterpret_cast<const char*>(data_.data), data_.size};
  }
  const T& operator*() const noexcept
    requires(!detail::is_contiguous_raw_v<T>)
  {
    return *value_;
  }
  const T* operator->() const noexcept
    requires(!detail::is_contiguous_raw_v<T>)
  {
    return &*value_;
  }
  /// The ref this view pins.
  const object_ref<T>& ref() const noexcept { return ref_; }

 private:
  object_ref<T> ref_;
  detail::fetch_pin pin_;  // after ref_: unpinned before the ref goes
  detail::object_data data_;
  std::vector<element_type> aligned_;  // only when the stored bytes are misaligned
  std::optional<std::conditional_t<detail::is_contiguous_raw_v<T>, char, T>> value_;
};

/// Block until ready and return a zero-copy view pinning the object.
/// @throws as `get`.
template <class T>
view<T> get_view(const object_ref<T>& ref) {
  detail::check_ref(ref.node());
  detail::object_data d = detail::fetch(ref.node(), detail::no_deadline);
  detail::fetch_pin pin(ref.node());
  detail::check_tag<T>(d);
  return view<T>(ref, std::move(pin), d);
}

/// Wait until `num_returns` of `refs` are ready (or failed) or `timeout` passes.
/// @returns {ready, not_ready}, each in the order of `refs`.
template <class T, class Rep = std::int64_t, class Period = std::ratio<1>>
std::pair<std::vector<object_ref<T>>, std::vector<object_ref<T>>> wait(
    const std::vector<object_ref<T>>& refs, std::size_t num_returns = 1,
    std::chrono::duration<Rep, Period> timeout = std::chrono::duration<Rep, Period>::max()) {
  std::vector<detail::ref_node*> nodes;
  nodes.reserve(refs.size());
  for (const auto& r : refs) {
    detail::check_ref(r.node());
    nodes.push_back(r.node());
  }
  std::vector<bool> ready;
  detail::wait_nodes(nodes, std::min(num_returns, refs.size()), detail::deadline_after(timeout),
                     ready);
  std::pair<std::vector<object_ref<T>>, std::vector<object_ref<T>>> out;
  for (std::size_t i = 0; i < refs.size(); ++i)
    (ready[i] ? out.first : out.second).push_back(refs[i]);
  return out;
}

}  // namespace manta

template <class T>
struct std::hash<manta::object_ref<T>> {
  std::size_t operator()(const manta::object_ref<T>& r) const noexcept {
    return std::hash<manta::object_id>{}(r.id());
  }
};

// buffer.hpp: manta::buffer<E>, a std::vector<E> written in place in the object
// store. Returned from a task, or passed to manta::put, it becomes an object
// without being copied: large results are written exactly once.
#pragma once

#include <cstddef>
#include <limits>
#include <string>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <manta/detail/core.hpp>
#include <manta/errors.hpp>

namespace manta {

/// Contiguous arithmetic data being written directly into the shared arena.
/// Move-only; if neither returned from a task nor put, its room is given back.
/// A task returning buffer<E> gives its caller an object_ref<std::vector<E>>.
///
///     manta::buffer<double> scaled(std::span<const double> xs) {
///       auto out = manta::make_buffer<double>(xs.size());
///       for (std::size_t i = 0; i < xs.size(); ++i) out[i] = 2 * xs[i];
///       return out;
///     }
template <class E>
class buffer {
  static_assert(std::is_arithmetic_v<E>, "manta::buffer holds arithmetic elements");

 public:
  using value_type = E;

  buffer() noexcept = default;
  /// Runtime use: adopts extent `x` holding `count` elements.
  buffer(const detail::extent& x, std::size_t count) noexcept : extent_(x), size_(count) {}
  buffer(buffer&& o) noexcept : extent_(std::exchange(o.extent_, {})), size_(std::exchange(o.size_, 0)) {}
  buffer& operator=(buffer&& o) noexcept {
    if (this != &o) {
      reset();
      extent_ = std::exchange(o.extent_, {});
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
  ~buffer() { reset(); }

  E* data() noexcept { return reinterpret_cast<E*>(extent_.data); }
  const E* data() const noexcept { return reinterpret_cast<const E*>(extent_.data); }
  std::size_t size() const noexcept { return size_; }
  std::span<E> span() noexcept { return {data(), size_}; }
  E& operator[](std::size_t i) noexcept { return data()[i]; }
  const E& operator[](std::size_t i) const noexcept { return data()[i]; }
  E* begin() noexcept { return data(); }
  E* end() noexcept { return data() + size_; }

  /// Runtime use: gives up ownership of the extent.
  detail::extent release() && noexcept {
    size_ = 0;
    return std::exchange(extent_, {});
  }

 private:
  void reset() noexcept {
    if (extent_.data) detail::free_extent(extent_);
    extent_ = {};
    size_ = 0;
  }
  detail::extent extent_;
  std::size_t size_ = 0;
};

/// A buffer of `count` elements in the object store, uninitialised.
/// @throws object_store_full if it cannot fit; usage_error without a runtime.
template <class E>
buffer<E> make_buffer(std::size_t count) {
  if (count > std::numeric_limits<std::size_t>::max() / sizeof(E))
    throw object_store_full("manta: make_buffer of " + std::to_string(count) + " elements of " +
                            std::to_string(sizeof(E)) + " bytes: the size does not fit in memory");
  return buffer<E>(detail::allocate_extent(count * sizeof(E)), count);
}

namespace detail {
template <class T>
inline constexpr bool is_buffer_v = false;
template <class E>
inline constexpr bool is_buffer_v<buffer<E>> = true;

/// What a task returning R stores: a buffer<E> is stored as std::vector<E>.
template <class R>
struct stored {
  using type = R;
};
template <class E>
struct stored<buffer<E>> {
  using type = std::vector<E>;
};
template <class R>
using stored_t = typename stored<R>::type;
}  // namespace detail

}  // namespace manta

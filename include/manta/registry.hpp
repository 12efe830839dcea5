// registry.hpp: registration of remote functions by name (MANTA_REMOTE), so every
// process of the same binary, on any node, finds them; and the type-erased
// invokers that decode arguments, call the function and encode its results.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <manta/buffer.hpp>
#include <manta/detail/task_request.hpp>
#include <manta/errors.hpp>
#include <manta/object_ref.hpp>
#include <manta/serialization.hpp>

namespace manta::detail {

using erased_fn = void (*)();

/// One argument as a worker sees it: bytes in the message or in the arena.
struct arg_view {
  const std::byte* data = nullptr;
  std::size_t size = 0;
  std::uint64_t type_tag = 0;
};

/// A running call, implemented by the worker: arguments in, results out.
class invocation {
 public:
  virtual std::size_t arg_count() const = 0;
  virtual arg_view arg(std::size_t i) const = 0;
  virtual std::size_t num_returns() const = 0;
  virtual void set_result(std::size_t i, const encoded_value& v) = 0;
  /// Result i is `size` bytes already written into `x` (a buffer): adopted, not copied.
  virtual void set_result_extent(std::size_t i, std::uint64_t tag, const extent& x,
                                 std::size_t size) = 0;

 protected:
  ~invocation() = default;
};

using invoker = void (*)(erased_fn, invocation&);

/// A registered function: its name, id (hash of the name) and invokers.
struct function_info {
  std::string name;
  std::uint64_t id = 0;
  erased_fn fn = nullptr;
  std::size_t arity = 0;
  invoker call = nullptr;
  invoker map = nullptr;      ///< unary functions: applies f over a chunk
  invoker starmap = nullptr;  ///< applies f over a chunk of argument tuples
};

void register_function(function_info info);
/// @throws usage_error naming the function if it was never registered.
const function_info& function_for(erased_fn fn);
/// nullptr if no function of this binary has that id (or two share its name).
const function_info* function_by_id(std::uint64_t id);
/// Splits "a, b<c, d>, e" at top-level commas.
std::vector<std::string> split_names(const char* names);

template <class T>
inline constexpr bool is_span_v = false;
template <class E>
inline constexpr bool is_span_v<std::span<const E>> = true;

/// The type an argument is decoded into for a parameter of type P.
template <class P>
using param_t = std::remove_cvref_t<P>;

struct unit {};
inline encoded_value encode_unit() {
  encoded_value e;
  e.type_tag = type_tag<void>();
  return e;
}

[[noreturn]] void throw_arg_mismatch(std::size_t index, std::uint64_t expected, std::uint64_t got);

template <class P>
param_t<P> decode_param(const arg_view& a, std::size_t index) {
  using S = param_t<P>;
  if constexpr (is_span_v<S>) {
    using E = typename S::element_type;
    using V = std::vector<std::remove_const_t<E>>;
    if (a.type_tag != type_tag<V>()) throw_arg_mismatch(index, type_tag<V>(), a.type_tag);
    if (reinterpret_cast<std::uintptr_t>(a.data) % alignof(E) != 0)
      throw usage_error("manta: span argument " + std::to_string(index) + " is misaligned");
    return S(reinterpret_cast<E*>(a.data), a.size / sizeof(E));
  } else {
    if (a.type_tag != type_tag<S>()) throw_arg_mismatch(index, type_tag<S>(), a.type_tag);
    return decode<S>({a.data, a.size});
  }
}

// Passes a decoded argument on as an lvalue where the parameter wants one, else moved.
template <class P, class S>
decltype(auto) pass_param(S& s) {
  if constexpr (std::is_lvalue_reference_v<P> && !std::is_const_v<std::remove_reference_t<P>>)
    return (s);
  else
    return std::move(s);
}

template <class T>
inline constexpr std::size_t tuple_size_or_zero = 0;
template <class... T>
inline constexpr std::size_t tuple_size_or_zero<std::tuple<T...>> = sizeof...(T);

template <class V>
void set_one_result(invocation& inv, std::size_t i, V&& v) {
  using D = std::remove_cvref_t<V>;
  if constexpr (is_buffer_v<D>) {
    using E = typename D::value_type;
    std::size_t bytes = v.size() * sizeof(E);
    inv.set_result_extent(i, type_tag<std::vector<E>>(), std::move(v).release(), bytes);
  } else {
    inv.set_result(i, encode(v));
  }
}

template <class T>
inline constexpr bool holds_buffer_v = false;
template <class... T>
inline constexpr bool holds_buffer_v<std::tuple<T...>> = (is_buffer_v<T> || ...);

template <class R>
void set_results(invocation& inv, R&& r) {
  using D = std::remove_cvref_t<R>;
  if constexpr (tuple_size_or_zero<D> > 1) {
    if (inv.num_returns() == tuple_size_or_zero<D>) {
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        (set_one_result(inv, I, std::get<I>(std::move(r))), ...);
      }(std::make_index_sequence<tuple_size_or_zero<D>>{});
      return;
    }
  }
  if constexpr (holds_buffer_v<D>)
    throw usage_error("manta: a task returning a tuple with buffers must be called with num_returns<N>()");
  else
    set_one_result(inv, 0, std::forward<R>(r));
}

inline void check_arity(invocation& inv, std::size_t arity) {
  if (inv.arg_count() != arity)
    throw usage_error("manta: task received " + std::to_string(inv.arg_count()) +
                      " arguments, function takes " + std::to_string(arity));
}

template <class R, class... P>
void invoke_call(erased_fn fn, invocation& inv) {
  auto f = reinterpret_cast<R (*)(P...)>(fn);
  check_arity(inv, sizeof...(P));
  auto args = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::tuple<param_t<P>...>{decode_param<P>(inv.arg(I), I)...};
  }(std::index_sequence_for<P...>{});
  auto call = [&]<std::size_t... I>(std::index_sequence<I...>) -> decltype(auto) {
    return f(pass_param<P>(std::get<I>(args))...);
  };
  if constexpr (std::is_void_v<R>) {
    call(std::index_sequence_for<P...>{});
    inv.set_result(0, encode_unit());
  } else {
    set_results(inv, call(std::index_sequence_for<P...>{}));
  }
}

template <class R, class P>
void invoke_map(erased_fn fn, invocation& inv) {
  auto f = reinterpret_cast<R (*)(P)>(fn);
  check_arity(inv, 1);
  using X = param_t<P>;
  const arg_view a = inv.arg(0);
  if (a.type_tag != type_tag<std::vector<X>>())
    throw_arg_mismatch(0, type_tag<std::vector<X>>(), a.type_tag);
  std::vector<X> xs = decode<std::vector<X>>({a.data, a.size});
  std::vector<R> out;
  out.reserve(xs.size());
  for (auto& x : xs) out.push_back(f(pass_param<P>(x)));
  inv.set_result(0, encode(out));
}

template <class R, class... P>
void invoke_starmap(erased_fn fn, invocation& inv) {
  auto f = reinterpret_cast<R (*)(P...)>(fn);
  check_arity(inv, 1);
  using X = std::tuple<param_t<P>...>;
  const arg_view a = inv.arg(0);
  if (a.type_tag != type_tag<std::vector<X>>())
    throw_arg_mismatch(0, type_tag<std::vector<X>>(), a.type_tag);
  auto xs = decode<std::vector<X>>({a.data, a.size});
  std::vector<R> out;
  out.reserve(xs.size());
  for (auto& x : xs) {
    out.push_back([&]<std::size_t... I>(std::index_sequence<I...>) {
      return f(pass_param<P>(std::get<I>(x))...);
    }(std::index_sequence_for<P...>{}));
  }
  inv.set_result(0, encode(out));
}

template <class R, class... P>
function_info make_function_info(std::string name, R (*f)(P...)) {
  function_info info;
  info.name = std::move(name);
  info.id = fnv1a(info.name);
  info.fn = reinterpret_cast<erased_fn>(f);
  info.arity = sizeof...(P);
  info.call = &invoke_call<R, P...>;
  constexpr bool mappable = !std::is_void_v<R> && !is_buffer_v<R> && !holds_buffer_v<R> &&
                            (!is_span_v<param_t<P>> && ...);
  if constexpr (mappable && sizeof...(P) == 1) info.map = &invoke_map<R, P...>;
  if constexpr (mappable && sizeof...(P) >= 1) info.starmap = &invoke_starmap<R, P...>;
  return info;
}

template <class R, class... P>
function_info make_function_info(std::string name, R (*f)(P...) noexcept) {
  return make_function_info(std::move(name), static_cast<R (*)(P...)>(f));
}

/// Registers each function of a MANTA_REMOTE list under its spelled name.
struct function_registrar {
  template <class... F>
  explicit function_registrar(const char* names, F... fns) {
    std::vector<std::string> list = split_names(names);
    std::size_t i = 0;
    (register_function(make_function_info(list.at(i++), fns)), ...);
  }
};

}  // namespace manta::detail

#define MANTA_PP_CAT_(a, b) a##b
#define MANTA_PP_CAT(a, b) MANTA_PP_CAT_(a, b)

/// Register free functions as remote functions, by name:
///     int square(int x);  MANTA_REMOTE(square);
/// Use at namespace scope, once per function, in any translation unit of the binary.
#define MANTA_REMOTE(...)                                                          \
  [[maybe_unused]] static const ::manta::detail::function_registrar MANTA_PP_CAT( \
      manta_remote_registrar_, __COUNTER__) {                                      \
    #__VA_ARGS__, __VA_ARGS__                                                      \
  }

// registry.hpp: registration of remote functions (MANTA_REMOTE) and actor classes
// (MANTA_ACTOR) by name, so every process of the same binary, on any node, finds
// them; and the type-erased invokers that decode arguments, call the function,
// constructor or method, and encode its results.
#pragma once

#include <array>
#include <cstddef>
#include <cstring>
#include <cstdint>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include <manta/buffer.hpp>
#include <manta/detail/task_request.hpp>
#include <manta/errors.hpp>
#include <manta/object_ref.hpp>
#include <manta/serialization.hpp>

namespace manta {
template <class T>
class emitter;  // stream.hpp
}  // namespace manta

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
  /// Methods: the actor object this process hosts.
  virtual void* instance() = 0;
  /// Constructors: the new actor object, and how to destroy it.
  virtual void adopt_instance(void* object, void (*destroy)(void*)) = 0;

 protected:
  ~invocation() = default;
};

struct function_info;
using invoker = void (*)(const function_info&, invocation&);

enum class callable_kind : std::uint8_t { function, constructor, method };

/// A registered callable: a function, an actor constructor or an actor method.
/// `id` is the hash of its name, the same in every process of the binary.
struct function_info {
  std::string name;
  std::uint64_t id = 0;
  callable_kind kind = callable_kind::function;
  erased_fn fn = nullptr;                      ///< functions
  std::array<unsigned char, 16> member{};      ///< methods: the member pointer's bytes
  std::uint64_t class_tag = 0;                 ///< constructors and methods: the actor class
  std::size_t arity = 0;
  invoker call = nullptr;
  invoker map = nullptr;      ///< unary functions: applies f over a chunk
  invoker starmap = nullptr;  ///< applies f over a chunk of argument tuples
};

/// Registers a callable; returns the stored record (never freed).
const function_info& register_function(function_info info);
/// @throws usage_error naming the function if it was never registered.
const function_info& function_for(erased_fn fn);
/// @throws usage_error if the method was not listed in MANTA_ACTOR.
const function_info& method_for(std::uint64_t class_tag, const void* member, std::size_t size);
/// nullptr if no callable of this binary has that id (or two share its name).
const function_info* function_by_id(std::uint64_t id);
/// Records an actor class's name under its type tag (for messages and get_actor).
void register_actor_class(std::uint64_t class_tag, std::string name);
/// Replaces the name the tools and messages show for a registered actor class
/// (the library's own: a queue's home shows as "queue").
void show_actor_class_as(std::uint64_t class_tag, std::string name);
/// The name MANTA_ACTOR gave the class, or its demangled type name.
std::string actor_class_name(std::uint64_t class_tag);
/// Splits "a, b<c, d>, e" at top-level commas.
std::vector<std::string> split_names(const char* names);
/// The name of every registered callable, sorted (the nodes of a cluster compare them).
std::vector<std::string> registered_names();

template <class T>
inline constexpr bool is_span_v = false;
template <class E>
inline constexpr bool is_span_v<std::span<const E>> = true;

/// The value type of a streaming task's first parameter `emitter<T>&` (void for
/// any other parameter).
template <class P>
struct emitted {
  using type = void;
};
template <class T>
struct emitted<emitter<T>&> {
  using type = T;
};
/// Whether a function with parameters P... is a streaming task.
template <class... P>
inline constexpr bool streams_v = false;
template <class P0, class... P>
inline constexpr bool streams_v<P0, P...> = !std::is_void_v<typename emitted<P0>::type>;

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

// (Function templates, not templated lambdas: a task's stack names these
// frames, and GCC's demangler cannot read a lambda's with a template pack.)
template <class... P, std::size_t... I>
std::tuple<param_t<P>...> decode_params(invocation& inv, std::index_sequence<I...>) {
  return std::tuple<param_t<P>...>{decode_param<P>(inv.arg(I), I)...};
}

template <class... P, class F, class Args, std::size_t... I>
decltype(auto) call_with_params(F& f, Args& args, std::index_sequence<I...>) {
  return f(pass_param<P>(std::get<I>(args))...);
}

/// Decodes the arguments for parameters P..., calls `f` with them (as the
/// parameters want them: lvalues or moved) and stores what it returns.
template <class R, class... P, class F>
void decode_call_store(invocation& inv, F&& f) {
  check_arity(inv, sizeof...(P));
  auto args = decode_params<P...>(inv, std::index_sequence_for<P...>{});
  if constexpr (std::is_void_v<R>) {
    call_with_params<P...>(f, args, std::index_sequence_for<P...>{});
    inv.set_result(0, encode_unit());
  } else {
    set_results(inv, call_with_params<P...>(f, args, std::index_sequence_for<P...>{}));
  }
}

template <class R, class... P>
void invoke_call(const function_info& info, invocation& inv) {
  auto f = reinterpret_cast<R (*)(P...)>(info.fn);
  decode_call_store<R, P...>(inv, f);
}

template <class R, class P>
void invoke_map(const function_info& info, invocation& inv) {
  auto f = reinterpret_cast<R (*)(P)>(info.fn);
  check_arity(inv, 1);
  using X = param_t<P>;
  const arg_view a = inv.arg(0);
  if (a.type_tag != type_tag<std::vector<X>>())
    throw_arg_mismatch(0, type_tag<std::vector<X>>(), a.type_tag);
  std::vector<X> xs = decode<std::vector<X>>({a.data, a.size});
  std::vector<R> out;
  out.reserve(xs.size());
  for (auto&& x : xs) {
    if constexpr (std::is_same_v<X, bool>) {  // std::vector<bool> hands out proxies
      bool b = x;
      out.push_back(f(pass_param<P>(b)));
    } else {
      out.push_back(f(pass_param<P>(x)));
    }
  }
  inv.set_result(0, encode(out));
}

template <class R, class... P>
void invoke_starmap(const function_info& info, invocation& inv) {
  auto f = reinterpret_cast<R (*)(P...)>(info.fn);
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
  constexpr bool mappable = !std::is_void_v<R> && !is_buffer_v<R> && !holds_buffer_v<R> && !streams_v<P...> &&
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

// ---- actors

template <class M>
M member_from(const function_info& info) {
  static_assert(sizeof(M) <= sizeof(info.member));
  M m;
  std::memcpy(&m, info.member.data(), sizeof(M));
  return m;
}

/// Method `m` bound to the instance `self`. A named type, not a generic
/// lambda: GCC's demangler cannot read the frames a variadic generic lambda
/// makes, and a task's stack showed them mangled.
template <class M, class T>
struct bound_method {
  T* self;
  M m;
  template <class... A>
  decltype(auto) operator()(A&&... a) const {
    return (self->*m)(std::forward<A>(a)...);
  }
};

/// Calls method M of class T with parameters P... on the hosted instance.
template <class M, class T, class R, class... P>
struct method_call {
  using class_type = T;
  using result = R;
  static void invoke(const function_info& info, invocation& inv) {
    decode_call_store<R, P...>(inv, bound_method<M, T>{static_cast<T*>(inv.instance()), member_from<M>(info)});
  }
};

template <class M>
struct method_traits;
template <class T, class R, class... P>
struct method_traits<R (T::*)(P...)> : method_call<R (T::*)(P...), T, R, P...> {};
template <class T, class R, class... P>
struct method_traits<R (T::*)(P...) const> : method_call<R (T::*)(P...) const, T, R, P...> {};
template <class T, class R, class... P>
struct method_traits<R (T::*)(P...) noexcept> : method_call<R (T::*)(P...) noexcept, T, R, P...> {};
template <class T, class R, class... P>
struct method_traits<R (T::*)(P...) const noexcept>
    : method_call<R (T::*)(P...) const noexcept, T, R, P...> {};

template <class M>
using method_result_t = typename method_traits<M>::result;

template <class M>
function_info make_method_info(std::string name, M member) {
  using T = typename method_traits<M>::class_type;
  function_info info;
  info.name = std::move(name);
  info.id = fnv1a(info.name);
  info.kind = callable_kind::method;
  info.class_tag = type_tag<T>();
  std::memcpy(info.member.data(), &member, sizeof(M));
  info.call = &method_traits<M>::invoke;
  return info;
}

template <class T, class... A>
void invoke_constructor(const function_info&, invocation& inv) {
  decode_call_store<void, A...>(inv, [&](auto&&... a) {
    inv.adopt_instance(new T(std::forward<decltype(a)>(a)...),
                       [](void* p) { delete static_cast<T*>(p); });
  });
}

/// The constructor T(A...) as a registered callable, registered during static
/// initialisation (so forked processes have it) by the first use of this type.
template <class T, class... A>
struct constructor_registration {
  static const function_info& make() {
    function_info info;
    // Type names, not MANTA_ACTOR's name: static initialisation order across
    // translation units must not change the id.
    info.name = type_name_of_tag(type_tag<T>()) + "(" + type_name_of_tag(type_tag<void (*)(A...)>()) + ")";
    info.id = fnv1a(info.name);
    info.kind = callable_kind::constructor;
    info.class_tag = type_tag<T>();
    info.arity = sizeof...(A);
    info.call = &invoke_constructor<T, A...>;
    return register_function(std::move(info));
  }
  static inline const function_info& info = make();
};

/// Registers an actor class and its methods (MANTA_ACTOR).
template <class T>
struct actor_registrar {
  template <class... M>
  actor_registrar(const char* class_name, const char* method_names, M... methods) {
    register_actor_class(type_tag<T>(), class_name);
    std::vector<std::string> list = split_names(method_names);
    std::size_t i = 0;
    (register_function(make_method_info(list.at(i++), methods)), ...);
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

/// Register an actor class and the methods callable on it, by name:
///     struct Counter { int increment(); int read() const; };
///     MANTA_ACTOR(Counter, &Counter::increment, &Counter::read);
/// Use at namespace scope, once per class.
#define MANTA_ACTOR(T, ...)                                                           \
  [[maybe_unused]] static const ::manta::detail::actor_registrar<T> MANTA_PP_CAT(    \
      manta_actor_registrar_, __COUNTER__) {                                          \
    #T, #__VA_ARGS__, __VA_ARGS__                                                     \
  }

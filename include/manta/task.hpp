// task.hpp: remote functions. `manta::task(f).remote(args...)` submits f to the
// worker pool and returns an object_ref to its result at once.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include <manta/detail/task_request.hpp>
#include <manta/object_ref.hpp>
#include <manta/registry.hpp>

namespace manta {
namespace detail {

/// Encodes argument `a` for a parameter of type P: refs to plain parameters are
/// resolved by the scheduler, refs to object_ref parameters pass as borrowed refs,
/// values are serialised (spans as raw bytes).
template <class P, class A>
void encode_arg(arg_writer& w, A&& a) {
  using S = param_t<P>;
  using D = std::remove_cvref_t<A>;
  if constexpr (is_object_ref_v<D>) {
    using U = typename D::value_type;
    if constexpr (is_object_ref_v<S>) {
      static_assert(std::is_same_v<S, D>, "manta: an object_ref parameter needs a ref of the same type");
      w.value(encode<S>(a));
    } else if constexpr (is_span_v<S>) {
      using E = std::remove_const_t<typename S::element_type>;
      static_assert(std::is_same_v<U, std::vector<E>>,
                    "manta: a std::span<const E> parameter takes an object_ref<std::vector<E>>");
      if (!a.valid()) throw usage_error("manta: an empty object_ref passed as a task argument");
      w.ref(a.node(), type_tag<U>());
    } else {
      static_assert(std::is_same_v<S, U>,
                    "manta: object_ref<U> passed where the parameter is neither U nor object_ref<U>");
      if (!a.valid()) throw usage_error("manta: an empty object_ref passed as a task argument");
      w.ref(a.node(), type_tag<U>());
    }
  } else if constexpr (is_span_v<S>) {
    using E = std::remove_const_t<typename S::element_type>;
    std::span<const E> s(a);
    encoded_value e;
    e.type_tag = type_tag<std::vector<E>>();
    e.borrowed = s.data();
    e.size = s.size_bytes();
    w.value(e);
  } else if constexpr (std::is_same_v<S, D>) {
    w.value(encode<S>(a));
  } else {
    static_assert(std::is_constructible_v<S, A&&>,
                  "manta: an argument does not convert to the function's parameter type");
    const S converted(std::forward<A>(a));
    w.value(encode<S>(converted));
  }
}

/// Submits a streaming task; defined in stream.hpp (include <manta/stream.hpp>
/// or <manta/manta.hpp> to call one).
template <class T>
struct stream_submitter;

}  // namespace detail

/// Builder for one call of a registered function; options chain, `remote` submits.
/// Not thread-safe itself; make one per call (they are cheap).
///
///     auto r = manta::task(square).max_retries(0).remote(4);
template <std::size_t N, class R, class... P>
class task_builder {
 public:
  explicit task_builder(R (*f)(P...)) noexcept : fn_(f) {}

  /// CPUs the task holds while it runs (fractions allowed; default 1).
  task_builder& num_cpus(double n) {
    if (!(n >= 0)) throw usage_error("manta: num_cpus must be >= 0");
    options_.num_cpus = n;
    return *this;
  }
  /// GPUs the task holds while it runs; their ids are in manta::gpu_ids() there.
  task_builder& num_gpus(double n) {
    if (!(n >= 0)) throw usage_error("manta: num_gpus must be >= 0");
    options_.num_gpus = n;
    return *this;
  }
  /// Custom resources the task holds while it runs, e.g. {{"sensor", 1}}.
  /// @throws usage_error for an amount that is negative or not finite
  task_builder& resources(std::map<std::string, double> r) {
    options_.resources = detail::checked_resources(std::move(r));
    return *this;
  }
  /// Bytes of the node's memory (its "memory" resource, the machine's RAM unless
  /// options.resources says otherwise) the task holds while it runs: tasks wait
  /// rather than run together past it. Not a limit on what it really uses.
  task_builder& memory(std::uint64_t bytes) {
    options_.memory = bytes;
    return *this;
  }
  /// Times to re-run the task when its worker dies (default 3; -1 = forever).
  task_builder& max_retries(int n) {
    options_.max_retries = n;
    return *this;
  }
  /// Also retry (up to max_retries) when the task throws.
  task_builder& retry_exceptions(bool on = true) {
    options_.retry_exceptions = on;
    return *this;
  }
  /// A run longer than `limit` has its process killed (and replaced); the result
  /// fails with timeout_error naming the function and the limit, not retried.
  /// Tasks that ran in the same process are retried without being charged.
  template <class Rep, class Period>
  task_builder& timeout(std::chrono::duration<Rep, Period> limit) {
    options_.timeout_ns = detail::timeout_ns(limit);
    return *this;
  }
  /// The worker that ran `n` calls of this function is replaced after the last
  /// of them (for leaky native code; as Pool(maxtasksperchild=), Ray's max_calls).
  task_builder& max_calls(int n) {
    if (n < 1) throw usage_error("manta: max_calls must be >= 1");
    options_.max_calls = n;
    return *this;
  }
  /// Name shown in errors and status instead of the function's name.
  task_builder& name(std::string n) {
    options_.name = std::move(n);
    return *this;
  }
  /// For a function returning std::tuple<A, B, ...>: one ref per element.
  template <std::size_t K>
  task_builder<K, R, P...> num_returns() const {
    static_assert(K >= 1);
    static_assert(K == 1 || detail::tuple_size_or_zero<R> == K,
                  "manta: num_returns<K> needs a function returning a std::tuple of K elements");
    task_builder<K, R, P...> b(fn_);
    b.options_ = options_;
    return b;
  }

  /// Submit the call; returns at once. Arguments may be values or object_refs.
  /// @returns object_ref<R>, or a std::tuple of K refs after num_returns<K>().
  /// @throws usage_error if f is not registered or the runtime is not running.
  /// For a streaming task (first parameter `emitter<T>&`, given no argument):
  /// @returns ref_stream<T>.
  template <class... A>
  auto remote(A&&... args) const {
    detail::task_request request;
    request.function = &detail::function_for(reinterpret_cast<detail::erased_fn>(fn_));
    request.options = options_;
    request.num_returns = static_cast<std::uint16_t>(N);
    if constexpr (detail::streams_v<P...>) {
      static_assert(sizeof...(A) + 1 == sizeof...(P),
                    "manta: remote() of a streaming task takes the arguments after its emitter");
      static_assert(std::is_void_v<R> && N == 1, "manta: a streaming task returns void");
      return [&]<class E, class... Rest>(std::tuple<E, Rest...>*) {
        using T = typename detail::emitted<E>::type;
        return detail::stream_submitter<T>::template submit<Rest...>(std::move(request), std::forward<A>(args)...);
      }(static_cast<std::tuple<P...>*>(nullptr));
    } else {
      return submit_call(std::move(request), std::forward<A>(args)...);
    }
  }

 private:
  template <class... A>
  auto submit_call(detail::task_request&& request, A&&... args) const {
    static_assert(sizeof...(A) == sizeof...(P),
                  "manta: remote() takes exactly the function's arguments");
    detail::arg_writer writer(request);
    (detail::encode_arg<P>(writer, std::forward<A>(args)), ...);
    std::array<detail::ref_node*, N> out{};
    detail::submit(std::move(request), out.data());
    if constexpr (N == 1) {
      return object_ref<detail::stored_t<R>>(out[0]);
    } else {
      return [&]<std::size_t... I>(std::index_sequence<I...>) {
        return std::tuple<object_ref<detail::stored_t<std::tuple_element_t<I, R>>>...>(
            object_ref<detail::stored_t<std::tuple_element_t<I, R>>>(out[I])...);
      }(std::make_index_sequence<N>{});
    }
  }

  template <std::size_t, class, class...>
  friend class task_builder;
  R (*fn_)(P...);
  detail::task_options options_;
};

/// The builder for a function registered with MANTA_REMOTE.
template <class R, class... P>
task_builder<1, R, P...> task(R (*f)(P...)) {
  return task_builder<1, R, P...>(f);
}
template <class R, class... P>
task_builder<1, R, P...> task(R (*f)(P...) noexcept) {
  return task_builder<1, R, P...>(static_cast<R (*)(P...)>(f));
}

/// Cancel the task whose result `ref` is: if it has not started it never runs; if
/// it runs in a pool worker, that process is killed and replaced (the other tasks
/// it held are retried, not charged a retry); unfinished tasks it submitted are
/// cancelled too. Its results, and those of every task depending on them, then
/// fail with task_cancelled_error. No effect on a task that
/// has finished, on a value from `put`, or on an actor method its actor already
/// runs (a method is never interrupted: its actor would lose its state).
/// Callable from the driver and from tasks; from a task it takes effect shortly after.
/// @throws usage_error for an empty ref
template <class T>
void cancel(const object_ref<T>& ref) {
  if (!ref.valid()) throw usage_error("manta: cancel of an empty object_ref");
  detail::cancel_producer(ref.node());
}

}  // namespace manta

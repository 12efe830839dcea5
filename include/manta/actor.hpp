// actor.hpp: actors, a class instance living in a process of its own whose
// methods run in the order they were submitted, and the node's resources.
//
//     struct Counter { explicit Counter(int s) : v(s) {} int increment() { return ++v; } int v; };
//     MANTA_ACTOR(Counter, &Counter::increment);
//     auto c = manta::actor<Counter>().remote(5);
//     manta::object_ref<int> six = c.task(&Counter::increment).remote();
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <manta/detail/core.hpp>
#include <manta/detail/task_request.hpp>
#include <manta/object_ref.hpp>
#include <manta/registry.hpp>
#include <manta/task.hpp>

namespace manta {
namespace detail {

/// The actor named `name` holding one count, or nullptr if there is none.
/// @throws usage_error if it exists but is of another class.
ref_node* find_actor(const std::string& name, std::uint64_t class_tag);
/// Ends the actor behind `node` now (calls in flight fail with actor_died_error).
void kill_actor(ref_node* node);
std::vector<int> current_gpu_ids();
std::map<std::string, double> node_resources(bool available_only);

/// Encodes each argument for parameter types P and submits `request`.
template <std::size_t N, class... P, class... A>
void submit_with_args(task_request& request, ref_node** out, A&&... args) {
  arg_writer writer(request);
  (encode_arg<P>(writer, std::forward<A>(args)), ...);
  submit(std::move(request), out);
}

template <class R, std::size_t N>
auto refs_from(std::array<ref_node*, N>& out) {
  if constexpr (N == 1) {
    return object_ref<stored_t<R>>(out[0]);
  } else {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return std::tuple<object_ref<stored_t<std::tuple_element_t<I, R>>>...>(
          object_ref<stored_t<std::tuple_element_t<I, R>>>(out[I])...);
    }(std::make_index_sequence<N>{});
  }
}

}  // namespace detail

template <class T>
class actor_handle;

/// Builder for one call of an actor method; `remote` submits it.
template <std::size_t N, class T, class M>
class method_builder {
  template <class>
  struct params;
  template <class C, class R, class... P>
  struct params<R (C::*)(P...)> {
    using type = std::tuple<P...>;
  };
  template <class C, class R, class... P>
  struct params<R (C::*)(P...) const> : params<R (C::*)(P...)> {};
  template <class C, class R, class... P>
  struct params<R (C::*)(P...) noexcept> : params<R (C::*)(P...)> {};
  template <class C, class R, class... P>
  struct params<R (C::*)(P...) const noexcept> : params<R (C::*)(P...)> {};
  using R = detail::method_result_t<M>;

 public:
  method_builder(detail::ref_node* actor, M method) : actor_(actor), method_(method) {}

  /// Name shown in errors instead of the method's name.
  method_builder& name(std::string n) {
    name_ = std::move(n);
    return *this;
  }
  /// A call running longer than `limit` fails with timeout_error and its actor's
  /// process is killed: the actor restarts under max_restarts (calls sent with it
  /// are retried uncharged) or dies. The call is not retried. Timed from its
  /// start: it is sent only when the actor has a free thread for it.
  template <class Rep, class Period>
  method_builder& timeout(std::chrono::duration<Rep, Period> limit) {
    timeout_ns_ = detail::timeout_ns(limit);
    return *this;
  }
  /// For a method returning std::tuple<A, B, ...>: one ref per element.
  template <std::size_t K>
  method_builder<K, T, M> num_returns() const {
    static_assert(K == 1 || detail::tuple_size_or_zero<R> == K,
                  "manta: num_returns<K> needs a method returning a std::tuple of K elements");
    method_builder<K, T, M> b(actor_, method_);
    b.name_ = name_;
    b.timeout_ns_ = timeout_ns_;
    return b;
  }

  /// Queue the call; calls from one caller run in the order submitted.
  /// @returns object_ref<R> (or a tuple of refs after num_returns<K>()).
  /// @throws usage_error if the method is not in MANTA_ACTOR or the handle is empty.
  template <class... A>
  auto remote(A&&... args) const {
    if (!actor_) throw usage_error("manta: a method called on an empty actor_handle");
    return [&]<class... P>(std::tuple<P...>*) {
      static_assert(sizeof...(A) == sizeof...(P), "manta: remote() takes exactly the method's arguments");
      detail::task_request request;
      request.function = &detail::method_for(detail::type_tag<T>(), &method_, sizeof(M));
      request.mode = detail::call_mode::method;
      request.num_returns = static_cast<std::uint16_t>(N);
      request.options.name = name_;
      request.options.timeout_ns = timeout_ns_;
      request.options.num_cpus = 0;  // the actor holds its resources; calls take none
      detail::acquire(actor_);
      request.actor = actor_;
      std::array<detail::ref_node*, N> out{};
      detail::submit_with_args<N, P...>(request, out.data(), std::forward<A>(args)...);
      return detail::refs_from<R, N>(out);
    }(static_cast<typename params<M>::type*>(nullptr));
  }

 private:
  template <std::size_t, class, class>
  friend class method_builder;
  detail::ref_node* actor_;
  M method_;
  std::string name_;
  std::uint64_t timeout_ns_ = 0;
};

/// A handle to an actor: copyable and serialisable, so it can be passed to tasks
/// and other actors and returned from them. The actor lives while any handle
/// anywhere exists (a named one until kill or shutdown). Thread-safe to copy.
template <class T>
class actor_handle : public detail::counted_ref {
 public:
  using counted_ref::counted_ref;

  friend bool operator==(const actor_handle& a, const actor_handle& b) noexcept { return a.id() == b.id(); }

  /// The builder for a call of `method` (listed in MANTA_ACTOR).
  template <class M>
  method_builder<1, T, M> task(M method) const {
    static_assert(std::is_same_v<typename detail::method_traits<M>::class_type, T>,
                  "manta: the method belongs to another class");
    return method_builder<1, T, M>(node(), method);
  }
};

/// Builder for a new actor; options chain, `remote(args...)` starts it.
template <class T>
class actor_builder {
 public:
  actor_builder() { options_.num_cpus = 0; }  // as Ray: 0 CPUs held for the actor's life unless asked

  /// CPUs held for the actor's whole life (default 0).
  actor_builder& num_cpus(double n) {
    if (!(n >= 0)) throw usage_error("manta: num_cpus must be >= 0");
    options_.num_cpus = n;
    return *this;
  }
  /// GPUs held for the actor's whole life; their ids are in manta::gpu_ids() there.
  actor_builder& num_gpus(double n) {
    if (!(n >= 0)) throw usage_error("manta: num_gpus must be >= 0");
    options_.num_gpus = n;
    return *this;
  }
  /// Custom resources held for the actor's whole life.
  /// @throws usage_error for an amount that is negative or not finite
  actor_builder& resources(std::map<std::string, double> r) {
    options_.resources = detail::checked_resources(std::move(r));
    return *this;
  }
  /// Bytes of the node's "memory" resource held for the actor's whole life.
  actor_builder& memory(std::uint64_t bytes) {
    options_.memory = bytes;
    return *this;
  }
  /// Times the actor's process is restarted (constructor re-run) after it dies.
  actor_builder& max_restarts(int n) {
    options_.max_restarts = n;
    return *this;
  }
  /// Times a call in flight when the actor died is retried after a restart.
  actor_builder& max_task_retries(int n) {
    options_.max_task_retries = n;
    return *this;
  }
  /// Methods run on up to n threads at once in the actor's process (you synchronise).
  actor_builder& max_concurrency(int n) {
    if (n < 1) throw usage_error("manta: max_concurrency must be >= 1");
    options_.max_concurrency = n;
    return *this;
  }
  /// A name get_actor finds it by; a named actor lives until kill or shutdown.
  actor_builder& name(std::string n) {
    options_.name = std::move(n);
    return *this;
  }

  /// Start the actor: its process is forked and T(args...) runs there.
  /// Returns at once; calls made before the constructor finished wait for it.
  /// @throws usage_error for resources the node can never offer, a taken name.
  template <class... A>
  actor_handle<T> remote(A&&... args) const {
    detail::task_request request;
    request.function = &detail::constructor_registration<T, std::decay_t<A>...>::info;
    request.mode = detail::call_mode::construct;
    request.options = options_;
    std::array<detail::ref_node*, 1> out{};
    detail::submit_with_args<1, std::decay_t<A>...>(request, out.data(), std::forward<A>(args)...);
    return actor_handle<T>(out[0]);
  }

 private:
  detail::task_options options_;
};

/// The builder for a new actor of class T (registered with MANTA_ACTOR).
template <class T>
actor_builder<T> actor() {
  return {};
}

/// The actor started with `.name(name)`, from any process.
/// @throws usage_error if there is none, or it is of another class.
template <class T>
actor_handle<T> get_actor(const std::string& name) {
  detail::ref_node* n = detail::find_actor(name, detail::type_tag<T>());
  if (!n) throw usage_error("manta: no actor is named '" + name + "'");
  return actor_handle<T>(n);
}

/// End an actor now: its process is killed, calls queued or running fail with
/// actor_died_error, its name is freed. No restart follows.
template <class T>
void kill(const actor_handle<T>& handle) {
  if (!handle.valid()) throw usage_error("manta: kill of an empty actor_handle");
  detail::kill_actor(handle.node());
}

/// Inside a task or actor: the GPU ids granted to it (CUDA_VISIBLE_DEVICES is set
/// to them before user code runs). Empty in the driver and without GPUs.
inline std::vector<int> gpu_ids() { return detail::current_gpu_ids(); }

/// Resources free right now: "CPU", "GPU" and custom ones.
inline std::map<std::string, double> available_resources() { return detail::node_resources(true); }

/// Resources offered in total: this node's, and on a cluster's driver every alive node's added.
inline std::map<std::string, double> cluster_resources() { return detail::node_resources(false); }

}  // namespace manta

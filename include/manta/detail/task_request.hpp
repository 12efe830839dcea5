// detail/task_request.hpp: a task as the header templates hand it to the runtime.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <manta/detail/core.hpp>
#include <manta/errors.hpp>

namespace manta::detail {

struct function_info;

/// What a task or an actor asks of the node, set by the builder's options.
struct task_options {
  double num_cpus = 1;
  double num_gpus = 0;
  std::map<std::string, double> resources;  ///< custom resources
  std::uint64_t memory = 0;  ///< bytes of the node's "memory" resource held while it runs
  int max_retries = 3;
  bool retry_exceptions = false;
  std::string name;  ///< tasks: shown in errors; actors: the name get_actor finds
  std::uint64_t timeout_ns = 0;  ///< tasks: a run longer than this is killed (0: no limit)
  int max_calls = 0;  ///< tasks: a worker is replaced after this many calls of the function (0: never)
  // Actors only.
  int max_restarts = 0;
  int max_task_retries = 0;
  int max_concurrency = 1;
  /// Actors of another language's class (Python's): the class's name, which
  /// status, errors and the timeline show instead of the registry's.
  std::string class_label;

  bool operator==(const task_options&) const = default;
};

/// What .resources(r) keeps. @throws usage_error naming the first resource
/// asked with an amount that is negative or not finite (a negative one would
/// add to what its node has free while the task runs).
inline std::map<std::string, double> checked_resources(std::map<std::string, double> r) {
  for (const auto& [name, amount] : r)
    if (!(amount >= 0 && amount <= std::numeric_limits<double>::max()))
      throw usage_error("manta: the resource '" + name + "' is asked with " + std::to_string(amount) +
                        "; amounts must be finite and >= 0");
  return r;
}

/// A .timeout(d) in nanoseconds; 0 (no limit) for one past what nanoseconds
/// hold (292 years: `duration::max()` means "never").
/// @throws usage_error unless positive.
template <class Rep, class Period>
std::uint64_t timeout_ns(std::chrono::duration<Rep, Period> limit) {
  const double ns = std::chrono::duration<double, std::nano>(limit).count();
  if (!(ns > 0)) throw usage_error("manta: timeout must be positive");
  if (ns >= static_cast<double>(std::numeric_limits<std::int64_t>::max())) return 0;
  return std::max<std::uint64_t>(1, static_cast<std::uint64_t>(ns));
}

/// Bytes of arguments a request carries inline at most.
inline constexpr std::size_t max_inline_args = 4 << 20;

/// How a worker applies the callable to the arguments.
enum class call_mode : std::uint8_t {
  call = 0,       ///< f(args...)
  map = 1,        ///< one argument, a vector of inputs: [f(x) for x]
  starmap = 2,    ///< one argument, a vector of tuples: [f(xs...) for xs]
  construct = 3,  ///< create an actor: T(args...) in a new process
  method = 4,     ///< call a method on the actor the process hosts
};

/// A task on its way to the runtime. It holds one count of every ref it names
/// (its arguments, the actor) until the runtime takes them over, so a request
/// abandoned part way (an argument that throws while encoded) leaks nothing.
struct task_request {
  task_request() = default;
  task_request(const task_request&) = delete;
  task_request& operator=(const task_request&) = delete;
  ~task_request() {
    for (auto* d : deps) release(d);
    release(actor);
  }

  const function_info* function = nullptr;
  call_mode mode = call_mode::call;
  std::uint16_t num_returns = 1;
  task_options options;
  std::string args;               ///< the argument blob written by arg_writer
  std::uint16_t arg_count = 0;
  std::vector<ref_node*> deps;    ///< counted refs that arguments are resolved from
  std::vector<object_id> contained;  ///< refs serialised inside value arguments
  ref_node* actor = nullptr;      ///< method calls: the actor (counted)
};

/// Appends arguments to a request. Values above max_inline_bytes are put into the
/// arena first and passed as refs, so a large argument is written once; so are
/// values once the request holds max_inline_args bytes, so it always fits a message.
class arg_writer {
 public:
  explicit arg_writer(task_request& request) noexcept : request_(request) {}
  /// A value argument (copied now; `v` may borrow the caller's bytes).
  void value(const encoded_value& v);
  /// An argument resolved from `node` once sealed; `tag` is the stored type it expects.
  void ref(ref_node* node, std::uint64_t tag);

 private:
  task_request& request_;
};

/// Submit; writes `request.num_returns` counted nodes to `returns`.
/// @throws usage_error without a runtime, or for a request the node can never run.
void submit(task_request&& request, ref_node** returns);

/// Cancels the task producing `n`, if it has not finished (see manta::cancel).
void cancel_producer(ref_node* n);

}  // namespace manta::detail

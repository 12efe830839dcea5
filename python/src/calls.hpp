// python/src/calls.hpp: Python calls as the runtime's task requests. A call
// carries a header (argument 0: the function's or class's object id, the ids of
// the arguments that are refs, the method's name), its pickled (args, kwargs)
// with the refs passed at top level replaced by slots (argument 1), and one
// argument per such ref, which the runtime resolves before the call runs.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include <manta/detail/core.hpp>
#include <manta/detail/task_request.hpp>
#include <manta/registry.hpp>

namespace manta::python {
namespace py = pybind11;

/// manta._manta.ObjectRef: one count of an object (or of an actor).
class object_ref {
 public:
  object_ref() = default;
  explicit object_ref(detail::ref_node* adopted) : ref_(adopted) {}
  const detail::counted_ref& ref() const noexcept { return ref_; }
  detail::ref_node* node() const noexcept { return ref_.node(); }
  object_id id() const noexcept { return ref_.id(); }

 private:
  detail::counted_ref ref_;
};

/// The registered callables every process of the interpreter has (invokers.cpp).
const detail::function_info& task_function();
const detail::function_info& actor_constructor();
const detail::function_info& actor_method();
inline constexpr std::uint64_t actor_class_tag = 0x6d2e70792e616331;

/// What a call's header says, as the worker reads it.
struct call_header {
  object_id function;              ///< the function or class (empty for methods)
  std::vector<object_id> arg_ids;  ///< per argument after the header: its object, or empty
  std::string method;
};
call_header read_header(const detail::arg_view& a);

/// Submits `payload` ((args, kwargs) with slots) and `refs` (the top-level refs,
/// in slot order) as a call; returns the result refs.
/// `actor` is set for method calls; `function` for tasks and constructors.
std::vector<detail::ref_node*> submit_call(const detail::function_info& callable, detail::call_mode mode,
                                           const object_ref* function, const object_ref* actor,
                                           const std::string& method, py::handle payload, py::handle refs,
                                           const detail::task_options& options, int num_returns);

}  // namespace manta::python

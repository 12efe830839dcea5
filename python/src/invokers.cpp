// python/src/invokers.cpp: the callables every process of the interpreter
// registers (a Python task, an actor's constructor, an actor's method), which
// run Python code in workers and actor hosts with the GIL held only while it
// runs; and the fork hooks that keep the interpreter sound across the
// runtime's forks.
#include <pybind11/pybind11.h>

#include <cstring>
#include <string>
#include <unordered_map>

#include <manta/detail/foreign_error.hpp>
#include <manta/errors.hpp>
#include <manta/registry.hpp>

#include "calls.hpp"
#include "process/context.hpp"
#include "invokers.hpp"
#include "values.hpp"

namespace manta::python {
namespace {

/// manta._worker's functions, looked up once.
struct worker_side {
  py::object run_task;      ///< (fn, payload, resolved) -> result
  py::object construct;     ///< (cls, payload, resolved) -> instance
  py::object run_method;    ///< (instance, name, payload, resolved) -> result
  py::object describe;      ///< (exception, traceback) -> (type name, message)
  py::object flush_output;  ///< () -> None
  py::object set_up;        ///< () -> None, once per process
};
worker_side* worker = nullptr;

worker_side& side_of_worker() {
  if (!worker) {
    auto* w = new worker_side;  // as long as the interpreter: never freed
    py::module_ m = py::module_::import("manta._worker");
    w->run_task = m.attr("run_task");
    w->construct = m.attr("construct");
    w->run_method = m.attr("run_method");
    w->describe = m.attr("describe_exception");
    w->flush_output = m.attr("flush_output");
    w->set_up = m.attr("set_up_process");
    process::process_context* c = process::current_context();
    if (c && c->is_worker()) w->set_up();  // (not local_mode's driver)
    worker = w;
  }
  return *worker;
}

/// Functions and classes by the id of their pickle, unpickled once per process.
std::unordered_map<object_id, py::object>& function_cache() {
  static auto* cache = new std::unordered_map<object_id, py::object>;
  return *cache;
}
constexpr std::size_t max_cached_functions = 4096;

/// Fetches and unpickles a function or class this process knows only by id.
py::object load_by_id(const object_id& id) {
  detail::ref_node* n = detail::ref_from_id(id);
  detail::object_data d;
  try {
    py::gil_scoped_release nogil;
    d = detail::fetch(n, detail::no_deadline);
  } catch (...) {
    detail::release(n);
    throw;
  }
  return decode_copied(d, n);  // cached: must not pin what a closure holds
}

py::object function_of(const object_id& id) {
  auto& cache = function_cache();
  if (auto it = cache.find(id); it != cache.end()) return it->second;
  py::object f = load_by_id(id);
  if (cache.size() >= max_cached_functions) cache.clear();
  cache.emplace(id, f);
  return f;
}

struct decoded_call {
  call_header header;
  py::object payload;
  py::list resolved;
};

/// The call's arguments, read where they lie (views of stored ones in `views`).
decoded_call decode_call(detail::invocation& inv, argument_views& views) {
  if (inv.arg_count() < 2) throw usage_error("manta: a Python call without its arguments");
  decoded_call c;
  c.header = read_header(inv.arg(0));
  if (c.header.arg_ids.size() != inv.arg_count() - 1) throw usage_error("manta: a malformed Python call");
  auto argument = [&](std::size_t i) {
    const detail::arg_view a = inv.arg(i);
    return views.decode({a.type_tag, a.data, a.size}, c.header.arg_ids[i - 1]);
  };
  c.payload = argument(1);
  for (std::size_t i = 2; i < inv.arg_count(); ++i) c.resolved.append(argument(i));
  return c;
}

void store_result(detail::invocation& inv, std::size_t i, py::handle value) {
  encoded_object e(value);
  if (!e.has_buffers()) {
    const detail::encoded_value v = e.inline_value();
    if (v.size < large_pickle_bytes) return inv.set_result(i, v);
    py::gil_scoped_release nogil;  // may wait for the arena, as put_encoded
    inv.set_result(i, v);
  } else if (!e.contained.empty()) {
    detail::encoded_value v;
    v.type_tag = flat_tag;
    v.owned.resize(e.flat_size());
    v.size = v.owned.size();
    v.contained = e.contained;
    py::gil_scoped_release nogil;
    e.write_flat(reinterpret_cast<std::byte*>(v.owned.data()));
    inv.set_result(i, v);
  } else {
    py::gil_scoped_release nogil;
    detail::extent x = detail::allocate_extent(e.flat_size());
    e.write_flat(x.data);
    inv.set_result_extent(i, flat_tag, x, e.flat_size());
  }
}

void store_results(detail::invocation& inv, py::handle result) {
  const std::size_t n = inv.num_returns();
  if (n == 1) return store_result(inv, 0, result);
  if (!PySequence_Check(result.ptr()) || PySequence_Size(result.ptr()) != static_cast<Py_ssize_t>(n)) {
    PyErr_Clear();  // (a sequence without a length)
    const std::string message = "manta: a call with num_returns=" + std::to_string(n) + " returned " +
                                py::repr(result).cast<std::string>().substr(0, 200) + ", not a sequence of " +
                                std::to_string(n) + " values";
    // Raised as Python's ValueError, so the caller's get raises one (as Ray).
    PyErr_SetString(PyExc_ValueError, message.c_str());
    throw py::error_already_set();
  }
  const auto seq = py::reinterpret_borrow<py::sequence>(result);
  for (std::size_t i = 0; i < n; ++i) store_result(inv, i, seq[i]);
}

/// Runs `body` with the GIL; a Python exception leaves as a foreign_error that
/// carries its type's name, its traceback and the pickled exception. Views of
/// the arguments that outlive the call are pinned before it ends.
template <class F>
void run_python(F&& body) {
  std::string type_name, message;
  {
    py::gil_scoped_acquire gil;
    // A thread's Python state lives as long as the thread (an actor's
    // executors): made and dropped per call, it wiped threading.local.
    static thread_local bool state_kept = false;
    if (!state_kept) {
      gil.inc_ref();
      state_kept = true;
    }
    worker_side& w = side_of_worker();
    argument_views views;
    try {
      body(w, views);
      views.keep_escaped();
      return;
    } catch (py::error_already_set& e) {
      try {
        py::object trace = e.trace() ? e.trace() : py::none();
        py::tuple d = w.describe(e.value(), trace);
        type_name = d[0].cast<std::string>();
        message = d[1].cast<std::string>();
      } catch (py::error_already_set& inner) {
        type_name = "Exception";
        message = std::string("(the exception could not be described: ") + inner.what() + ")\n" + e.what();
      }
    } catch (...) {  // the runtime's own error (a result it could not store)
      views.keep_escaped();
      throw;
    }
    views.keep_escaped();  // (the exception and its frames are gone)
  }
  throw detail::foreign_error(std::move(type_name), message);
}

void invoke_task(const detail::function_info&, detail::invocation& inv) {
  run_python([&](worker_side& w, argument_views& views) {
    decoded_call c = decode_call(inv, views);
    py::object fn = function_of(c.header.function);
    py::object result = w.run_task(fn, c.payload, c.resolved);
    store_results(inv, result);
  });
}

void destroy_instance(void* p) {
  if (!Py_IsInitialized()) return;  // the interpreter is gone: nothing to run
  py::gil_scoped_acquire gil;
  delete static_cast<py::object*>(p);
}

void invoke_constructor(const detail::function_info&, detail::invocation& inv) {
  run_python([&](worker_side& w, argument_views& views) {
    decoded_call c = decode_call(inv, views);
    py::object cls = function_of(c.header.function);
    auto* instance = new py::object(w.construct(cls, c.payload, c.resolved));
    try {
      inv.adopt_instance(instance, &destroy_instance);
    } catch (...) {
      delete instance;
      throw;
    }
    detail::encoded_value unit;
    unit.type_tag = detail::type_tag<void>();
    inv.set_result(0, unit);
  });
}

void invoke_method(const detail::function_info&, detail::invocation& inv) {
  run_python([&](worker_side& w, argument_views& views) {
    decoded_call c = decode_call(inv, views);
    auto* self = static_cast<py::object*>(inv.instance());
    py::object result = w.run_method(*self, c.header.method, c.payload, c.resolved);
    store_results(inv, result);
  });
}

const detail::function_info& make(const char* name, detail::callable_kind kind, detail::invoker call) {
  detail::function_info info;
  info.name = name;
  info.id = detail::fnv1a(info.name);
  info.kind = kind;
  info.arity = 0;
  info.call = call;
  if (kind != detail::callable_kind::function) info.class_tag = actor_class_tag;
  return detail::register_function(std::move(info));
}

// Registered while the module loads, before init forks anything, so every
// process of the runtime finds them by id.
const detail::function_info& task_info = make("manta.python.task", detail::callable_kind::function, &invoke_task);
const detail::function_info& constructor_info =
    make("manta.python.actor", detail::callable_kind::constructor, &invoke_constructor);
const detail::function_info& method_info =
    make("manta.python.actor.method", detail::callable_kind::method, &invoke_method);

// ---- the runtime's forks (process/zygote.hpp: fork_hooks)

PyGILState_STATE fork_gil;

void before_fork() {
  fork_gil = PyGILState_Ensure();
  PyOS_BeforeFork();
}
void after_fork_in_parent() {
  PyOS_AfterFork_Parent();
  PyGILState_Release(fork_gil);
}
void after_fork_in_child() {
  PyOS_AfterFork_Child();
  PyGILState_Release(fork_gil);
  // The zygote and the processes it forks run Python only inside calls,
  // which take the GIL: other threads (an actor's executors) need it free.
  if (PyGILState_Check()) PyEval_SaveThread();
}

}  // namespace

const detail::function_info& task_function() { return task_info; }
const detail::function_info& actor_constructor() { return constructor_info; }
const detail::function_info& actor_method() { return method_info; }

void install_fork_hooks() {
  detail::register_actor_class(actor_class_tag, "python actor");
  process::set_fork_hooks({&before_fork, &after_fork_in_parent, &after_fork_in_child});
}

}  // namespace manta::python

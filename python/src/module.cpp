// python/src/module.cpp: manta._manta, the extension module under the Python
// package: the runtime's lifecycle, ObjectRef, put/get/wait, calls, actors
// and the runtime's errors as Python exceptions. The Ray-named API around it
// is Python (python/manta/__init__.py).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <manta/manta.hpp>

#include "calls.hpp"
#include "invokers.hpp"
#include "process/context.hpp"
#include "values.hpp"

namespace manta::python {
namespace {

using namespace std::chrono_literals;

/// Python's main thread: the one whose waits wake to run signal handlers.
unsigned long main_thread = 0;
constexpr auto signal_check_period = 100ms;

detail::deadline deadline_of(const py::object& timeout) {
  if (timeout.is_none()) return detail::no_deadline;
  const double s = timeout.cast<double>();
  if (!(s >= 0)) throw py::value_error("manta: timeout must be None or >= 0 seconds");
  return detail::deadline_after(std::chrono::duration<double>(s));
}

bool checks_signals() {
  if (PyThread_get_thread_ident() != main_thread) return false;
  process::process_context* c = process::current_context();
  return c && !c->is_worker();
}

/// Waits until `num` of `nodes` are ready or `until` passes, with the GIL
/// released; on Python's main thread it wakes every 100 ms to run signal
/// handlers, and a KeyboardInterrupt (or any handler's exception) cancels
/// the tasks it waited for before it propagates.
void wait_ready(const std::vector<detail::ref_node*>& nodes, std::size_t num, detail::deadline until,
                std::vector<bool>& ready) {
  const bool check = checks_signals();
  for (;;) {
    const detail::deadline slice = check ? std::min(until, detail::deadline_after(signal_check_period)) : until;
    {
      py::gil_scoped_release nogil;
      detail::wait_nodes(nodes, num, slice, ready);
    }
    if (static_cast<std::size_t>(std::count(ready.begin(), ready.end(), true)) >= num) return;
    if (slice >= until) return;
    if (PyErr_CheckSignals() != 0) {
      py::error_already_set interrupted;
      for (std::size_t i = 0; i < nodes.size(); ++i)
        if (!ready[i]) try {
            detail::cancel_producer(nodes[i]);
          } catch (const std::exception&) {
          }
      throw interrupted;
    }
  }
}

std::vector<detail::ref_node*> nodes_of(const py::list& refs) {
  std::vector<detail::ref_node*> nodes;
  nodes.reserve(refs.size());
  for (py::handle r : refs) {
    if (!py::isinstance<object_ref>(r))
      throw py::type_error("manta: get/wait take ObjectRefs (or a list of them), not " +
                           std::string(py::str(py::type::of(r).attr("__name__"))));
    detail::ref_node* n = r.cast<const object_ref&>().node();
    if (!n) throw py::value_error("manta: an empty ObjectRef");
    nodes.push_back(n);
  }
  return nodes;
}

py::object value_of(detail::ref_node* n) {
  detail::object_data d;
  {
    py::gil_scoped_release nogil;
    d = detail::fetch(n, detail::no_deadline);
  }
  detail::acquire(n);  // decode takes over one count and the pin
  return decode(d, n);
}

py::list get(const py::list& refs, const py::object& timeout) {
  std::vector<detail::ref_node*> nodes = nodes_of(refs);
  const detail::deadline until = deadline_of(timeout);
  py::list out(nodes.size());
  // One at a time, in order, as the C++ get: a wait over all of them would
  // scan every pending one at each look.
  std::vector<detail::ref_node*> one(1);
  std::vector<bool> ready(1);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    one[0] = nodes[i];
    try {
      wait_ready(one, 1, until, ready);
    } catch (py::error_already_set&) {  // interrupted: what it had yet to wait for is cancelled too
      for (std::size_t j = i + 1; j < nodes.size(); ++j) try {
          detail::cancel_producer(nodes[j]);
        } catch (const std::exception&) {
        }
      throw;
    }
    if (!ready[0])
      throw manta::timeout_error("manta: get timed out after " + py::str(timeout).cast<std::string>() + " s with " +
                                 std::to_string(nodes.size() - i) + " of " + std::to_string(nodes.size()) +
                                 " objects not ready");
    out[i] = value_of(nodes[i]);
  }
  return out;
}

py::list wait(const py::list& refs, std::size_t num_returns, const py::object& timeout) {
  std::vector<detail::ref_node*> nodes = nodes_of(refs);
  if (num_returns > nodes.size())
    throw py::value_error("manta: wait with num_returns=" + std::to_string(num_returns) + " of " +
                          std::to_string(nodes.size()) + " refs");
  std::vector<bool> ready(nodes.size());
  wait_ready(nodes, num_returns, deadline_of(timeout), ready);
  py::list out(nodes.size());
  for (std::size_t i = 0; i < nodes.size(); ++i) out[i] = py::bool_(ready[i]);
  return out;
}

object_ref put(py::handle value) {
  if (py::isinstance<object_ref>(value))
    throw py::type_error("manta: put of an ObjectRef (pass the ref itself instead)");
  encoded_object e(value);
  return object_ref(put_encoded(e));
}

/// One ref, or a list of them for a call with several returns.
py::object refs_of(const std::vector<detail::ref_node*>& nodes) {
  if (nodes.size() == 1) return py::cast(object_ref(nodes[0]));
  py::list out(nodes.size());
  for (std::size_t i = 0; i < nodes.size(); ++i) out[i] = py::cast(object_ref(nodes[i]));
  return out;
}

detail::task_options make_options(double num_cpus, double num_gpus, std::map<std::string, double> resources,
                                  std::uint64_t memory, int max_retries, bool retry_exceptions, std::string name,
                                  double timeout, int max_calls, int max_restarts, int max_task_retries,
                                  int max_concurrency, std::string class_label) {
  detail::task_options o;
  if (!(num_cpus >= 0)) throw py::value_error("manta: num_cpus must be >= 0");
  if (!(num_gpus >= 0)) throw py::value_error("manta: num_gpus must be >= 0");
  if (max_concurrency < 1) throw py::value_error("manta: max_concurrency must be >= 1");
  if (max_calls < 0) throw py::value_error("manta: max_calls must be >= 0");
  o.num_cpus = num_cpus;
  o.num_gpus = num_gpus;
  o.resources = detail::checked_resources(std::move(resources));
  o.memory = memory;
  o.max_retries = max_retries;
  o.retry_exceptions = retry_exceptions;
  o.name = std::move(name);
  if (timeout > 0) o.timeout_ns = detail::timeout_ns(std::chrono::duration<double>(timeout));
  o.max_calls = max_calls;
  o.max_restarts = max_restarts;
  o.max_task_retries = max_task_retries;
  o.max_concurrency = max_concurrency;
  o.class_label = std::move(class_label);
  return o;
}

/// The runtime's errors as manta.exceptions' classes (Ray's names).
void translate(std::exception_ptr p) {
  py::module_ ex = py::module_::import("manta.exceptions");
  auto raise = [&](const char* cls, const std::string& what) {
    PyErr_SetString(ex.attr(cls).ptr(), what.c_str());
  };
  try {
    std::rethrow_exception(p);
  } catch (const task_error& e) {
    py::object exc = ex.attr("_from_task_error")(e.remote_type(), e.message(), e.function_name(), e.pid(),
                                                 e.chain(), e.what());
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  } catch (const worker_crashed_error& e) {
    raise("WorkerCrashedError", e.what());
  } catch (const timeout_error& e) {
    raise("GetTimeoutError", e.what());
  } catch (const task_cancelled_error& e) {
    raise("TaskCancelledError", e.what());
  } catch (const actor_died_error& e) {
    raise("ActorDiedError", e.what());
  } catch (const object_store_full& e) {
    raise("ObjectStoreFullError", e.what());
  } catch (const out_of_memory_error& e) {
    raise("OutOfMemoryError", e.what());
  } catch (const node_died_error& e) {
    raise("NodeDiedError", e.what());
  } catch (const usage_error& e) {
    raise("UsageError", e.what());
  } catch (const error& e) {
    raise("RayError", e.what());
  }
}

}  // namespace

void define_module(py::module_& m) {
  m.doc() = "manta's runtime for Python (use the manta package, not this module)";
  main_thread = PyThread_get_thread_ident();
  install_fork_hooks();
  load_side();
  define_value_types(m);
  py::register_exception_translator(&translate);

  py::class_<object_ref>(m, "ObjectRef")
      .def("hex", [](const object_ref& r) {
        char s[33];
        std::snprintf(s, sizeof s, "%016llx%016llx", static_cast<unsigned long long>(r.id().hi),
                      static_cast<unsigned long long>(r.id().lo));
        return std::string(s);
      })
      .def("__repr__", [](py::handle self) { return "ObjectRef(" + self.attr("hex")().cast<std::string>() + ")"; })
      .def("_id", [](const object_ref& r) { return py::make_tuple(r.id().hi, r.id().lo); })
      .def("__eq__", [](const object_ref& a, py::handle b) {
        return py::isinstance<object_ref>(b) && a.id() == b.cast<const object_ref&>().id();
      })
      .def("__hash__", [](const object_ref& r) { return std::hash<object_id>{}(r.id()); })
      .def("__reduce__", [](const object_ref& r) {
        // Noted as held inside the value being pickled: it lives as long as that value.
        if (!r.id().empty()) detail::ref_collector::note(r.id());
        return py::make_tuple(py::module_::import("manta._serialization").attr("rebuild_ref"),
                              py::make_tuple(r.id().hi, r.id().lo));
      });
  m.def("_ref_from_id", [](std::uint64_t hi, std::uint64_t lo) {
    object_id id{hi, lo};
    return object_ref(id.empty() ? nullptr : detail::ref_from_id(id));
  });

  m.def("init", [](int num_workers, std::size_t object_store_bytes, int num_gpus,
                   std::map<std::string, double> resources, std::string address, std::string log_dir,
                   bool ignore_reinit, bool local_mode, double memory_threshold, bool progress) {
    options o;
    o.num_workers = num_workers;
    o.object_store_bytes = object_store_bytes;
    o.num_gpus = num_gpus;
    o.resources = std::move(resources);
    o.address = std::move(address);
    o.log_dir = std::move(log_dir);
    o.ignore_reinit = ignore_reinit;
    o.local_mode = local_mode;
    o.memory_threshold = memory_threshold;
    o.progress = progress;
    // Released: a node's init serves the cluster and never returns, and the
    // runtime's forks take the GIL for themselves (fork hooks).
    py::gil_scoped_release nogil;
    manta::init(o);
  });
  m.def("shutdown", [] { manta::shutdown(); }, py::call_guard<py::gil_scoped_release>());
  m.def("is_initialized", [] { return manta::is_initialized(); });
  m.def("in_worker", [] {
    process::process_context* c = process::current_context();
    return c && c->is_worker();
  });
  m.def("put", &python::put);
  m.def("get", &python::get);
  m.def("wait", &python::wait);

  py::class_<detail::task_options>(m, "TaskOptions")
      .def(py::init(&make_options), py::arg("num_cpus") = 1.0, py::arg("num_gpus") = 0.0,
           py::arg("resources") = std::map<std::string, double>{}, py::arg("memory") = 0,
           py::arg("max_retries") = 3, py::arg("retry_exceptions") = false, py::arg("name") = "",
           py::arg("timeout") = 0.0, py::arg("max_calls") = 0, py::arg("max_restarts") = 0,
           py::arg("max_task_retries") = 0, py::arg("max_concurrency") = 1, py::arg("class_label") = "")
      .def_readonly("name", &detail::task_options::name)
      .def_readonly("num_cpus", &detail::task_options::num_cpus);

  m.def("submit_task", [](const object_ref& fn, py::handle payload, py::handle refs,
                          const detail::task_options& o, int num_returns) {
    return refs_of(submit_call(task_function(), detail::call_mode::call, &fn, nullptr, {}, payload, refs, o,
                                 num_returns));
  });
  m.def("create_actor", [](const object_ref& cls, py::handle payload, py::handle refs,
                           const detail::task_options& o) {
    return object_ref(
        submit_call(actor_constructor(), detail::call_mode::construct, &cls, nullptr, {}, payload, refs, o, 1)[0]);
  });
  m.def("call_method", [](const object_ref& actor, const std::string& method, py::handle payload, py::handle refs,
                          int num_returns, const std::string& name, double timeout) {
    detail::task_options o;
    o.num_cpus = 0;  // the actor holds its resources; calls take none
    o.name = name;
    if (timeout > 0) o.timeout_ns = detail::timeout_ns(std::chrono::duration<double>(timeout));
    return refs_of(submit_call(actor_method(), detail::call_mode::method, nullptr, &actor, method, payload, refs,
                                 o, num_returns));
  });
  m.def("find_actor", [](const std::string& name) -> py::object {
    detail::ref_node* n = detail::find_actor(name, actor_class_tag);
    if (!n) return py::none();
    return py::cast(object_ref(n));
  });
  // Released for local mode's sake, as submit_call.
  m.def("kill_actor", [](const object_ref& a) {
    py::gil_scoped_release nogil;
    detail::kill_actor(a.node());
  });
  m.def("cancel", [](const object_ref& r) {
    py::gil_scoped_release nogil;
    detail::cancel_producer(r.node());
  });
  m.def("gpu_ids", [] { return manta::gpu_ids(); });
  m.def("resources", [](bool available) { return detail::node_resources(available); });
  m.def("node_id", [] { return manta::node_id(); });
  m.def("nodes", [] {
    py::list out;
    for (const node_info& n : manta::nodes()) {
      py::dict d;
      d["NodeID"] = n.id;
      d["Alive"] = n.alive;
      d["NodeManagerAddress"] = n.address;
      d["Resources"] = n.resources;
      out.append(d);
    }
    return out;
  });
}

}  // namespace manta::python

PYBIND11_MODULE(_manta, m) { manta::python::define_module(m); }

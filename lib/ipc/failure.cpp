// ipc/failure.cpp: failures to exceptions and back, and failure chains.
#include "ipc/failure.hpp"

#include <cxxabi.h>

#include <cstdlib>
#include <typeinfo>
#include <vector>

#include <manta/detail/foreign_error.hpp>
#include <manta/errors.hpp>

namespace manta::detail {
/// Readable name of a mangled type name (declared in process/context.hpp).
std::string demangle(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(mangled, nullptr, nullptr, &status),
                                           std::free);
  return status == 0 && d ? std::string(d.get()) : std::string(mangled);
}
}  // namespace manta::detail

namespace manta::ipc {
namespace {
// A task's own message is kept whole up to this; beyond, it would only bloat
// every message and error that carries it.
constexpr std::size_t max_message_bytes = 64 << 10;
// Links of a chain spelled out at each end of a very long chain.
constexpr std::size_t chain_ends = 32;

std::string bounded(std::string s) {
  if (s.size() > max_message_bytes) {
    s.resize(max_message_bytes);
    s += "... (message cut at 64 KiB)";
  }
  return s;
}
}  // namespace

void throw_error(const error_info& e) {
  const std::string via = e.chain.empty() ? "" : " (via " + e.chain + ")";
  switch (e.kind) {
    case error_kind::task_exception:
      throw task_error(e.remote_type, e.message, e.function, e.pid, e.chain, e.stack);
    case error_kind::worker_crashed:
      throw worker_crashed_error(e.message + via, e.function, e.pid, e.signal, e.stack);
    case error_kind::actor_died:
      throw actor_died_error(e.message);
    case error_kind::object_store_full:
      throw object_store_full(e.message);
    case error_kind::usage:
      throw usage_error(e.message);
    case error_kind::cancelled:
      throw task_cancelled_error(e.message + via);
    case error_kind::node_died:
      throw node_died_error(e.message + via);
    case error_kind::timeout:
      throw timeout_error(e.message + via);
    case error_kind::out_of_memory:
      throw out_of_memory_error(e.message + via);
  }
  throw error(e.message);
}

error_info error_from_exception(std::exception_ptr current, const std::string& name,
                                std::int32_t pid) {
  try {
    std::rethrow_exception(current);
  } catch (const task_error& e) {
    // A get inside the task rethrew another task's failure: pass the root cause on.
    return {error_kind::task_exception, e.remote_type(), e.message(), e.function_name(),
            e.chain().empty() ? name : name + " <- " + e.chain(), e.pid(), 0};
  } catch (const detail::foreign_error& e) {
    return {error_kind::task_exception, e.type_name(), bounded(e.what()), name, {}, pid, 0};
  } catch (const object_store_full& e) {
    return {error_kind::object_store_full, "manta::object_store_full", bounded(e.what()), name, {}, pid, 0};
  } catch (const actor_died_error& e) {
    return {error_kind::actor_died, "manta::actor_died_error", bounded(e.what()), name, {}, pid, 0};
  } catch (const node_died_error& e) {
    return {error_kind::node_died, "manta::node_died_error", bounded(e.what()), name, {}, pid, 0};
  } catch (const std::exception& e) {
    return {error_kind::task_exception, detail::demangle(typeid(e).name()), bounded(e.what()), name,
            {}, pid, 0};
  } catch (...) {
    // `throw 42`, a user's own class: its type is known to the C++ runtime.
    const std::type_info* type = abi::__cxa_current_exception_type();
    const std::string type_name = type ? detail::demangle(type->name()) : "unknown exception";
    return {error_kind::task_exception, type_name, "a non-std exception of type " + type_name + " was thrown",
            name, {}, pid, 0};
  }
}

failure::~failure() {
  // Unlinks the chain iteratively: a recursive release of 100,000 links would
  // overflow the stack.
  std::shared_ptr<const failure> next = std::move(cause_);
  while (next && next.use_count() == 1) {
    std::shared_ptr<const failure> after = std::move(next->cause_);
    next = std::move(after);
  }
}

const failure& failure::root() const noexcept {
  const failure* f = this;
  while (f->cause_) f = f->cause_.get();
  return *f;
}

error_info failure::describe() const {
  std::vector<const std::string*> links;
  const failure* f = this;
  for (; f->cause_; f = f->cause_.get()) links.push_back(&f->dependent_);
  error_info e = f->root_;
  if (links.empty()) return e;
  std::string chain;
  auto add = [&](const std::string& name) {
    if (!chain.empty()) chain += " <- ";
    chain += name;
  };
  if (links.size() <= 2 * chain_ends) {
    for (const auto* name : links) add(*name);
  } else {
    for (std::size_t i = 0; i < chain_ends; ++i) add(*links[i]);
    add("... (" + std::to_string(links.size() - 2 * chain_ends) + " more) ...");
    for (std::size_t i = links.size() - chain_ends; i < links.size(); ++i) add(*links[i]);
  }
  if (!e.chain.empty()) add(e.chain);
  e.chain = std::move(chain);
  return e;
}

}  // namespace manta::ipc

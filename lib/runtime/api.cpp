// runtime/api.cpp: manta::init, manta::shutdown and the introspection calls.
#include <cstdlib>
#include <mutex>

#include <manta/errors.hpp>
#include <manta/runtime.hpp>

#include "runtime/introspect.hpp"
#include "runtime/node_runtime.hpp"

namespace manta {
namespace {
std::mutex lifecycle_mu;
runtime::node_runtime* node = nullptr;

bool in_worker() {
  process::process_context* c = process::current_context();
  return c && c->is_worker();
}
}  // namespace

void init(const options& opts) {
  // Workers are forked while init holds lifecycle_mu: they must never take it.
  if (in_worker()) throw usage_error("manta::init called inside a task");
  std::lock_guard lock(lifecycle_mu);
  if (process::current_context()) {
    if (opts.ignore_reinit) return;
    throw usage_error("manta::init called twice; shut down first or set options.ignore_reinit");
  }
  if (!opts.address.empty())
    throw usage_error("manta: options.address (joining a cluster) needs the TCP bridge, "
                      "which this build does not include");
  if (opts.num_workers < 0) throw usage_error("manta: options.num_workers must be >= 0");
  node = new runtime::node_runtime(opts);
  process::set_current_context(node);
  static bool at_exit = (std::atexit([] { shutdown(); }), true);
  (void)at_exit;
}

void shutdown() {
  if (in_worker()) return;  // a worker's runtime ends with its process
  std::lock_guard lock(lifecycle_mu);
  if (!node) return;
  node->begin_stop();
  process::exclusive_context_scope exclusive;
  node->finish_stop();
  process::set_current_context(nullptr);
  delete node;
  node = nullptr;
}

bool is_initialized() noexcept { return process::current_context() != nullptr; }

namespace detail {

std::vector<int> runtime_process_ids() {
  if (in_worker()) return {};
  std::lock_guard lock(lifecycle_mu);
  std::vector<int> out;
  if (node)
    for (pid_t p : node->process_ids()) out.push_back(p);
  return out;
}

std::size_t arena_used_bytes() {
  if (in_worker()) return {};
  std::lock_guard lock(lifecycle_mu);
  return node ? node->arena().used_bytes() : 0;
}

runtime_counters counters() {
  if (in_worker()) return {};
  std::lock_guard lock(lifecycle_mu);
  return node ? node->counters() : runtime_counters{};
}

spill_counters spilling() {
  if (in_worker()) return {};
  std::lock_guard lock(lifecycle_mu);
  return node ? node->spilling() : spill_counters{};
}

std::size_t object_count() {
  if (in_worker()) return {};
  std::lock_guard lock(lifecycle_mu);
  return node ? node->object_count() : 0;
}

}  // namespace detail
}  // namespace manta

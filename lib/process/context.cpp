// process/context.cpp: the entry points of detail/core.hpp and task_request.hpp,
// dispatching to this process's context; and small shared helpers (type names,
// ref collection).
#include "process/context.hpp"

#include <manta/detail/progress.hpp>

#include <cxxabi.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#include <manta/errors.hpp>
#include <manta/actor.hpp>
#include <manta/nodes.hpp>
#include <manta/pool.hpp>
#include <manta/registry.hpp>

#include "observe/thread_name.hpp"
#include "process/args_blob.hpp"

namespace manta::process {
namespace {
std::atomic<process_context*> current{nullptr};
// Entry points hold it shared; tearing a context down holds it exclusively.
std::shared_mutex context_mu;
thread_local bool exclusive_here = false;
thread_local int shared_depth = 0;  // entry points nest (get -> release -> ...)
std::atomic<bool> exit_begun{false};
std::atomic<pthread_t> exiting_thread{};
}  // namespace

void mark_exiting() noexcept {
  exiting_thread.store(::pthread_self());
  exit_begun.store(true, std::memory_order_release);
}

void forget_exiting() noexcept { exit_begun.store(false, std::memory_order_release); }

bool exiting_elsewhere() noexcept {
  // (The runtime's own threads never park: shutdown joins them.)
  return exit_begun.load(std::memory_order_acquire) && !::pthread_equal(exiting_thread.load(), ::pthread_self()) &&
         !observe::is_runtime_thread();
}

void park_until_exit() noexcept {
  if (shared_depth > 0 && !exclusive_here) {
    shared_depth = 0;
    context_mu.unlock_shared();
  }
  for (;;) ::pause();
}

exclusive_context_scope::exclusive_context_scope() {
  context_mu.lock();
  exclusive_here = true;
}
exclusive_context_scope::~exclusive_context_scope() {
  exclusive_here = false;
  context_mu.unlock();
}

context_use::context_use() : counted_(!exclusive_here) {
  if (counted_ && shared_depth++ == 0) context_mu.lock_shared();
}

context_use::~context_use() {
  if (counted_ && --shared_depth == 0) context_mu.unlock_shared();
}

namespace {
std::atomic<bool> forked_away{false};  // this process is a fork of a driver's
std::atomic<bool> was_shut_down{false};  // shutdown ended the runtime, and no init followed
std::atomic<bool> forked{false};       // a fork child of a process that made runtimes
std::atomic<bool> spawned{false};      // the zygote or one of its descendants
/// The epochs of the runtimes made since the last fork that left one behind:
/// a ring, lock-free because a fork may land anywhere (a child that makes more
/// runtimes than it holds leaves the oldest ones' late refs unfreed).
std::array<std::atomic<std::uint32_t>, 64> made_here{};
std::atomic<std::size_t> made_count{0};
std::atomic<bool> made_any{false};  // a runtime was ever made in this process (or its parents)
}  // namespace

std::uint32_t new_epoch() {
  std::random_device rd;
  std::uint32_t e = 0;
  while (e == 0) e = rd();
  made_any.store(true);
  made_here[made_count.fetch_add(1) % made_here.size()].store(e);
  return e;
}

bool made_since_fork(std::uint32_t epoch) noexcept {
  if (!forked.load()) return true;
  const std::size_t n = std::min(made_count.load(), made_here.size());
  for (std::size_t i = 0; i < n; ++i)
    if (made_here[i].load() == epoch) return true;
  return false;
}

process_context* current_context() noexcept { return current.load(std::memory_order_acquire); }
void set_current_context(process_context* c) noexcept {
  if (c) was_shut_down.store(false, std::memory_order_relaxed);
  current.store(c, std::memory_order_release);
}

void note_shut_down() noexcept { was_shut_down.store(true, std::memory_order_relaxed); }

bool spawned_by_runtime() noexcept { return spawned.load(std::memory_order_relaxed); }
void mark_spawned_by_runtime() noexcept { spawned.store(true, std::memory_order_relaxed); }

process_context& require_context(const char* what) {
  process_context* c = current_context();
  if (!c && exiting_elsewhere()) park_until_exit();
  if (!c)
    throw usage_error(std::string("manta: ") + what + " needs a running runtime; " +
                      (was_shut_down.load(std::memory_order_relaxed)
                           ? "it was shut down (call manta::init() again to start another)"
                           : "call manta::init() first") +
                      (forked_away.load() ? " (this process was forked from one running manta: the "
                                            "runtime stays with the parent; init starts one of its own)"
                                          : ""));
  return *c;
}

void forget_parents_allocations() noexcept {
  // Threads that held it shared in the parent (dropping refs) do not exist here.
  new (&context_mu) std::shared_mutex();
  shared_depth = 0;
  if (!made_any.load()) return;  // no runtime ever allocated here: TBB's allocator is as good as ever
  for (auto& e : made_here) e.store(0);  // (a slot counted but not yet written reads 0, never a parent's epoch)
  made_count.store(0);
  forked.store(true);
  allocate_from_malloc.store(true);
}

void forget_context_after_fork() noexcept {
  current.store(nullptr, std::memory_order_release);
  forked_away.store(true);
  forget_parents_allocations();
}

}  // namespace manta::process

namespace manta::detail {
using process::context_use;
using process::require_context;

void release_slow(ref_node* n) noexcept {
  context_use use;
  process::process_context* c = process::current_context();
  if (c && n->epoch == c->epoch())
    c->release(n);
  else if (process::made_since_fork(n->epoch))
    delete n;  // the runtime that made it is gone: nothing else refers to it
  // else: the parent's, in a fork child: freeing it would free the parent's bytes
}

ref_node* put_value(const encoded_value& v) {
  context_use use;
  return require_context("put").put(v);
}

extent allocate_extent(std::size_t bytes) {
  context_use use;
  return require_context("make_buffer").allocate_extent(bytes);
}

void free_extent(const extent& x) noexcept {
  context_use use;
  if (process::process_context* c = process::current_context()) c->free_extent(x);
}

ref_node* put_extent(std::uint64_t tag, const extent& x, std::size_t size) {
  context_use use;
  return require_context("put").put_extent(tag, x, size);
}

object_data fetch(ref_node* n, deadline until) {
  context_use use;
  return require_context("get").fetch(n, until);
}

void repin(ref_node* n) noexcept {
  context_use use;
  process::process_context* c = process::current_context();
  if (c && n->epoch == c->epoch()) c->repin(n);
}

void unpin(ref_node* n) noexcept {
  context_use use;
  process::process_context* c = process::current_context();
  if (c && n->epoch == c->epoch()) c->unpin(n);  // else its runtime, and the pin, are gone
}

void wait_nodes(std::span<ref_node* const> nodes, std::size_t num, deadline until,
                std::vector<bool>& ready) {
  context_use use;
  auto& ctx = require_context("wait");
  if (num > 1 && !ctx.is_worker() && progress_wanted()) {
    // With a bar: waited for in slices, the bar redrawn between them.
    progress_bar bar(num, "wait");
    for (;;) {
      ctx.wait(nodes, num, std::min(until, clock::now() + std::chrono::milliseconds(100)), ready);
      auto n = static_cast<std::size_t>(std::count(ready.begin(), ready.end(), true));
      bar.set(std::min(n, num));
      if (n >= num || clock::now() >= until) return;
    }
  }
  ctx.wait(nodes, num, until, ready);
}

ref_node* ref_from_id(const object_id& id) {
  context_use use;
  return require_context("reading an object_ref").ref_from_id(id);
}

void submit(task_request&& request, ref_node** returns) {
  context_use use;
  // (Named as the caller wrote it.)
  const char* what = request.mode == call_mode::construct ? "actor<T>().remote"
                     : request.mode == call_mode::method  ? "handle.task(&T::method).remote"
                     : request.mode == call_mode::call    ? "task(f).remote"
                                                          : "pool";
  require_context(what).submit(std::move(request), returns);
}

ref_node* find_actor(const std::string& name, std::uint64_t class_tag) {
  context_use use;
  return require_context("get_actor").find_actor(name, class_tag);
}

void kill_actor(ref_node* node) {
  context_use use;
  require_context("kill").kill_actor(node);
}

void cancel_producer(ref_node* node) {
  context_use use;
  require_context("cancel").cancel_producer(node);
}

std::vector<int> current_gpu_ids() {
  context_use use;
  process::process_context* c = process::current_context();
  return c ? c->gpu_ids() : std::vector<int>{};
}

std::map<std::string, double> node_resources(bool available_only) {
  context_use use;
  process::process_context& c = require_context(available_only ? "available_resources" : "cluster_resources");
  std::map<std::string, double> all = c.resources(available_only);
  if (!available_only) {  // the cluster's other nodes, while alive (a node's table lists it too)
    const std::string self = manta::node_id();
    for (const auto& n : c.cluster_nodes())
      if (n.alive && n.id != self)
        for (const auto& [name, amount] : n.resources) all[name] += amount;
  }
  return all;
}

std::size_t worker_count() {
  context_use use;
  return require_context("pool").worker_count();
}

void arg_writer::value(const encoded_value& v) {
  if (v.size > max_inline_bytes || request_.args.size() + v.size > max_inline_args) {
    // Large arguments are stored once and passed by reference.
    ref_node* n = put_value(v);
    request_.deps.push_back(n);
    process::append_arg_header(request_.args, process::arg_kind::ref, v.type_tag,
                               static_cast<std::uint32_t>(request_.deps.size() - 1));
  } else {
    process::append_arg_header(request_.args, process::arg_kind::value, v.type_tag,
                               static_cast<std::uint32_t>(v.size));
    request_.args.append(static_cast<const char*>(v.data()), v.size);
    request_.contained.insert(request_.contained.end(), v.contained.begin(), v.contained.end());
  }
  ++request_.arg_count;
}

void arg_writer::ref(ref_node* node, std::uint64_t tag) {
  acquire(node);
  request_.deps.push_back(node);
  process::append_arg_header(request_.args, process::arg_kind::ref, tag,
                             static_cast<std::uint32_t>(request_.deps.size() - 1));
  ++request_.arg_count;
}

namespace {
std::mutex type_names_mu;
std::unordered_map<std::uint64_t, std::string>& type_names() {
  static auto* names = [] {
    // As the function registry: a fork never leaves the child's copy locked.
    ::pthread_atfork([] { type_names_mu.lock(); }, [] { type_names_mu.unlock(); },
                     [] { type_names_mu.unlock(); });
    return new std::unordered_map<std::uint64_t, std::string>();
  }();
  return *names;
}
thread_local ref_collector* active_collector = nullptr;
}  // namespace

void remember_type_name(std::uint64_t tag, const char* mangled) {
  std::lock_guard lock(type_names_mu);
  type_names().emplace(tag, demangle(mangled));
}

std::string type_name_of_tag(std::uint64_t tag) {
  std::lock_guard lock(type_names_mu);
  auto it = type_names().find(tag);
  return it != type_names().end() ? it->second : "type#" + std::to_string(tag);
}

void throw_arg_mismatch(std::size_t index, std::uint64_t expected, std::uint64_t got) {
  throw usage_error("manta: argument " + std::to_string(index) + " was stored as " +
                    type_name_of_tag(got) + " but the parameter expects " +
                    type_name_of_tag(expected));
}

ref_collector::ref_collector(std::vector<object_id>& out) noexcept
    : out_(&out), previous_(active_collector) {
  active_collector = this;
}
ref_collector::~ref_collector() { active_collector = previous_; }
void ref_collector::note(const object_id& id) noexcept {
  if (active_collector) active_collector->out_->push_back(id);
}

}  // namespace manta::detail

namespace manta {

std::string node_id() {
  process::context_use use;
  // The runtime's epoch: drawn at init, known to every process of it.
  char id[9];
  std::snprintf(id, sizeof id, "%08x", process::require_context("node_id").epoch());
  return id;
}

std::vector<node_info> nodes() {
  process::context_use use;
  process::process_context& c = process::require_context("nodes");
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "localhost");
  std::vector<node_info> all{node_info{node_id(), host, c.resources(false), true}};
  for (auto& n : c.cluster_nodes())  // (a node of a cluster is in the table it hears: listed once)
    if (n.id != all.front().id) all.push_back(std::move(n));
  return all;
}
}  // namespace manta

// runtime/local_runtime.cpp: options.local_mode: tasks and methods run in the
// driver, synchronously, one at a time.
#include "runtime/local_runtime.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <limits>
#include <thread>

#include <manta/errors.hpp>
#include <manta/registry.hpp>

#include "process/args_blob.hpp"

namespace manta::runtime {
namespace {

/// Objects are 64-byte aligned, as in the arena (spans read them in place).
std::byte* allocate_bytes(std::size_t n) {
  const std::size_t rounded = (std::max<std::size_t>(n, 1) + 63) / 64 * 64;
  auto* p = static_cast<std::byte*>(std::aligned_alloc(64, rounded));
  if (!p) throw object_store_full("manta: local mode: no memory for an object of " + std::to_string(n) + " bytes");
  return p;
}

ipc::error_info actor_error(const std::string& label, const std::string& what) {
  return {ipc::error_kind::actor_died, "manta::actor_died_error", "manta: actor " + label + " " + what, label, {}, 0, 0};
}

}  // namespace

struct local_runtime::actor {
  std::string label;
  std::uint64_t class_tag = 0;
  void* instance = nullptr;
  void (*destroy)(void*) = nullptr;
  std::optional<ipc::error_info> dead;  ///< why it is gone
  int running = 0;  ///< its constructor or methods on this thread's stack (one kills it from inside)

  /// Marks it gone; the instance goes now, or when the last call on it returns.
  void end(ipc::error_info why) {
    if (!dead) dead = std::move(why);
    if (instance && running == 0) destroy(std::exchange(instance, nullptr));
  }
};

struct local_runtime::object final : detail::ref_node {
  std::uint64_t tag = 0;
  std::byte* bytes = nullptr;  ///< owned (allocate_bytes)
  std::size_t size = 0;
  std::vector<detail::ref_node*> contained;  ///< counted: refs serialised inside the value
  ipc::failure_ptr failed;
  std::shared_ptr<local_runtime::actor> actor;  ///< actor handles

  ~object() override {
    std::free(bytes);
    for (auto* c : contained) detail::release(c);
  }
};

namespace {

/// One result of a call, kept until the call has succeeded.
struct pending_result {
  bool set = false;
  std::uint64_t tag = 0;
  std::byte* bytes = nullptr;
  std::size_t size = 0;
  std::vector<detail::ref_node*> contained;
};

class local_invocation final : public detail::invocation {
 public:
  local_invocation(process::process_context& rt, std::vector<detail::arg_view> args, std::size_t num_returns,
                   local_runtime::actor* target)
      : rt_(rt), args_(std::move(args)), results_(num_returns), actor_(target) {}
  ~local_invocation() {
    for (auto& r : results_) {
      std::free(r.bytes);
      for (auto* c : r.contained) detail::release(c);
    }
  }

  std::size_t arg_count() const override { return args_.size(); }
  detail::arg_view arg(std::size_t i) const override { return args_.at(i); }
  std::size_t num_returns() const override { return results_.size(); }
  void set_result(std::size_t i, const detail::encoded_value& v) override {
    pending_result& r = slot(i);
    r.bytes = allocate_bytes(v.size);
    std::memcpy(r.bytes, v.data(), v.size);
    r.tag = v.type_tag;
    r.size = v.size;
    for (const auto& id : v.contained) r.contained.push_back(rt_.ref_from_id(id));
  }
  void set_result_extent(std::size_t i, std::uint64_t tag, const detail::extent& x, std::size_t size) override {
    pending_result& r = slot(i);
    r.bytes = x.data;
    r.tag = tag;
    r.size = size;
  }
  void* instance() override { return actor_ ? actor_->instance : nullptr; }
  void adopt_instance(void* object, void (*destroy)(void*)) override {
    if (!actor_ || actor_->instance) throw usage_error("manta: this actor already has an instance");
    actor_->instance = object;
    actor_->destroy = destroy;
  }

  std::vector<pending_result>& results() { return results_; }

 private:
  pending_result& slot(std::size_t i) {
    pending_result& r = results_.at(i);
    if (r.set) throw usage_error("manta: a task set the same result twice");
    r.set = true;
    return r;
  }

  process::process_context& rt_;
  std::vector<detail::arg_view> args_;
  std::vector<pending_result> results_;
  local_runtime::actor* actor_;
};

}  // namespace

local_runtime::local_runtime(const options& opts)
    : opts_(opts),
      epoch_(process::new_epoch()),
      // The CPUs the process runtime would offer, so a request fits in both or neither.
      ledger_(ledger_for(opts, opts.num_workers > 0 ? opts.num_workers
                                                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())))) {
  if (opts_.worker_setup) {
    const detail::function_info& f = detail::function_for(opts_.worker_setup);
    try {
      f.fn();
    } catch (const std::exception& e) {
      setup_error_.message = "manta: worker_setup '" + f.name + "' failed in the driver (local mode): " + e.what();
    } catch (...) {
      setup_error_.message = "manta: worker_setup '" + f.name + "' failed in the driver (local mode): a non-std exception";
    }
  }
}

local_runtime::~local_runtime() = default;

void local_runtime::stop() {
  std::vector<object*> named;
  {
    std::lock_guard run(run_mu_);  // tasks of other threads finish first
    std::vector<std::weak_ptr<actor>> actors;
    {
      std::lock_guard lock(mu_);
      stopped_ = true;
      actors = actors_;
      for (auto& [name, handle] : names_) named.push_back(handle);
      names_.clear();
    }
    for (auto& w : actors)
      if (auto a = w.lock()) a->end(actor_error(a->label, "was stopped by manta::shutdown"));
  }
  // Released without the run lock (a release takes the context lock, which a
  // submitting thread holds while it waits for the run lock). Objects the
  // program still holds are freed when it lets them go (after shutdown,
  // release_slow deletes a node whose runtime is gone).
  for (auto* h : named) detail::release(h);
}

local_runtime::object* local_runtime::checked(detail::ref_node* n) const {
  if (n->epoch != epoch_)
    throw usage_error("manta: an object_ref from another runtime (or from before a shutdown) was used");
  return static_cast<object*>(n);
}

local_runtime::object* local_runtime::new_object() {
  auto* o = new object();
  o->epoch = epoch_;
  o->count.store(1, std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  o->id = {(std::uint64_t{epoch_} << 32) | static_cast<std::uint32_t>(::getpid()), next_id_++};
  objects_.emplace(o->id, o);
  return o;
}

void local_runtime::hold_contained(object& o, const std::vector<object_id>& ids) {
  for (const auto& id : ids) o.contained.push_back(ref_from_id(id));
}

std::size_t local_runtime::object_count() {
  std::lock_guard lock(mu_);
  return objects_.size();
}

detail::ref_node* local_runtime::put(const detail::encoded_value& v) {
  object* o = new_object();
  try {
    o->bytes = allocate_bytes(v.size);
    std::memcpy(o->bytes, v.data(), v.size);
    o->tag = v.type_tag;
    o->size = v.size;
    hold_contained(*o, v.contained);
  } catch (...) {
    detail::release(o);
    throw;
  }
  return o;
}

detail::extent local_runtime::allocate_extent(std::size_t bytes) {
  return {0, allocate_bytes(bytes), bytes, epoch_};
}

void local_runtime::free_extent(const detail::extent& x) noexcept {
  if (x.epoch == epoch_) std::free(x.data);
}

detail::ref_node* local_runtime::put_extent(std::uint64_t tag, const detail::extent& x, std::size_t size) {
  if (x.epoch != epoch_ || size > x.size)
    throw usage_error("manta: a buffer from another runtime, or larger than its extent, was put");
  object* o = new_object();
  o->bytes = x.data;
  o->tag = tag;
  o->size = size;
  return o;
}

detail::object_data local_runtime::fetch(detail::ref_node* n, detail::deadline) {
  object* o = checked(n);
  if (o->failed) ipc::throw_error(o->failed->describe());
  return {o->tag, o->bytes, o->size};
}

void local_runtime::wait(std::span<detail::ref_node* const> nodes, std::size_t, detail::deadline,
                         std::vector<bool>& ready) {
  for (auto* n : nodes) checked(n);
  ready.assign(nodes.size(), true);  // a task is done by the time remote returns
}

detail::ref_node* local_runtime::ref_from_id(const object_id& id) {
  std::lock_guard lock(mu_);
  auto it = objects_.find(id);
  // A count of 0 means the object is being freed: a value still holding its ref
  // would hold a count, so nothing legitimate reads it.
  if (it == objects_.end() || it->second->count.load(std::memory_order_acquire) == 0)
    throw usage_error("manta: a serialised object_ref names an object that no longer exists");
  it->second->count.fetch_add(1, std::memory_order_relaxed);
  return it->second;
}

void local_runtime::release(detail::ref_node* n) noexcept {
  auto* o = static_cast<object*>(n);
  {
    std::lock_guard lock(mu_);
    objects_.erase(o->id);
  }
  if (o->actor) {
    std::lock_guard run(run_mu_);
    o->actor->end(actor_error(o->actor->label, "has no handle left"));
  }
  delete o;
}

std::map<std::string, double> local_runtime::resources(bool available_only) {
  return available_only ? ledger_.available() : ledger_.totals();
}

void local_runtime::submit(detail::task_request&& r, detail::ref_node** returns) {
  if (!r.function) throw usage_error("manta: submit without a function");
  if (stopped_.load()) throw usage_error("manta: task(...).remote after shutdown began");
  if (r.actor) checked(r.actor);
  for (auto* d : r.deps)
    if (d->epoch != epoch_) throw usage_error("manta: a task argument is an object_ref from another runtime");
  const bool construct = r.mode == detail::call_mode::construct;
  const std::string name = r.options.name.empty() ? r.function->name : r.options.name;
  if (r.mode != detail::call_mode::method) {
    if (auto why = check_demand(ledger_, r.options, demand_of(r.options), construct, name)) throw usage_error(*why);
  }
  if (r.mode == detail::call_mode::method && !static_cast<object*>(r.actor)->actor)
    throw usage_error("manta: a method call on something that is not an actor");

  std::vector<object*> outs;
  for (std::uint16_t i = 0; i < r.num_returns; ++i) outs.push_back(new_object());
  if (construct) {
    auto a = std::make_shared<actor>();
    a->class_tag = r.function->class_tag;
    a->label = (r.options.class_label.empty() ? detail::actor_class_name(r.function->class_tag) : r.options.class_label) +
               (r.options.name.empty() ? "" : " '" + r.options.name + "'");
    outs[0]->actor = a;
    std::lock_guard lock(mu_);
    if (!r.options.name.empty()) {
      if (!names_.emplace(r.options.name, outs[0]).second) {
        a->dead = actor_error(a->label, "could not start: the name is taken");
        // The caller never gets it: freed once this lock is let go.
        mu_.unlock();
        detail::release(outs[0]);
        mu_.lock();
        throw usage_error("manta: an actor named '" + r.options.name + "' already exists");
      }
      detail::acquire(outs[0]);  // a named actor lives until kill or shutdown
    }
    if (actors_.size() >= prune_actors_at_) {  // forget the ones gone (streams and queues make many)
      std::erase_if(actors_, [](const std::weak_ptr<actor>& w) { return w.expired(); });
      prune_actors_at_ = std::max<std::size_t>(64, 2 * actors_.size());
    }
    actors_.push_back(a);
  }
  run(r, outs);
  for (std::size_t i = 0; i < outs.size(); ++i) returns[i] = outs[i];
}

namespace {
thread_local int tasks_on_this_thread = 0;
}  // namespace

bool local_runtime::in_task_here() noexcept { return tasks_on_this_thread > 0; }

void local_runtime::run(detail::task_request& r, std::vector<object*>& outs) {
  std::lock_guard run_lock(run_mu_);
  ++tasks_on_this_thread;
  struct leave {
    ~leave() { --tasks_on_this_thread; }
  } on_return;
  const std::string name = r.options.name.empty() ? r.function->name : r.options.name;
  const bool is_task = r.mode != detail::call_mode::construct && r.mode != detail::call_mode::method;
  int retries = !is_task || !r.options.retry_exceptions ? 0
                : r.options.max_retries < 0                 ? std::numeric_limits<int>::max()  // forever
                                                            : r.options.max_retries;
  ipc::failure_ptr failed = call(r, outs, name);
  while (failed && retries-- > 0 && failed->kind() == ipc::error_kind::task_exception) failed = call(r, outs, name);
  if (!failed) return;
  if (r.mode == detail::call_mode::construct) {
    const ipc::error_info e = failed->describe();
    outs[0]->actor->end(actor_error(outs[0]->actor->label, "could not be constructed: " + e.remote_type + ": " + e.message));
    forget_name(outs[0]);
    return;  // the handle stays usable; its calls fail with actor_died_error
  }
  for (auto* o : outs) o->failed = failed;
}

ipc::failure_ptr local_runtime::call(detail::task_request& r, std::vector<object*>& outs, const std::string& name) {
  for (auto* d : r.deps)
    if (auto& f = static_cast<object*>(d)->failed) return ipc::chain_failure(f, name);
  actor* target = nullptr;
  if (r.mode == detail::call_mode::method || r.mode == detail::call_mode::construct) {
    target = static_cast<object*>(r.mode == detail::call_mode::method ? r.actor : outs[0])->actor.get();
    if (r.mode == detail::call_mode::method && target->dead) return ipc::make_failure(*target->dead);
  }
  const detail::function_info& fn = *r.function;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    if (!setup_error_.message.empty()) throw usage_error(setup_error_.message);
    std::vector<detail::arg_view> args;
    process::for_each_arg(r.args, r.arg_count, [&](const process::blob_arg& b) {
      if (b.kind == process::arg_kind::value) {
        args.push_back({reinterpret_cast<const std::byte*>(b.bytes), b.size_or_index, b.tag});
      } else {
        const object* o = static_cast<object*>(r.deps.at(b.size_or_index));
        args.push_back({o->bytes, o->size, o->tag});
      }
    });
    local_invocation inv(*this, std::move(args), r.num_returns, target);
    detail::invoker invoke = r.mode == detail::call_mode::map       ? fn.map
                             : r.mode == detail::call_mode::starmap ? fn.starmap
                                                                    : fn.call;
    if (!invoke) throw usage_error("manta: '" + fn.name + "' cannot be called in this mode");
    struct on_stack {  // a kill from inside the call leaves the instance until it returns
      actor* a;
      explicit on_stack(actor* x) : a(x) {
        if (a) ++a->running;
      }
      ~on_stack() {
        if (a && --a->running == 0 && a->dead) a->end(*a->dead);
      }
    } guard(target);
    invoke(fn, inv);
    for (auto& res : inv.results())
      if (!res.set) throw usage_error("manta: task did not produce all its returns");
    const auto ran = std::chrono::steady_clock::now() - t0;
    if (r.options.timeout_ns && ran > std::chrono::nanoseconds(r.options.timeout_ns)) {
      char limit[32];
      std::snprintf(limit, sizeof limit, "%g s", static_cast<double>(r.options.timeout_ns) / 1e9);
      return ipc::make_failure({ipc::error_kind::timeout, "manta::timeout_error",
                                "manta: task '" + name + "' ran longer than its timeout of " + limit +
                                    " (local mode lets it finish: nothing can stop it in the driver)",
                                name, {}, ::getpid(), 0});
    }
    for (std::size_t i = 0; i < outs.size(); ++i) {
      pending_result& res = inv.results()[i];
      object& o = *outs[i];
      if (r.mode == detail::call_mode::construct) continue;  // the handle holds no value
      std::free(o.bytes);
      o.bytes = std::exchange(res.bytes, nullptr);
      o.tag = res.tag;
      o.size = res.size;
      o.contained = std::move(res.contained);
      res.contained.clear();
    }
    return nullptr;
  } catch (...) {
    return ipc::make_failure(ipc::error_from_exception(std::current_exception(), name, ::getpid()));
  }
}

detail::ref_node* local_runtime::find_actor(const std::string& name, std::uint64_t class_tag) {
  std::lock_guard lock(mu_);
  auto it = names_.find(name);
  if (it == names_.end()) return nullptr;
  const actor& a = *it->second->actor;
  if (a.class_tag != class_tag)
    throw usage_error("manta: the actor named '" + name + "' is a " + detail::actor_class_name(a.class_tag) +
                      ", not a " + detail::actor_class_name(class_tag));
  detail::acquire(it->second);
  return it->second;
}

void local_runtime::kill_actor(detail::ref_node* node) {
  object* o = checked(node);
  if (!o->actor) throw usage_error("manta: kill of something that is not an actor");
  {
    std::lock_guard run(run_mu_);
    o->actor->end(actor_error(o->actor->label, "was killed by manta::kill"));
  }
  forget_name(o);
}

void local_runtime::forget_name(object* handle) {
  object* named = nullptr;
  {
    std::lock_guard lock(mu_);
    for (auto it = names_.begin(); it != names_.end(); ++it)
      if (it->second == handle) {
        named = it->second;
        names_.erase(it);
        break;
      }
  }
  if (named) detail::release(named);
}

}  // namespace manta::runtime

// process/worker.cpp: the runtime of a worker process. Tasks arrive on the
// driver's pipe and run one at a time; a task that waits in get/wait tells the
// driver (which lends its CPU) and runs whatever tasks the driver sends meanwhile,
// nested on its stack, so a fixed pool never deadlocks on nested tasks. Results
// go back in batches; large values are written once into arena extents.
//
// The same process hosts an actor once it receives a constructor: then calls
// never nest (a waiting method holds back the ones behind it), and with
// max_concurrency > 1 a reader thread feeds a pool of executor threads.
#include "process/worker.hpp"

#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <typeinfo>
#include <unordered_map>
#include <vector>

#include <manta/errors.hpp>
#include <manta/registry.hpp>

#include "ipc/channel.hpp"
#include "ipc/protocol.hpp"
#include "observe/log.hpp"
#include "process/context.hpp"
#include "process/task_wire.hpp"

namespace manta::process {
namespace {

using detail::ref_node;
using ipc::msg;

/// A ref held by this worker: what it knows of the object.
struct local_node final : ref_node {
  bool subscribed = false;
  bool ready = false;
  bool failed = false;
  std::uint64_t type_tag = 0;
  std::uint64_t size = 0;
  std::uint64_t offset = ipc::no_offset;
  std::string inline_bytes;
  ipc::error_info error;
};

/// One result of a running task, as it will be sent.
struct result_slot {
  bool set = false;
  std::uint64_t tag = 0, size = 0, offset = ipc::no_offset;
  std::string inline_bytes;
  std::vector<object_id> contained;
};

/// A recursive mutex whose waits release every level the thread holds, so a
/// thread waiting deep inside nested calls never blocks the thread it waits for.
class reentrant_mutex {
 public:
  void lock() {
    if (owner_.load(std::memory_order_relaxed) == std::this_thread::get_id()) {
      ++depth_;
      return;
    }
    m_.lock();
    owner_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    depth_ = 1;
  }
  void unlock() {
    if (--depth_ == 0) {
      owner_.store(std::thread::id(), std::memory_order_relaxed);
      m_.unlock();
    }
  }
  /// Waits on `cv` until `done()` or `until`, with the mutex (held by this thread) released.
  template <class Pred>
  bool wait_until(std::condition_variable& cv, detail::deadline until, Pred done) {
    int saved = depth_;
    depth_ = 0;
    owner_.store(std::thread::id(), std::memory_order_relaxed);
    std::unique_lock<std::mutex> l(m_, std::adopt_lock);
    bool ok = until == detail::no_deadline ? (cv.wait(l, done), true) : cv.wait_until(l, until, done);
    l.release();
    owner_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    depth_ = saved;
    return ok;
  }

 private:
  std::mutex m_;
  std::atomic<std::thread::id> owner_{};
  int depth_ = 0;
};

class worker_runtime;
class task_invocation;

// What the calling thread is executing, innermost last: the one thread of a
// worker, or each executor thread of an actor host with max_concurrency > 1.
thread_local std::vector<std::uint64_t> tl_stack;
thread_local std::vector<task_invocation*> tl_running;
thread_local std::vector<ref_node*> tl_result_holds;

/// The invocation a task's invoker sees: arguments from the copied frame or the arena.
/// An extent the driver offered a task for its result (sized like the last one).
struct grant {
  std::uint64_t offset = ipc::no_offset;
  std::uint64_t size = 0;
  /// Takes it if it fits and nothing took it yet.
  bool take(std::size_t bytes, std::uint64_t& out) {
    if (offset == ipc::no_offset || bytes > size) return false;
    out = std::exchange(offset, ipc::no_offset);
    return true;
  }
};

class task_invocation final : public detail::invocation {
 public:
  task_invocation(worker_runtime& w, std::vector<detail::arg_view> args, std::size_t num_returns,
                  grant g)
      : worker_(w), args_(std::move(args)), results_(num_returns), grant_(g) {}
  std::size_t arg_count() const override { return args_.size(); }
  detail::arg_view arg(std::size_t i) const override { return args_.at(i); }
  std::size_t num_returns() const override { return results_.size(); }
  void set_result(std::size_t i, const detail::encoded_value& v) override;
  void set_result_extent(std::size_t i, std::uint64_t tag, const detail::extent& x,
                         std::size_t size) override;
  void* instance() override;
  void adopt_instance(void* object, void (*destroy)(void*)) override;
  std::vector<result_slot>& results() { return results_; }
  grant& offered() { return grant_; }

 private:
  worker_runtime& worker_;
  std::vector<detail::arg_view> args_;
  std::vector<result_slot> results_;
  grant grant_;
};

class worker_runtime final : public process_context {
 public:
  explicit worker_runtime(const worker_config& c)
      : cfg_(c),
        slot_(c.control->slots[c.slot]),
        in_(c.from_driver),
        out_(c.to_driver,
             {&c.control->slots[c.slot].outbox_seq, &c.control->driver_seq, &c.control->driver_idle,
              c.doorbell},
             /*wait_when_full=*/true),
        id_hi_((std::uint64_t{c.epoch} << 32) | (c.process_number & 0xffffffffu)) {
    ipc::set_nonblocking(c.from_driver, true);
    ipc::set_nonblocking(c.to_driver, true);
  }

  [[noreturn]] void run() {
    for (;;) {
      while (!deferred_.empty()) {
        std::string body = std::move(deferred_.front());
        deferred_.pop_front();
        execute(reinterpret_cast<const std::byte*>(body.data()), body.size());
        if (concurrency_ > 1) run_threaded();  // an actor with max_concurrency > 1 was made
      }
      pump(no_nested::no, detail::no_deadline, [this] { return !deferred_.empty(); });
    }
  }

  // ---- process_context

  ref_node* put(const detail::encoded_value& v) override {
    std::lock_guard lock(mu_);
    std::uint64_t offset;
    std::string inline_bytes;
    store_value(v, offset, inline_bytes);  // may throw object_store_full: nothing made yet
    local_node* n = new_node(next_id());
    n->ready = true;
    n->type_tag = v.type_tag;
    n->size = v.size;
    n->offset = offset;
    n->inline_bytes = std::move(inline_bytes);
    send_put(*n, v.contained);
    return n;
  }

  detail::extent allocate_extent(std::size_t bytes) override {
    std::lock_guard lock(mu_);
    std::uint64_t off;
    if (tl_running.empty() || !tl_running.back()->offered().take(bytes, off)) off = allocate(bytes);
    return {off, cfg_.arena_base + off, bytes, cfg_.epoch};
  }

  void free_extent(const detail::extent& x) noexcept override {
    std::lock_guard lock(mu_);
    if (x.epoch != cfg_.epoch) return;
    try {
      send_free(x.offset);
    } catch (...) {
    }
  }

  ref_node* put_extent(std::uint64_t tag, const detail::extent& x, std::size_t size) override {
    std::lock_guard lock(mu_);
    if (x.epoch != cfg_.epoch || size > x.size)
      throw usage_error("manta: a buffer from another runtime, or larger than its extent, was put");
    local_node* n = new_node(next_id());
    n->ready = true;
    n->type_tag = tag;
    n->size = size;
    n->offset = x.offset;
    send_put(*n, {});
    return n;
  }

  detail::object_data fetch(ref_node* node, detail::deadline until) override {
    std::unique_lock lock(mu_);
    auto* n = checked(node);
    if (!n->ready) {
      subscribe({n});
      bool ok = await(lock, until, [n] { return n->ready; }, {n});
      if (!ok) throw timeout_error("manta: get timed out waiting for an object");
    }
    if (n->failed) ipc::throw_error(n->error);
    const std::byte* data = n->offset == ipc::no_offset
                                ? reinterpret_cast<const std::byte*>(n->inline_bytes.data())
                                : cfg_.arena_base + n->offset;
    return {n->type_tag, data, n->size};
  }

  void wait(std::span<ref_node* const> nodes, std::size_t num, detail::deadline until,
            std::vector<bool>& ready) override {
    std::unique_lock lock(mu_);
    std::vector<local_node*> ns;
    for (auto* node : nodes) ns.push_back(checked(node));
    auto count = [&] {
      std::size_t k = 0;
      for (auto* n : ns) k += n->ready;
      return k;
    };
    if (count() < num) {
      subscribe(ns);
      await(lock, until, [&] { return count() >= num; }, ns, num);
    }
    ready.assign(ns.size(), false);
    for (std::size_t i = 0; i < ns.size(); ++i) ready[i] = ns[i]->ready;
  }

  ref_node* ref_from_id(const object_id& id) override {
    std::lock_guard lock(mu_);
    if ((id.hi >> 32) != cfg_.epoch)
      throw usage_error("manta: an object_ref from another runtime was used");
    bool fresh;
    local_node* n = counted_node(id, fresh);
    if (fresh) send_ids(msg::add_ref, {id});  // the driver counts one hold per process
    return n;
  }

  void release(ref_node* node) noexcept override {
    std::lock_guard lock(mu_);
    if (node->count.load(std::memory_order_acquire) != 0) return;  // taken again meanwhile
    table_.erase(node->id);
    try {
      ipc::frame_writer w(out_.buffer(), static_cast<std::uint16_t>(msg::release));
      w.put(std::uint32_t{1});
      w.put(node->id);
    } catch (...) {
    }
    delete node;
  }

  void submit(detail::task_request&& r, ref_node** returns) override {
    std::lock_guard lock(mu_);
    std::vector<local_node*> outs;
    {
      ipc::frame_writer w(out_.buffer(), static_cast<std::uint16_t>(msg::submit));
      w.put(r.function->id);
      w.put(current_task());  // its parent: cancelling that one cancels it too
      w.put(static_cast<std::uint8_t>(r.mode));
      w.put(r.num_returns);
      w.put(r.arg_count);
      write_options(w, r.options);
      w.put(r.actor ? r.actor->id : object_id{});
      for (std::uint16_t i = 0; i < r.num_returns; ++i) {
        outs.push_back(new_node(next_id()));
        w.put(outs.back()->id);
      }
      w.put(static_cast<std::uint32_t>(r.deps.size()));
      for (auto* d : r.deps) w.put(d->id);
      write_contained(w, r.contained);
      w.string(r.args);
    }
    // The driver holds the dependencies now; our counts can go (after the message).
    for (auto* d : r.deps) detail::release(d);
    r.deps.clear();
    detail::release(std::exchange(r.actor, nullptr));
    for (std::size_t i = 0; i < outs.size(); ++i) returns[i] = outs[i];
    // Sent now: the caller may compute for a long time before it next calls manta,
    // and its children should run meanwhile.
    flush();
  }

  ref_node* find_actor(const std::string& name, std::uint64_t class_tag) override {
    std::unique_lock lock(mu_);
    std::uint64_t request = ++next_request_;
    {
      ipc::frame_writer w(out_.buffer(), static_cast<std::uint16_t>(msg::find_actor));
      w.put(request);
      w.put(class_tag);
      w.string(name);
    }
    await(lock, detail::no_deadline, [&] { return actor_replies_.count(request) > 0; }, {});
    auto [id, error] = std::move(actor_replies_[request]);
    actor_replies_.erase(request);
    if (!error.empty()) throw usage_error(error);
    if (id.empty()) return nullptr;
    // The driver holds it for this process now (once, however many refs we make).
    bool fresh;
    return counted_node(id, fresh);
  }

  void kill_actor(ref_node* node) override {
    std::lock_guard lock(mu_);
    send_ids(msg::kill_actor, {checked(node)->id});
    flush();
  }

  void cancel_producer(ref_node* node) override {
    std::lock_guard lock(mu_);
    send_ids(msg::cancel, {checked(node)->id});
    flush();
  }

  std::vector<int> gpu_ids() override {
    std::lock_guard lock(mu_);
    return gpu_ids_;
  }

  std::map<std::string, double> resources(bool available_only) override {
    std::unique_lock lock(mu_);
    std::uint64_t request = ++next_request_;
    {
      ipc::frame_writer w(out_.buffer(), static_cast<std::uint16_t>(msg::resources_request));
      w.put(request);
      w.put(static_cast<std::uint8_t>(available_only));
    }
    await(lock, detail::no_deadline, [&] { return resources_replies_.count(request) > 0; }, {});
    auto out = std::move(resources_replies_[request]);
    resources_replies_.erase(request);
    return out;
  }

  std::size_t worker_count() const noexcept override { return cfg_.num_workers; }
  std::uint32_t epoch() const noexcept override { return cfg_.epoch; }
  bool is_worker() const noexcept override { return true; }

  // ---- used by task_invocation

  /// Places a value: inline below the threshold, else in the extent offered for
  /// the task's result when it fits, else in one the driver grants now.
  void store_value(const detail::encoded_value& v, std::uint64_t& offset, std::string& inline_bytes,
                   grant* offered = nullptr) {
    if (v.size <= detail::max_inline_bytes) {
      inline_bytes.assign(static_cast<const char*>(v.data()), v.size);
      offset = ipc::no_offset;
      return;
    }
    if (!offered || !offered->take(v.size, offset)) offset = allocate(v.size);
    std::memcpy(cfg_.arena_base + offset, v.data(), v.size);
  }

  /// Holds refs serialised inside a result until the result has been sent.
  void hold(const std::vector<object_id>& ids) {
    for (const auto& id : ids) tl_result_holds.push_back(ref_from_id(id));
  }

 private:
  enum class no_nested { no, yes };

  local_node* checked(ref_node* node) {
    if (node->epoch != cfg_.epoch)
      throw usage_error("manta: an object_ref from another runtime was used");
    return static_cast<local_node*>(node);
  }

  object_id next_id() { return {id_hi_, ++next_seq_}; }

  /// A new node for `id` holding one count.
  local_node* new_node(const object_id& id) {
    auto* n = new local_node();
    n->id = id;
    n->epoch = cfg_.epoch;
    n->count.store(1, std::memory_order_relaxed);
    table_.emplace(id, n);
    return n;
  }

  /// The node for `id` with one more count: the one this process has, or a new one.
  local_node* counted_node(const object_id& id, bool& fresh) {
    auto it = table_.find(id);
    fresh = it == table_.end();
    if (fresh) return new_node(id);
    it->second->count.fetch_add(1, std::memory_order_relaxed);
    return it->second;
  }

  /// Tells the driver about an object this process made.
  void send_put(const local_node& n, const std::vector<object_id>& contained) {
    ipc::frame_writer w(out_.buffer(), static_cast<std::uint16_t>(msg::put));
    w.put(n.id);
    write_contained(w, contained);
    ipc::write_location(w, n.type_tag, n.size, n.offset, n.inline_bytes.data());
  }

  static void write_contained(ipc::frame_writer& w, const std::vector<object_id>& ids) {
    w.put(static_cast<std::uint32_t>(ids.size()));
    for (const auto& id : ids) w.put(id);
  }

  void subscribe(const std::vector<local_node*>& ns) {
    std::vector<object_id> ids;
    for (auto* n : ns)
      if (!n->ready && !n->subscribed) {
        n->subscribed = true;
        ids.push_back(n->id);
      }
    if (ids.empty()) return;
    ipc::frame_writer w(out_.buffer(), static_cast<std::uint16_t>(msg::subscribe));
    write_contained(w, ids);
  }

  std::uint64_t current_task() const { return tl_stack.empty() ? 0 : tl_stack.back(); }

  void send_ids(msg type, const std::vector<object_id>& ids) {
    ipc::frame_writer w(out_.buffer(), static_cast<std::uint16_t>(type));
    write_contained(w, ids);
  }

  /// Waits until `done`. A pool worker tells the driver its task is blocked and
  /// runs what the driver sends meanwhile; an actor host holds queued calls back
  /// (methods of one actor never interleave); a threaded host sleeps until its
  /// reader thread has news.
  template <class Pred>
  bool await(std::unique_lock<reentrant_mutex>&, detail::deadline until, Pred done,
             const std::vector<local_node*>& awaited, std::size_t needed = 1) {
    if (threaded_) {
      flush();
      return mu_.wait_until(cv_, until, done);
    }
    if (actor_host_ || tl_stack.empty()) return pump(no_nested::no, until, done);
    return blocked_wait(until, done, awaited, needed);
  }

  /// Waits for `done` while telling the driver this task is blocked (and on
  /// what), so its CPU is lent and tasks sent meanwhile run here, nested; the
  /// producers of `awaited` first, when they have not started elsewhere.
  template <class Pred>
  bool blocked_wait(detail::deadline until, Pred done, const std::vector<local_node*>& awaited,
                    std::size_t needed) {
    std::uint64_t key = current_task();
    {
      ipc::frame_writer w(out_.buffer(), static_cast<std::uint16_t>(msg::block));
      w.put(key);
      w.put(static_cast<std::uint32_t>(needed));
      w.put(static_cast<std::uint32_t>(awaited.size()));
      for (auto* n : awaited) w.put(n->id);
    }
    bool ok = pump(no_nested::yes, until, done);
    ipc::frame_writer w(out_.buffer(), static_cast<std::uint16_t>(msg::unblock));
    w.put(key);
    return ok;
  }

  /// Asks the driver for an extent; tasks arriving meanwhile are deferred.
  std::uint64_t allocate(std::size_t size) {
    std::uint64_t request = ++next_request_;
    {
      ipc::frame_writer w(out_.buffer(), static_cast<std::uint16_t>(msg::alloc_request));
      w.put(request);
      w.put(static_cast<std::uint64_t>(size));
    }
    if (threaded_) {
      std::lock_guard lock(mu_);
      flush();
      mu_.wait_until(cv_, detail::no_deadline, [&] { return alloc_replies_.count(request) > 0; });
    } else {
      pump(no_nested::no, detail::no_deadline, [&] { return alloc_replies_.count(request) > 0; });
    }
    std::uint64_t offset = alloc_replies_[request];
    alloc_replies_.erase(request);
    if (offset == ipc::no_offset)
      throw object_store_full("manta: no room in the object store for a value of " +
                              std::to_string(size) + " bytes");
    return offset;
  }

  void flush() {
    if (!out_.empty() && !out_.flush()) ::_exit(0);  // the driver is gone
    unflushed_since_ = {};
  }

  /// Reads and handles frames until `done()` or `until`. With `nested`, tasks
  /// run at once (the caller is blocked); otherwise they are deferred.
  template <class Pred>
  bool pump(no_nested nested, detail::deadline until, Pred done) {
    for (;;) {
      if (done()) return true;
      if (nested == no_nested::yes && !deferred_.empty()) {
        // Deferred while this process waited for an extent: they came first, and
        // the driver counts them as running here, so it sends nothing else meanwhile.
        std::string body = std::move(deferred_.front());
        deferred_.pop_front();
        execute(reinterpret_cast<const std::byte*>(body.data()), body.size());
        continue;
      }
      ipc::frame f;
      bool got;
      try {
        got = in_.next(f);
      } catch (const ipc::protocol_error& e) {
        MANTA_ERROR << "worker: " << e.what();
        ::_exit(3);
      }
      if (got) {
        handle(f, nested);
        continue;
      }
      std::uint32_t seen = slot_.inbox_seq.load(std::memory_order_acquire);
      auto st = in_.read_some();
      if (st == ipc::inbox::status::data) continue;
      if (st == ipc::inbox::status::closed) ::_exit(0);  // the driver is gone
      flush();
      auto now = detail::clock::now();
      if (now >= until) return false;
      if (spin_.wait_for_change(slot_.inbox_seq, seen)) continue;
      int ms = -1;
      if (until != detail::no_deadline)
        ms = static_cast<int>(
            std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count() + 1);
      ipc::wait_readable(in_.fd(), ms);
    }
  }

  void handle(const ipc::frame& f, no_nested nested) {
    auto r = f.reader();
    switch (static_cast<msg>(f.type)) {
      case msg::run_task:
        if (threaded_) {
          work_.emplace_back(reinterpret_cast<const char*>(f.body), f.size);
          work_cv_.notify_one();
        } else if (nested == no_nested::yes) {
          // Copy first: reading more frames while it runs would move the buffer.
          std::string body(reinterpret_cast<const char*>(f.body), f.size);
          execute(reinterpret_cast<const std::byte*>(body.data()), body.size());
        } else {
          deferred_.emplace_back(reinterpret_cast<const char*>(f.body), f.size);
        }
        break;
      case msg::object_ready: {
        auto id = r.get<object_id>();
        auto status = r.get<std::uint8_t>();
        auto it = table_.find(id);
        local_node* n = it == table_.end() ? nullptr : it->second;
        if (status == 1) {
          auto loc = ipc::read_location(r);
          if (n && !n->ready) {
            n->type_tag = loc.type_tag;
            n->size = loc.size;
            n->offset = loc.offset;
            if (loc.inline_data)
              n->inline_bytes.assign(reinterpret_cast<const char*>(loc.inline_data), loc.size);
          }
        } else if (n && !n->ready) {
          n->error = ipc::read_error(r);
          n->failed = true;
        }
        if (n) n->ready = true;
        break;
      }
      case msg::alloc_reply: {
        auto request = r.get<std::uint64_t>();
        alloc_replies_[request] = r.get<std::uint64_t>();
        break;
      }
      case msg::actor_reply: {
        auto request = r.get<std::uint64_t>();
        auto id = r.get<object_id>();
        actor_replies_[request] = {id, r.string()};
        break;
      }
      case msg::resources_reply: {
        auto request = r.get<std::uint64_t>();
        auto n = r.get<std::uint32_t>();
        std::map<std::string, double> m;
        for (std::uint32_t i = 0; i < n; ++i) {
          std::string name = r.string();
          m[name] = r.get<double>();
        }
        resources_replies_[request] = std::move(m);
        break;
      }
      default:
        MANTA_ERROR << "worker: unexpected message " << f.type;
        ::_exit(3);
    }
  }

  /// Runs one task from its frame body (which stays valid throughout) and queues its result.
  void execute(const std::byte* body, std::size_t size) {
    ipc::frame_reader r(body, size);
    auto key = r.get<std::uint64_t>();
    auto fid = r.get<std::uint64_t>();
    auto mode = static_cast<detail::call_mode>(r.get<std::uint8_t>());
    auto nret = r.get<std::uint16_t>();
    auto nargs = r.get<std::uint16_t>();
    std::string name = r.string();
    std::vector<object_id> return_ids(nret);
    for (auto& id : return_ids) id = r.get<object_id>();
    grant offered;
    offered.offset = r.get<std::uint64_t>();
    offered.size = r.get<std::uint64_t>();
    std::vector<int> gpus(r.get<std::uint16_t>());
    for (int& g : gpus) g = r.get<std::int32_t>();
    auto concurrency = r.get<std::uint16_t>();
    std::vector<detail::arg_view> args(nargs);
    for (auto& a : args) {
      auto loc = ipc::read_location(r);
      a.type_tag = loc.type_tag;
      a.size = loc.size;
      a.data = loc.inline_data ? loc.inline_data : cfg_.arena_base + loc.offset;
    }

    const detail::function_info* fn = detail::function_by_id(fid);
    if (name.empty() && fn) name = fn->name;
    if (!gpus.empty()) use_gpus(gpus);
    // The driver reads the first max_depth keys after a crash to know which tasks
    // were running (and count a retry against them); deeper ones count as queued.
    const std::size_t depth = tl_stack.size();
    tl_stack.push_back(key);
    if (!threaded_) record_depth(depth, key);

    task_invocation inv(*this, std::move(args), nret, offered);
    tl_running.push_back(&inv);
    ipc::error_info error;
    bool ok = false;
    auto t0 = std::chrono::steady_clock::now();
    try {
      if (!fn) throw usage_error("manta: no function with this id is registered in the worker");
      detail::invoker call = mode == detail::call_mode::map       ? fn->map
                             : mode == detail::call_mode::starmap ? fn->starmap
                                                                  : fn->call;
      if (!call) throw usage_error("manta: '" + fn->name + "' cannot be called in this mode");
      if (mode == detail::call_mode::method && !instance_)
        throw usage_error("manta: a method call reached a process hosting no actor");
      call(*fn, inv);
      ok = true;
      if (mode == detail::call_mode::construct) {
        actor_host_ = true;
        concurrency_ = std::max<int>(1, concurrency);
      }
      for (auto& res : inv.results())
        if (!res.set) throw usage_error("manta: task did not produce all its returns");
    } catch (const task_error& e) {
      // A nested get rethrew another task's failure: pass the root cause on.
      error = {ipc::error_kind::task_exception, e.remote_type(), e.message(), e.function_name(),
               e.chain().empty() ? name : name + " <- " + e.chain(), e.pid(), 0};
      ok = false;
    } catch (const object_store_full& e) {
      error = {ipc::error_kind::object_store_full, "manta::object_store_full", e.what(), name, {},
               static_cast<std::int32_t>(::getpid()), 0};
      ok = false;
    } catch (const actor_died_error& e) {
      error = {ipc::error_kind::actor_died, "manta::actor_died_error", e.what(), name,
               {}, static_cast<std::int32_t>(::getpid()), 0};
      ok = false;
    } catch (const std::exception& e) {
      error = {ipc::error_kind::task_exception, detail::demangle(typeid(e).name()), e.what(), name,
               {}, static_cast<std::int32_t>(::getpid()), 0};
      ok = false;
    } catch (...) {
      error = {ipc::error_kind::task_exception, "unknown exception", "a non-std exception was thrown",
               name, {}, static_cast<std::int32_t>(::getpid()), 0};
      ok = false;
    }
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                  std::chrono::steady_clock::now() - t0)
                  .count();
    std::fflush(stdout);
    std::fflush(stderr);
    tl_running.pop_back();

    std::lock_guard lock(mu_);
    {
      ipc::frame_writer w(out_.buffer(), static_cast<std::uint16_t>(msg::task_done));
      w.put(key);
      w.put(static_cast<std::uint8_t>(ok));
      w.put(static_cast<std::uint64_t>(ns));
      if (ok) {
        for (auto& res : inv.results()) {
          write_contained(w, res.contained);
          ipc::write_location(w, res.tag, res.size, res.offset, res.inline_bytes.data());
        }
      } else {
        for (auto& res : inv.results())  // extents of results that will never be sealed
          if (res.offset != ipc::no_offset) send_free(res.offset);
        ipc::write_error(w, error);
      }
    }
    tl_stack.pop_back();
    if (!threaded_) record_depth(tl_stack.size(), 0);
    // Refs inside the results are held by their objects now (the driver saw task_done first).
    for (auto* n : tl_result_holds) detail::release(n);
    tl_result_holds.clear();

    if (threaded_) {
      flush();  // executor threads have no pump to flush for them
      return;
    }
    if (unflushed_since_ == std::chrono::steady_clock::time_point{})
      unflushed_since_ = std::chrono::steady_clock::now();
    if (out_.pending() > (64u << 10) ||
        std::chrono::steady_clock::now() - unflushed_since_ > std::chrono::microseconds(200))
      flush();
  }

  /// Records the key running at `depth` (or, with key 0, the depth alone) where
  /// the driver can read it after a crash; only the first max_depth levels fit.
  void record_depth(std::size_t depth, std::uint64_t key) {
    if (key && depth < static_cast<std::size_t>(max_depth))
      slot_.running[depth].store(key, std::memory_order_relaxed);
    std::size_t d = key ? depth + 1 : depth;
    slot_.depth.store(static_cast<std::uint32_t>(std::min<std::size_t>(d, max_depth)),
                      std::memory_order_release);
  }

  /// CUDA reads CUDA_VISIBLE_DEVICES when a process first uses it: an actor's
  /// GPUs are set before its constructor; a worker keeps the first set it used.
  void use_gpus(const std::vector<int>& ids) {
    std::lock_guard lock(mu_);
    gpu_ids_ = ids;
    std::string list;
    for (int g : ids) list += (list.empty() ? "" : ",") + std::to_string(g);
    ::setenv("CUDA_VISIBLE_DEVICES", list.c_str(), 1);
  }

  /// An actor host with max_concurrency > 1: this thread only reads the pipe;
  /// executor threads run the calls. Never returns.
  [[noreturn]] void run_threaded() {
    {
      std::lock_guard lock(mu_);
      threaded_ = true;
      for (auto& body : deferred_) work_.push_back(std::move(body));
      deferred_.clear();
    }
    for (int i = 0; i < concurrency_; ++i)
      std::thread([this] { execute_calls(); }).detach();
    std::unique_lock lock(mu_);
    work_cv_.notify_all();
    for (;;) {
      ipc::frame f;
      bool got;
      try {
        got = in_.next(f);
      } catch (const ipc::protocol_error& e) {
        MANTA_ERROR << "actor host: " << e.what();
        ::_exit(3);
      }
      if (got) {
        handle(f, no_nested::no);
        cv_.notify_all();
        continue;
      }
      flush();
      lock.unlock();
      std::uint32_t seen = slot_.inbox_seq.load(std::memory_order_acquire);
      auto st = in_.read_some();
      if (st == ipc::inbox::status::closed) ::_exit(0);  // the driver is gone
      if (st == ipc::inbox::status::empty && !spin_.wait_for_change(slot_.inbox_seq, seen))
        ipc::wait_readable(in_.fd(), -1);
      lock.lock();
    }
  }

  void execute_calls() {
    context_use hold;  // a worker's context lives as long as the process
    for (;;) {
      std::string body;
      {
        std::lock_guard lock(mu_);
        mu_.wait_until(work_cv_, detail::no_deadline, [&] { return !work_.empty(); });
        body = std::move(work_.front());
        work_.pop_front();
      }
      execute(reinterpret_cast<const std::byte*>(body.data()), body.size());
    }
  }

  void send_free(std::uint64_t offset) {
    ipc::frame_writer w(out_.buffer(), static_cast<std::uint16_t>(msg::free_alloc));
    w.put(offset);
  }

  worker_config cfg_;
  process_slot& slot_;
  reentrant_mutex mu_;
  ipc::inbox in_;
  ipc::outbox out_;
  std::uint64_t id_hi_;
  std::uint64_t next_seq_ = 0;
  std::uint64_t next_request_ = 0;
  std::unordered_map<object_id, local_node*> table_;
  std::unordered_map<std::uint64_t, std::uint64_t> alloc_replies_;
  std::unordered_map<std::uint64_t, std::pair<object_id, std::string>> actor_replies_;
  std::unordered_map<std::uint64_t, std::map<std::string, double>> resources_replies_;
  std::deque<std::string> deferred_;
  ipc::adaptive_spin spin_;
  std::chrono::steady_clock::time_point unflushed_since_{};
  std::vector<int> gpu_ids_;
  // The actor this process hosts, once a constructor ran here.
  void* instance_ = nullptr;
  void (*destroy_)(void*) = nullptr;
  bool actor_host_ = false;
  int concurrency_ = 1;
  bool threaded_ = false;                  ///< max_concurrency > 1: reader + executor threads
  std::condition_variable cv_;         ///< replies and objects arrived (threaded)
  std::condition_variable work_cv_;    ///< calls arrived (threaded)
  std::deque<std::string> work_;

  friend class task_invocation;
};

void task_invocation::set_result(std::size_t i, const detail::encoded_value& v) {
  result_slot& res = results_.at(i);
  if (res.set && res.offset != ipc::no_offset)
    throw usage_error("manta: a task set the same result twice");
  res.tag = v.type_tag;
  res.size = v.size;
  worker_.store_value(v, res.offset, res.inline_bytes, &grant_);
  res.contained = v.contained;
  worker_.hold(v.contained);
  res.set = true;
}

void* task_invocation::instance() { return worker_.instance_; }

void task_invocation::adopt_instance(void* object, void (*destroy)(void*)) {
  // A restarted host runs its constructor once; a second one would leak the first.
  if (worker_.instance_) throw usage_error("manta: this process already hosts an actor");
  worker_.instance_ = object;
  worker_.destroy_ = destroy;
}

void task_invocation::set_result_extent(std::size_t i, std::uint64_t tag, const detail::extent& x,
                                        std::size_t size) {
  result_slot& res = results_.at(i);
  res.tag = tag;
  res.size = size;
  res.offset = x.offset;
  res.set = true;
}

}  // namespace

void run_worker(const worker_config& config) {
  ::prctl(PR_SET_NAME, "manta-worker");
  static worker_runtime* runtime = new worker_runtime(config);  // lives until _exit
  set_current_context(runtime);
  // Held for the process's life, before any runtime lock: entry points nested in
  // the runtime's own sections then never take the context lock after them.
  context_use hold;
  runtime->run();
}

}  // namespace manta::process

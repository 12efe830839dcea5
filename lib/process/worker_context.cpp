// process/worker_context.cpp: refs, requests and the reader role of a worker
// process. A thread that must wait for the driver either reads the pipe itself
// (the reader role, one thread at a time, the lock released while it sleeps) or
// waits for the reader to signal that frames were handled.
#include "process/worker_context.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <manta/errors.hpp>

#include "ipc/owned_fds.hpp"
#include "observe/log.hpp"
#include "process/task_runner.hpp"

namespace manta::process {

using detail::ref_node;

worker_context::worker_context(const worker_config& c)
    : cfg_(c),
      slot_(c.control->slots[c.slot]),
      id_hi_((std::uint64_t{c.epoch} << 32) | (c.process_number & 0xffffffffu)),
      in_(c.from_driver),
      out_(c.to_driver,
           {&c.control->slots[c.slot].outbox_seq, &c.control->driver_seq, &c.control->driver_idle,
            c.doorbell},
           /*wait_when_full=*/true) {
  ipc::set_nonblocking(c.from_driver, true);
  ipc::set_nonblocking(c.to_driver, true);
  // A child the task forks must not write to the driver, nor keep its pipes open.
  for (int fd : {c.from_driver, c.to_driver, c.doorbell}) ipc::own_fd(fd);
}

// ---- refs

local_node* worker_context::checked(ref_node* node) {
  if (node->epoch != cfg_.epoch) throw usage_error("manta: an object_ref from another runtime was used");
  return static_cast<local_node*>(node);
}

local_node* worker_context::new_node(const object_id& id) {
  auto* n = new local_node();
  n->id = id;
  n->epoch = cfg_.epoch;
  n->count.store(1, std::memory_order_relaxed);
  table_.emplace(id, n);
  return n;
}

local_node* worker_context::counted_node(const object_id& id, bool& fresh) {
  auto it = table_.find(id);
  fresh = it == table_.end();
  if (fresh) return new_node(id);
  it->second->count.fetch_add(1, std::memory_order_relaxed);
  return it->second;
}

ref_node* worker_context::ref_from_id(const object_id& id) {
  lock_t lock(mu_);
  if ((id.hi >> 32) != cfg_.epoch && !cfg_.control->holds_imports.load(std::memory_order_acquire))
    throw usage_error("manta: an object_ref from another runtime was used");
  bool fresh;
  local_node* n = counted_node(id, fresh);
  if (fresh) {
    send(ipc::add_ref{{&id, 1}});  // the driver counts one hold per process
    flush_if_reader_sleeps();
  }
  return n;
}

void worker_context::release(ref_node* node) noexcept {
  lock_t lock(mu_);
  if (node->count.load(std::memory_order_acquire) != 0) return;  // taken again meanwhile
  table_.erase(node->id);
  try {
    send(ipc::release{{&node->id, 1}});
    flush_if_reader_sleeps();
  } catch (...) {
  }
  delete node;
}

// ---- values

ipc::id_list worker_context::place_ids(const std::vector<object_id>& ids, bool in_arena) {
  if (!in_arena && ids.size() <= ipc::max_inline_ids) return {ids, ipc::no_offset, ids.size()};
  std::uint64_t off = allocate(ids.size() * sizeof(object_id));
  std::memcpy(cfg_.arena_base + off, ids.data(), ids.size() * sizeof(object_id));
  return {{}, off, ids.size()};
}

ref_node* worker_context::put(const detail::encoded_value& v) {
  ipc::id_list contained = place_ids(v.contained);
  std::uint64_t offset = ipc::no_offset;
  if (v.size > detail::max_inline_bytes) {
    try {
      offset = allocate(v.size);
    } catch (...) {
      if (contained.offset != ipc::no_offset) give_back(contained.offset);
      throw;
    }
    std::memcpy(cfg_.arena_base + offset, v.data(), v.size);
  }
  lock_t lock(mu_);
  local_node* n = new_node(next_id());
  n->ready = true;
  n->type_tag = v.type_tag;
  n->size = v.size;
  n->offset = offset;
  if (offset == ipc::no_offset) n->inline_bytes.assign(static_cast<const char*>(v.data()), v.size);
  send(ipc::put{n->id, contained, {n->type_tag, n->size, n->offset,
                                    reinterpret_cast<const std::byte*>(n->inline_bytes.data())}});
  flush_if_reader_sleeps();
  return n;
}

detail::extent worker_context::allocate_extent(std::size_t bytes) {
  std::uint64_t off;
  task_invocation* inv = current_invocation();
  if (!inv || !inv->grant().take(bytes, off)) off = allocate(bytes);
  return {off, cfg_.arena_base + off, bytes, cfg_.epoch};
}

void worker_context::free_extent(const detail::extent& x) noexcept {
  if (x.epoch == cfg_.epoch) give_back(x.offset);
}

void worker_context::give_back(std::uint64_t offset) noexcept {
  lock_t lock(mu_);
  try {
    send(ipc::free_alloc{offset});
    flush_if_reader_sleeps();
  } catch (...) {
  }
}

ref_node* worker_context::put_extent(std::uint64_t tag, const detail::extent& x, std::size_t size) {
  if (x.epoch != cfg_.epoch || size > x.size)
    throw usage_error("manta: a buffer from another runtime, or larger than its extent, was put");
  lock_t lock(mu_);
  local_node* n = new_node(next_id());
  n->ready = true;
  n->type_tag = tag;
  n->size = size;
  n->offset = x.offset;
  send(ipc::put{n->id, {}, {tag, size, x.offset, nullptr}});
  flush_if_reader_sleeps();
  return n;
}

std::uint64_t worker_context::allocate(std::size_t size) {
  lock_t lock(mu_);
  std::uint64_t request = ++next_request_;
  send(ipc::alloc_request{request, size});
  flush();
  await(lock, detail::no_deadline, [&] { return alloc_replies_.count(request) > 0; }, arrivals::queue);
  auto [offset, why] = alloc_replies_.extract(request).mapped();
  if (offset == ipc::no_offset)
    throw object_store_full("manta: no room in the object store for a value of " + std::to_string(size) +
                            " bytes" + (why.empty() ? "" : ": " + why.substr(why.rfind("manta: ", 0) == 0 ? 7 : 0)));
  return offset;
}

// ---- waiting

void worker_context::subscribe(lock_t&, const std::vector<local_node*>& ns) {
  std::vector<object_id> ids;
  for (auto* n : ns)
    if (!n->ready && !n->subscribed) {
      n->subscribed = true;
      ids.push_back(n->id);
    }
  if (!ids.empty()) send(ipc::subscribe{ids});
}

detail::object_data worker_context::fetch(ref_node* node, detail::deadline until) {
  lock_t lock(mu_);
  auto* n = checked(node);
  if (!n->ready) {
    subscribe(lock, {n});
    if (!wait_for_objects(lock, until, [n] { return n->ready; }, {n}, 1))
      throw timeout_error("manta: get timed out waiting for an object");
  }
  if (n->failed) ipc::throw_error(n->error);
  const std::byte* data = n->offset == ipc::no_offset
                              ? reinterpret_cast<const std::byte*>(n->inline_bytes.data())
                              : cfg_.arena_base + n->offset;
  return {n->type_tag, data, n->size};
}

void worker_context::wait(std::span<ref_node* const> nodes, std::size_t num, detail::deadline until,
                          std::vector<bool>& ready) {
  lock_t lock(mu_);
  std::vector<local_node*> ns;
  ns.reserve(nodes.size());
  for (auto* node : nodes) ns.push_back(checked(node));
  auto enough = [&] {
    std::size_t k = 0;
    for (auto* n : ns) k += n->ready;
    return k >= num;
  };
  if (!enough()) {
    subscribe(lock, ns);
    wait_for_objects(lock, until, enough, ns, num);
  }
  ready.assign(ns.size(), false);
  for (std::size_t i = 0; i < ns.size(); ++i) ready[i] = ns[i]->ready;
}

template <class Pred>
bool worker_context::await(lock_t& lock, detail::deadline until, Pred done, arrivals what) {
  for (;;) {
    if (done()) return true;
    // A nested task starts only before the deadline: one that runs past it
    // cannot be stopped, so a timeout may be late by one task, never by more.
    // Not one sent ahead: the driver takes it back when this task's block
    // reaches it, for a worker that is free (else it runs here after this task).
    auto nestable = what == arrivals::nest ? std::find_if(runnable_.begin(), runnable_.end(),
                                                          [](const std::string& b) { return !ipc::sent_ahead(b); })
                                           : runnable_.end();
    if (nestable != runnable_.end() && (until == detail::no_deadline || detail::clock::now() < until)) {
      // Queued while this process waited for something else: they came first,
      // and the driver counts them as running here.
      std::string body = std::move(*nestable);
      runnable_.erase(nestable);
      lock.unlock();
      run_task_body(*this, body);
      lock.lock();
      continue;
    }
    if (detail::clock::now() >= until) return false;
    if (!reading_) {
      read_once(lock, until);
      continue;
    }
    // Another thread sleeps reading the pipe: what this one asked for (a
    // subscribe, a block) would stay in the outbox until that reader wakes,
    // which may be never. Every wait sends first.
    flush();
    if (until == detail::no_deadline) changed_.wait(lock);
    else changed_.wait_until(lock, until);
  }
}

std::uint64_t worker_context::waiting_task() const noexcept {
  std::uint64_t key = current_task_key();
  if (!key && waits_nest() && !main_stack_.empty()) key = main_stack_.back();  // a thread the running task started
  return key;
}

template <class Pred>
bool worker_context::wait_for_objects(lock_t& lock, detail::deadline until, Pred done,
                                      const std::vector<local_node*>& awaited, std::size_t needed) {
  if (!waits_nest()) return await(lock, until, done, arrivals::queue);
  const std::uint64_t key = waiting_task();
  if (!key) return await(lock, until, done, arrivals::nest);   // nothing runs here: nothing to block
  return blocked_await(lock, key, until, done, awaited, needed);
}

template <class Pred>
bool worker_context::blocked_await(lock_t& lock, std::uint64_t key, detail::deadline until, Pred done,
                                   const std::vector<local_node*>& awaited, std::size_t needed) {
  // The ids are a hint for the driver (which producers to run here first): a
  // bounded number of them, with the count needed among them lowered to match.
  std::vector<object_id> ids;
  for (auto* n : awaited) {
    if (ids.size() == ipc::max_awaited_ids) break;
    ids.push_back(n->id);
  }
  std::size_t left_out = awaited.size() - ids.size();
  std::size_t hint = needed > left_out ? needed - left_out : 1;
  hint = std::min(hint, std::max<std::size_t>(ids.size(), 1));
  // Each wait is its own (threads of one task wait on different objects): the
  // driver lends the task's CPU while any lasts and sends what each awaits.
  const std::uint32_t wait = ++next_wait_;
  send(ipc::block{key, static_cast<std::uint32_t>(hint), ids, wait});
  bool ok = await(lock, until, done, arrivals::nest);
  send(ipc::unblock{key, wait});
  // Out now: the task computes again, and the driver, still counting its CPU
  // as lent, would start extra workers beside it and show it waiting.
  flush();
  return ok;
}

void worker_context::read_once(lock_t& lock, detail::deadline until) {
  reading_ = true;
  flush();  // what this process wrote goes out before it sleeps
  std::uint32_t seen = slot_.inbox_seq.load(std::memory_order_acquire);
  lock.unlock();
  auto st = in_.read_some();
  if (st == ipc::inbox::status::empty) {
    // Spin only while a core is free: on a full machine it would take one from
    // a process that computes (this one's driver, or another worker).
    bool caught = false;
    if (process::core_free(*cfg_.control, cfg_.slot)) {
      process::spinning_mark mark(slot_.spinning);
      caught = spin_.wait_for_change(slot_.inbox_seq, seen);
    }
    if (!caught) {
      int ms = -1;
      if (until != detail::no_deadline) {
        auto left = until - detail::clock::now();
        ms = static_cast<int>(std::max<std::int64_t>(
            0, std::chrono::duration_cast<std::chrono::milliseconds>(left).count() + 1));
      }
      ipc::wait_readable(in_.fd(), ms);
    }
    st = in_.read_some();
  }
  lock.lock();
  reading_ = false;
  if (st == ipc::inbox::status::closed) ::_exit(0);  // the driver is gone
  try {
    ipc::frame f;
    while (in_.next(f)) handle(f);
  } catch (const ipc::protocol_error& e) {
    MANTA_ERROR << "worker: " << e.what();
    ::_exit(3);
  }
  changed_.notify_all();
}

void worker_context::handle(const ipc::frame& f) {
  auto r = f.reader();
  switch (static_cast<ipc::msg>(f.type)) {
    case ipc::msg::run_task:
      // Copied: the receive buffer moves as more is read.
      runnable_.emplace_back(reinterpret_cast<const char*>(f.body), f.size);
      break;
    case ipc::msg::object_ready: {
      auto m = ipc::object_ready::read(r);
      auto it = table_.find(m.id);
      if (it == table_.end() || it->second->ready) break;
      local_node* n = it->second;
      if (m.ok) {
        n->type_tag = m.location.type_tag;
        n->size = m.location.size;
        n->offset = m.location.offset;
        if (m.location.inline_data)
          n->inline_bytes.assign(reinterpret_cast<const char*>(m.location.inline_data), m.location.size);
      } else {
        n->error = std::move(m.error);
        n->failed = true;
      }
      n->ready = true;
      break;
    }
    case ipc::msg::alloc_reply: {
      auto m = ipc::alloc_reply::read(r);
      alloc_replies_[m.request] = {m.offset, std::string(m.error)};
      break;
    }
    case ipc::msg::actor_reply: {
      auto m = ipc::actor_reply::read(r);
      actor_replies_[m.request] = {m.id, std::string(m.error)};
      break;
    }
    case ipc::msg::nodes_reply: {
      auto m = ipc::nodes_reply::read(r);
      auto& rows = nodes_replies_[m.request];
      for (auto& n : m.nodes) rows.push_back({std::move(n.id), std::move(n.address), std::move(n.resources), n.alive});
      break;
    }
    case ipc::msg::resources_reply: {
      auto m = ipc::resources_reply::read(r);
      resources_replies_[m.request] = std::move(m.amounts);
      break;
    }
    default:
      throw ipc::protocol_error("unexpected message " + std::to_string(f.type));
  }
}

bool worker_context::take_task(std::string& body, detail::deadline until) {
  lock_t lock(mu_);
  if (!await(lock, until, [&] { return !runnable_.empty(); }, arrivals::queue)) return false;
  body = std::move(runnable_.front());
  runnable_.pop_front();
  return true;
}

void worker_context::run(const std::string& body) { run_task_body(*this, body); }

void worker_context::read_forever() {
  lock_t lock(mu_);
  for (;;) await(lock, detail::no_deadline, [] { return false; }, arrivals::queue);
}

// ---- sending

void worker_context::flush() {
  if (!out_.empty() && !out_.flush()) ::_exit(0);  // the driver is gone
  unflushed_since_ = {};
}

void worker_context::flush_if_reader_sleeps() {
  if (reading_) flush();
}

void worker_context::send_done(const ipc::task_done& done, bool flush_now) {
  lock_t lock(mu_);
  send(done);
  // Results batch while more tasks wait here; they go out when this process
  // next waits, or once 64 KiB or 200 µs have gathered.
  auto now = std::chrono::steady_clock::now();
  if (unflushed_since_ == std::chrono::steady_clock::time_point{}) unflushed_since_ = now;
  if (flush_now || threaded_ || reading_ || out_.pending() > (64u << 10) ||
      now - unflushed_since_ > std::chrono::microseconds(200))
    flush();
  task_ended(lock);
}

void worker_context::submit(detail::task_request&& r, ref_node** returns) {
  lock_t lock(mu_);
  std::vector<local_node*> outs;
  std::vector<object_id> out_ids, dep_ids;
  for (std::uint16_t i = 0; i < r.num_returns; ++i) {
    outs.push_back(new_node(next_id()));
    out_ids.push_back(outs.back()->id);
  }
  for (auto* d : r.deps) dep_ids.push_back(d->id);
  try {
    // (A thread the task started submits as nobody's child: it may outlive the
    // task, and what runs nested on the main thread meanwhile is not its parent.)
    send(ipc::submit{r.function->id, current_task_key(), r.mode, r.arg_count, r.options,
                     r.actor ? r.actor->id : object_id{}, out_ids, dep_ids, r.contained, r.args});
  } catch (const ipc::frame_too_large& e) {
    for (auto* n : outs) {
      table_.erase(n->id);
      delete n;
    }
    throw usage_error(std::string("manta: task(...).remote: ") + e.what());
  }
  // Sent now: the caller may compute for a long time before it next calls manta,
  // and its children should run meanwhile.
  flush();
  for (std::size_t i = 0; i < outs.size(); ++i) returns[i] = outs[i];
  // The request's own refs (its arguments, the actor) go when the caller drops
  // it: the driver holds them now.
}

template <class Reply, class M>
Reply worker_context::request(lock_t& lock, M m, std::unordered_map<std::uint64_t, Reply>& replies) {
  m.request = ++next_request_;
  send(m);
  flush();
  await(lock, detail::no_deadline, [&] { return replies.count(m.request) > 0; }, arrivals::queue);
  return std::move(replies.extract(m.request).mapped());
}

ref_node* worker_context::find_actor(const std::string& name, std::uint64_t class_tag) {
  lock_t lock(mu_);
  auto [id, error] = request(lock, ipc::find_actor{0, class_tag, name}, actor_replies_);
  if (!error.empty()) throw usage_error(error);
  if (id.empty()) return nullptr;
  // The driver holds it for this process now (once, however many refs it makes).
  bool fresh;
  return counted_node(id, fresh);
}

std::map<std::string, double> worker_context::resources(bool available_only) {
  lock_t lock(mu_);
  return request(lock, ipc::resources_request{0, available_only}, resources_replies_);
}

std::vector<node_info> worker_context::cluster_nodes() {
  lock_t lock(mu_);
  return request(lock, ipc::nodes_request{}, nodes_replies_);
}

void worker_context::kill_actor(ref_node* node) {
  lock_t lock(mu_);
  send(ipc::kill_actor{{&checked(node)->id, 1}});
  flush();
}

void worker_context::cancel_producer(ref_node* node) {
  lock_t lock(mu_);
  send(ipc::cancel{{&checked(node)->id, 1}});
  flush();
}

std::vector<int> worker_context::gpu_ids() {
  lock_t lock(mu_);
  return gpu_ids_;
}

void worker_context::use_gpus(std::span<const std::int32_t> ids) {
  lock_t lock(mu_);
  gpu_ids_.assign(ids.begin(), ids.end());
  std::string list;
  for (int g : gpu_ids_) {
    if (!list.empty()) list += ',';
    list += std::to_string(g);
  }
  ::setenv("CUDA_VISIBLE_DEVICES", list.c_str(), 1);
}

bool worker_context::claim_ahead(std::uint64_t seq) {
  for (auto& word : slot_.ahead) {
    std::uint64_t expected = seq;
    if (!word.compare_exchange_strong(expected, 0, std::memory_order_acq_rel)) continue;
    // A short task's result waits in the outbox for the next read; this task
    // was already here, so no read comes before it ends.
    lock_t lock(mu_);
    flush();
    return true;
  }
  return false;
}

void worker_context::task_started(std::uint64_t key) {
  if (threaded_ || std::this_thread::get_id() != main_thread_) return;
  lock_t lock(mu_);
  // The driver reads the first max_depth keys after a crash to know which tasks
  // were running (and charge them a retry); deeper ones count as queued.
  const std::size_t depth = main_stack_.size();
  if (depth < static_cast<std::size_t>(max_depth)) slot_.running[depth].store(key, std::memory_order_relaxed);
  main_stack_.push_back(key);
  slot_.depth.store(static_cast<std::uint32_t>(std::min<std::size_t>(main_stack_.size(), max_depth)),
                    std::memory_order_release);
}

void worker_context::task_ended(lock_t&) {
  if (threaded_ || std::this_thread::get_id() != main_thread_) return;
  if (!main_stack_.empty()) main_stack_.pop_back();
  slot_.depth.store(static_cast<std::uint32_t>(std::min<std::size_t>(main_stack_.size(), max_depth)),
                    std::memory_order_release);
}

void worker_context::ensure_setup() {
  // A setup that waits on tasks may be sent one to run here, nested: it runs
  // (the setup is under way on this very thread) rather than deadlock.
  thread_local bool in_setup = false;
  if (!cfg_.worker_setup || in_setup) return;
  std::call_once(setup_once_, [this] {
    in_setup = true;
    const detail::function_info* f = detail::function_by_id(cfg_.worker_setup);
    const std::string name = f ? f->name : "worker_setup";
    std::optional<std::string> why;
    try {
      if (!f || f->kind != detail::callable_kind::function) throw usage_error("not a registered function");
      f->fn();
    } catch (const std::exception& e) {
      why = e.what();
    } catch (...) {
      why = "a non-std exception";
    }
    if (why)
      setup_error_ = "manta: worker_setup '" + name + "' failed in worker pid " + std::to_string(::getpid()) + ": " + *why;
    in_setup = false;
    if (!setup_error_.empty()) MANTA_ERROR << setup_error_;
  });
  if (!setup_error_.empty()) throw usage_error(setup_error_);
}

}  // namespace manta::process

// runtime/io.cpp: what processes send to the driver. The I/O thread (or a user
// thread waiting in get, which takes the poll role to save a wake-up) reads the
// pipes, handles each frame under the scheduler mutex, forwards worker output
// with a (pid=N) prefix, and turns the zygote's reports into spawns and deaths.
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "ipc/fd_passing.hpp"
#include "process/args_blob.hpp"
#include "observe/log.hpp"
#include "runtime/node_runtime.hpp"

namespace manta::runtime {
namespace {
// Worker pipes to the driver are not in the epoll set: they are read when their
// sequence word moves, so a write wakes nobody unless the I/O thread sleeps.
constexpr std::uint64_t ev_stdout = 2, ev_stderr = 3, ev_writable = 4, ev_zygote = 5;

std::uint64_t ev_id(std::uint64_t kind, int slot) {
  return (kind << 32) | static_cast<std::uint32_t>(slot);
}

std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* abbrev = sigabbrev_np(sig);
    return "signal " + std::to_string(sig) + " (SIG" + (abbrev ? abbrev : "?") + ": " +
           strsignal(sig) + ")";
  }
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  return "unknown status " + std::to_string(status);
}
}  // namespace

void node_runtime::wake_io() {
  char one = 1;
  if (doorbell_[1] >= 0) [[maybe_unused]] auto n = ::write(doorbell_[1], &one, 1);
}

void node_runtime::io_loop() {
  process::context_use hold;  // before poll_mu_ and mu_, like every user thread
  std::unique_lock poll(poll_mu_);
  ipc::adaptive_spin spin;
  auto& idle = control_->driver_idle;
  while (!stopping_.load(std::memory_order_acquire)) {
    std::uint32_t seen = control_->driver_seq.load(std::memory_order_acquire);
    if (poll_events(0) > 0) continue;
    if (spin.wait_for_change(control_->driver_seq, seen)) continue;
    // Sleep: say so first, then look once more (a writer either sees the flag
    // and rings, or wrote before we looked).
    idle_generation_ += 2;
    idle.store(idle_generation_ | 1, std::memory_order_seq_cst);
    if (control_->driver_seq.load(std::memory_order_seq_cst) != processed_seq_) {
      idle_generation_ += 2;
      idle.store(idle_generation_, std::memory_order_seq_cst);
      continue;
    }
    poll.unlock();
    pollfd fds[2] = {{doorbell_[0], POLLIN, 0}, {epoll_fd_, POLLIN, 0}};
    while (::poll(fds, 2, -1) < 0 && errno == EINTR) {
    }
    char sink[256];
    while (::read(doorbell_[0], sink, sizeof sink) > 0) {
    }
    poll.lock();
    idle_generation_ += 2;
    idle.store(idle_generation_, std::memory_order_seq_cst);
  }
}

bool node_runtime::begin_borrowed_poll(std::uint32_t& idle_word) {
  auto& idle = control_->driver_idle;
  idle_word = idle.load(std::memory_order_seq_cst);
  return (idle_word & 1) && idle.compare_exchange_strong(idle_word, idle_word & ~1u);
}

void node_runtime::end_borrowed_poll(std::uint32_t idle_word) {
  // Hand the sleep back only if the I/O thread did not wake meanwhile (its
  // generation would have moved); then catch writes made while it was borrowed.
  std::uint32_t cleared = idle_word & ~1u;
  if (control_->driver_idle.compare_exchange_strong(cleared, idle_word) &&
      control_->driver_seq.load(std::memory_order_seq_cst) != processed_seq_)
    wake_io();
}

int node_runtime::poll_events(int timeout_ms) {
  // Worker pipes first, by their sequence words: no syscall unless one moved.
  int handled = 0;
  std::uint32_t before = control_->driver_seq.load(std::memory_order_acquire);
  const int slots = slots_in_use_.load(std::memory_order_acquire);
  for (int i = 0; i < slots; ++i) {
    worker_link& w = *workers_[i];
    if (w.st != worker_link::state::alive || w.input_closed) continue;
    std::uint32_t s = control_->slots[w.slot].outbox_seq.load(std::memory_order_acquire);
    if (s == w.seen_seq) continue;
    // Seen only once read to empty; otherwise the next poll comes back for the rest.
    if (drain_worker(w)) w.seen_seq = s;
    ++handled;
  }
  processed_seq_ = before;
  epoll_event evs[64];
  int n = ::epoll_wait(epoll_fd_, evs, 64, timeout_ms);
  for (int i = 0; i < n; ++i) {
    std::uint64_t kind = evs[i].data.u64 >> 32;
    int slot = static_cast<int>(evs[i].data.u64 & 0xffffffffu);
    switch (kind) {

      case ev_stdout:
      case ev_stderr:
        forward_output(*workers_[slot], kind == ev_stderr, false);
        break;
      case ev_writable: {
        scheduler_lock lock(*this);
        worker_link& w = *workers_[slot];
        if (w.st == worker_link::state::alive) {
          w.out.flush();
          if (w.out.empty() && w.write_armed) {
            w.write_armed = false;
            epoll_event ev{0, {.u64 = ev_id(ev_writable, slot)}};
            ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, w.out_fd, &ev);
          }
        }
        break;
      }
      case ev_zygote:
        handle_zygote();
        break;

    }
  }
  {
    scheduler_lock lock(*this);
    flush_dirty();
  }
  return handled + std::max(n, 0);
}

bool node_runtime::drain_worker(worker_link& w, bool to_eof) {
  // Bounded: a live worker may keep writing; the rest is read on the next poll.
  // A dead one ends with EOF (bounded too, should a stray process hold its pipe).
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (int round = 0; to_eof || round < 16; ++round) {
    auto st = w.in.read_some();
    {
      scheduler_lock lock(*this);
      try {
        ipc::frame f;
        while (w.in.next(f)) handle_frame(w, f);
      } catch (const ipc::protocol_error& e) {
        kill_worker(w, e.what());
        return true;
      }
    }
    if (st == ipc::inbox::status::closed) {
      w.input_closed = true;
      return true;
    }
    if (st == ipc::inbox::status::empty) {
      if (!to_eof || std::chrono::steady_clock::now() > give_up) return true;
      ipc::wait_readable(w.in_fd, 100);
    }
  }
  return false;
}

void node_runtime::kill_worker(worker_link& w, const std::string& why) {
  // Its death (reported by the zygote) retries its tasks; nothing more is read from it.
  MANTA_ERROR << "worker pid " << w.pid << " sent a malformed message (" << why
              << "); replacing it";
  if (w.pid > 0) ::kill(w.pid, SIGKILL);
  w.input_closed = true;
}

void node_runtime::handle_frame(worker_link& w, const ipc::frame& f) {
  auto r = f.reader();
  switch (static_cast<ipc::msg>(f.type)) {
    case ipc::msg::task_done:
      on_task_done(w, ipc::task_done::read(r));
      break;
    case ipc::msg::submit:
      on_submit(w, ipc::submit::read(r));
      break;
    case ipc::msg::put:
      on_put(w, ipc::put::read(r));
      break;
    case ipc::msg::add_ref:
      for (const auto& id : ipc::add_ref::read(r).ids)
        if (w.holds.emplace(id, false).second && !dir_.acquire(id)) w.holds.erase(id);
      break;
    case ipc::msg::release:
      for (const auto& id : ipc::release::read(r).ids) {
        auto held = w.holds.find(id);
        if (held == w.holds.end()) continue;
        if (object_entry* e = dir_.find(id)) {
          if (held->second) store_->unpin(e);
          detail::release(e);
        }
        w.holds.erase(held);
      }
      break;
    case ipc::msg::subscribe:
      for (const auto& id : ipc::subscribe::read(r).ids) {
        object_entry* e = dir_.find(id);
        if (!e) continue;
        subscriber s{w.slot, w.generation};
        if (e->status() == state_pending) e->subscribers.push_back(s);
        else notify(s, e);
      }
      break;
    case ipc::msg::alloc_request: {
      auto m = ipc::alloc_request::read(r);
      std::uint64_t off = store::no_extent;
      try {
        off = store_->allocate(m.size);  // spills cold objects if it must
        w.extents[off] = m.size;
      } catch (const object_store_full& e) {
        MANTA_DEBUG << e.what();  // the worker's task fails with object_store_full
      }
      ipc::append(w.out.buffer(), ipc::alloc_reply{m.request, off == store::no_extent ? ipc::no_offset : off});
      mark_dirty(w, true);
      break;
    }
    case ipc::msg::free_alloc: {
      auto off = ipc::free_alloc::read(r).offset;
      if (w.extents.erase(off)) store_->deallocate(off);
      break;
    }
    case ipc::msg::block: {
      auto m = ipc::block::read(r);
      auto it = tasks_.find(m.key);
      if (it == tasks_.end() || it->second->worker != w.slot) break;
      task_spec& t = *it->second;
      if (t.actor) break;  // an actor keeps what it holds; its calls wait in line
      worker_link::wait_state awaited;
      awaited.needed = m.needed;
      awaited.ids.assign(m.ids.begin(), m.ids.end());
      stats_[stats_key(t)].blocks = true;
      lend_cpu(w, t);
      lend_for(w, awaited.ids);
      w.awaiting.push_back(std::move(awaited));
      dispatch();
      break;
    }
    case ipc::msg::unblock: {
      auto it = tasks_.find(ipc::unblock::read(r).key);
      if (it == tasks_.end() || it->second->worker != w.slot || it->second->actor) break;
      reclaim_cpu(w, *it->second);
      if (!w.awaiting.empty()) w.awaiting.pop_back();
      dispatch();
      break;
    }
    case ipc::msg::find_actor: {
      auto m = ipc::find_actor::read(r);
      object_id id;
      std::string error;
      try {
        if (detail::ref_node* n = find_actor_locked(std::string(m.name), m.class_tag)) {
          id = n->id;
          // The worker's hold: one per process, however many handles it makes.
          if (!w.holds.emplace(id, false).second) detail::release(n);
        }
      } catch (const usage_error& e) {
        error = e.what();
      }
      ipc::append(w.out.buffer(), ipc::actor_reply{m.request, id, error});
      mark_dirty(w, true);
      break;
    }
    case ipc::msg::cancel:
      for (const auto& id : ipc::cancel::read(r).ids)
        if (object_entry* e = dir_.find(id); e && e->producer) cancel_task(e->producer);
      dispatch();
      break;
    case ipc::msg::kill_actor:
      for (const auto& id : ipc::kill_actor::read(r).ids)
        if (object_entry* e = dir_.find(id); e && e->actor) {
          e->actor->killed = true;
          actor_dead(*e->actor, actor_error(*e->actor, "was killed by manta::kill"));
        }
      break;
    case ipc::msg::resources_request: {
      auto m = ipc::resources_request::read(r);
      ipc::append(w.out.buffer(),
                  ipc::resources_reply{m.request, m.available ? ledger_.available() : ledger_.totals()});
      mark_dirty(w, true);
      break;
    }
    default:
      throw ipc::protocol_error("manta: unknown message type " + std::to_string(f.type));
  }
}

void node_runtime::on_task_done(worker_link& w, const ipc::task_done& m) {
  auto it = tasks_.find(m.key);
  if (it == tasks_.end() || it->second->worker != w.slot)
    throw ipc::protocol_error("manta: result for a task this worker was not running");
  task_spec* t = it->second;
  if (m.ok && m.results.size() != t->returns.size())
    throw ipc::protocol_error("manta: a task sent the wrong number of results");
  // Checked before anything changes: a bad value must not leave a half-done task.
  std::vector<std::vector<object_id>> contained(m.ok ? m.results.size() : 0);
  for (std::size_t i = 0; i < contained.size(); ++i)
    contained[i] = read_ids_and_check(w, m.results[i].contained, m.results[i].location);
  if (w.in_flight.front() == t) w.in_flight.pop_front();
  else if (w.in_flight.back() == t) w.in_flight.pop_back();
  else w.in_flight.erase(std::find(w.in_flight.begin(), w.in_flight.end(), t));
  return_cpu(w, *t);
  unpin_inputs(*t);
  t->worker = -1;
  // An offered extent a buffer took stays the worker's until sealed or freed.
  if (m.grant_used) t->grant = ipc::no_offset;
  if (t->cancelled) {  // finished before its process was killed: its results failed already
    drop_grant(w, *t);  // an extent it asked for is freed with the process's others
    finish_task(t);
    return;
  }
  if (t->mode == detail::call_mode::construct) {  // an actor's constructor
    std::unique_ptr<task_spec> owned(t);
    tasks_.erase(t->key);
    drop_grant(w, *t);
    if (m.ok) on_constructed(*t->actor, nullptr);
    else on_constructed(*t->actor, &m.error);
    return;
  }
  if (m.ok) {
    for (std::size_t i = 0; i < t->returns.size(); ++i)
      seal(t->returns[i], m.results[i].location, std::move(contained[i]), &w);
    drop_grant(w, *t);
    auto& s = stats_[stats_key(*t)];
    s.ewma_ns = s.known ? (s.ewma_ns * 7 + static_cast<double>(m.ns)) / 8 : static_cast<double>(m.ns);
    s.known = true;
    if (t->num_returns == 1) s.result_bytes = t->returns[0]->size;
    tasks_finished_.fetch_add(1, std::memory_order_relaxed);
    finish_task(t);
  } else {
    drop_grant(w, *t);
    bool retry = t->options.retry_exceptions && m.error.kind == ipc::error_kind::task_exception &&
                 (t->options.max_retries < 0 || t->attempts < t->options.max_retries);
    if (retry) {
      ++t->attempts;
      task_retries_.fetch_add(1, std::memory_order_relaxed);
      enqueue(t);
    } else {
      fail_task(t, m.error);
    }
  }
  dispatch();
}

void node_runtime::on_submit(worker_link& w, const ipc::submit& m) {
  auto t = std::make_unique<task_spec>();
  t->fn = detail::function_by_id(m.function);
  if (!t->fn) throw ipc::protocol_error("manta: nested task names an unknown function");
  if (m.returns.empty() || m.returns.size() > 0xffff)
    throw ipc::protocol_error("manta: nested task with a bad number of results");
  if (m.args.size() > detail::max_inline_args + (1 << 16) * 16)
    throw ipc::protocol_error("manta: nested task with an oversized argument blob");
  // Every ref argument must name one of its dependencies: send_task relies on it.
  process::for_each_arg(m.args, m.arg_count, [&](const process::blob_arg& a) {
    if (a.kind == process::arg_kind::ref && a.size_or_index >= m.deps.size())
      throw ipc::protocol_error("manta: nested task argument names no dependency");
  });
  t->parent = m.parent;
  t->mode = m.mode;
  t->num_returns = static_cast<std::uint16_t>(m.returns.size());
  t->arg_count = m.arg_count;
  t->options = m.options;
  if (!m.actor.empty()) {
    t->actor_entry = dir_.acquire(m.actor);
    if (!t->actor_entry || !t->actor_entry->actor)
      throw ipc::protocol_error("manta: a method call on an unknown actor");
    t->actor = t->actor_entry->actor;
  }
  for (const auto& id : m.returns) {
    if ((id.hi >> 32) != epoch_ || dir_.find(id))
      throw ipc::protocol_error("manta: nested task with a foreign or reused id");
    object_entry* e = new_entry(id, 2);  // the worker's ref and the task's hold
    w.holds.emplace(id, false);
    dir_.insert(e);
    t->returns.push_back(e);
  }
  if (t->mode == detail::call_mode::construct) {
    t->parent = 0;  // an actor outlives the task that started it
    if (t->returns.size() != 1) throw ipc::protocol_error("manta: an actor constructor with results");
    t->actor = new actor_record();
    t->actor->class_tag = t->fn->class_tag;
    t->returns[0]->actor = t->actor;
  }
  for (const auto& id : m.deps) {
    object_entry* e = dir_.acquire(id);
    if (!e) throw ipc::protocol_error("manta: nested task depends on an unknown object");
    t->deps.push_back(e);
  }
  for (const auto& id : m.contained)
    if (object_entry* e = dir_.acquire(id)) t->contained.push_back(e);
  t->args = m.args;
  t->key = ++next_key_;
  task_spec* raw = t.release();
  tasks_.emplace(raw->key, raw);
  if (raw->parent) ++nested_live_;
  if (auto why = admit(*raw)) {  // the nested caller gets the error from get
    fail_task(raw, ipc::error_info{ipc::error_kind::usage, "manta::usage_error", *why, raw->name(), {}, 0, 0});
    return;
  }
  register_task(raw);
}

std::vector<object_id> node_runtime::read_ids_and_check(worker_link& w, const ipc::id_list& l,
                                                        const ipc::value_location& loc) {
  if (loc.offset != ipc::no_offset) {
    auto x = w.extents.find(loc.offset);
    if (x == w.extents.end() || loc.size > x->second)
      throw ipc::protocol_error("manta: a value in an extent never granted to this worker");
  }
  if (l.offset == ipc::no_offset) return {l.ids.begin(), l.ids.end()};
  // A long list of refs lies in an extent of its own, which goes back once read.
  auto x = w.extents.find(l.offset);
  if (x == w.extents.end() || l.offset == loc.offset || l.count > x->second / sizeof(object_id))
    throw ipc::protocol_error("manta: a list of refs in an extent never granted to this worker");
  std::vector<object_id> ids(l.count);
  std::memcpy(ids.data(), arena_->base() + l.offset, l.count * sizeof(object_id));
  w.extents.erase(x);
  store_->deallocate(l.offset);
  return ids;
}

void node_runtime::on_put(worker_link& w, const ipc::put& m) {
  if ((m.id.hi >> 32) != epoch_ || dir_.find(m.id)) throw ipc::protocol_error("manta: put with a foreign or reused id");
  std::vector<object_id> contained = read_ids_and_check(w, m.contained, m.location);
  object_entry* e = new_entry(m.id, 1);  // the worker's ref
  seal(e, m.location, std::move(contained), &w);
  store_->pin(e);  // it knows where the bytes lie while it holds them; just sealed, so in place
  w.holds.emplace(m.id, true);
  dir_.insert(e);
}

void node_runtime::forward_output(worker_link& w, bool err, bool drain) {
  int fd = err ? w.stderr_fd : w.stdout_fd;
  std::string& partial = err ? w.stderr_partial : w.stdout_partial;
  std::string out;
  const std::string prefix = "(pid=" + std::to_string(w.pid) + ") ";
  char buf[8192];
  bool eof = false;
  // Draining waits for EOF, bounded in case a stray process still holds the pipe.
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      partial.append(buf, static_cast<std::size_t>(n));
      std::size_t start = 0, nl;
      while ((nl = partial.find('\n', start)) != std::string::npos) {
        out += prefix;
        out.append(partial, start, nl - start + 1);
        start = nl + 1;
      }
      partial.erase(0, start);
      if (!drain && out.size() > (1 << 16)) break;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      if (!drain) break;
      if (std::chrono::steady_clock::now() > give_up) {
        eof = true;
        break;
      }
      ipc::wait_readable(fd, 100);
      continue;
    }
    eof = true;
    break;
  }
  if (eof && !partial.empty()) {
    out += prefix + partial + "\n";
    partial.clear();
  }
  if (!out.empty()) {
    FILE* stream = err ? stderr : stdout;
    std::fwrite(out.data(), 1, out.size(), stream);
    std::fflush(stream);
  }
  if (eof) {
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    ::close(fd);
    (err ? w.stderr_fd : w.stdout_fd) = -1;
  }
}

// ---- processes

void node_runtime::request_spawn(int slot) {
  worker_link& w = *workers_[slot];
  w.st = worker_link::state::starting;
  ++w.generation;
  control_->slots[slot].depth.store(0, std::memory_order_relaxed);
  process::zygote_request req{process::zygote_request::spawn_worker, slot, ++next_process_number_};
  if (!ipc::send_packet(zygote_.socket, &req, sizeof req))
    MANTA_ERROR << "cannot reach the zygote to start a worker";
}

void node_runtime::handle_zygote() {
  for (;;) {
    process::zygote_reply r{};
    std::vector<int> fds;
    long n = ipc::recv_packet(zygote_.socket, &r, sizeof r, &fds);
    if (n < 0) return;  // nothing more now
    if (n == 0) {
      if (!stopping_.load()) MANTA_ERROR << "the zygote died; no worker can be replaced";
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, zygote_.socket, nullptr);
      return;
    }
    if (r.kind == process::zygote_reply::spawned && fds.size() == 4) {
      scheduler_lock lock(*this);
      on_spawned(r, fds);
    } else if (r.kind == process::zygote_reply::exited) {
      if (r.pid < 0) MANTA_ERROR << "the zygote could not fork a worker: " << std::strerror(r.status);
      else on_exited(r.pid, r.status);
    }
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
}

void node_runtime::on_spawned(const process::zygote_reply& r, std::vector<int>& fds) {
  if (r.slot < 0 || r.slot >= slots_in_use_.load()) return;
  worker_link& w = *workers_[r.slot];
  w.pid = r.pid;
  w.out_fd = std::exchange(fds[0], -1);
  w.in_fd = std::exchange(fds[1], -1);
  w.stdout_fd = std::exchange(fds[2], -1);
  w.stderr_fd = std::exchange(fds[3], -1);
  for (int fd : {w.out_fd, w.in_fd, w.stdout_fd, w.stderr_fd}) ipc::set_nonblocking(fd, true);
  w.out = ipc::outbox(w.out_fd, {&control_->slots[r.slot].inbox_seq});
  w.seen_seq = control_->slots[r.slot].outbox_seq.load(std::memory_order_acquire);
  w.in = ipc::inbox(w.in_fd);
  w.input_closed = w.exited = w.dirty = w.write_armed = w.killed_to_cancel = false;
  w.in_flight.clear();
  w.blocked = w.active_default = w.nondefault = 0;
  w.awaiting.clear();
  w.holds_cpu = false;
  epoll_event out{EPOLLIN, {.u64 = ev_id(ev_stdout, r.slot)}};
  epoll_event err{EPOLLIN, {.u64 = ev_id(ev_stderr, r.slot)}};
  epoll_event wr{0, {.u64 = ev_id(ev_writable, r.slot)}};
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, w.stdout_fd, &out);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, w.stderr_fd, &err);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, w.out_fd, &wr);
  w.st = worker_link::state::alive;
  if (w.actor) send_constructor(w, *w.actor);
  dispatch();
}

void node_runtime::on_exited(pid_t pid, int status) {
  const int slots = slots_in_use_.load();
  for (int i = 0; i < slots; ++i) {
    worker_link& w = *workers_[i];
    if (w.pid != pid || w.st == worker_link::state::dead) continue;
    w.exited = true;
    w.exit_status = status;
    // What it sent before it died counts (results, puts, releases): read it all first.
    if (!w.input_closed) drain_worker(w, /*to_eof=*/true);
    scheduler_lock lock(*this);
    finalize_death(w);
    return;
  }
}

void node_runtime::close_link(worker_link& w) {
  for (auto& [off, size] : w.extents) store_->deallocate(off);
  w.extents.clear();
  for (const auto& [id, pinned] : w.holds)
    if (object_entry* e = dir_.find(id)) {
      if (pinned) store_->unpin(e);
      detail::release(e);
    }
  w.holds.clear();
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, w.out_fd, nullptr);
  ::close(w.out_fd);
  ::close(w.in_fd);
  w.out_fd = w.in_fd = -1;
  w.out = ipc::outbox();
  w.in = ipc::inbox();
  // Forward its last lines now: the slot's next process gets new pipes.
  if (w.stdout_fd >= 0) forward_output(w, false, true);
  if (w.stderr_fd >= 0) forward_output(w, true, true);
  w.st = worker_link::state::dead;
}

void node_runtime::finalize_death(worker_link& w) {
  if (w.st == worker_link::state::dead) return;
  const std::string cause = describe_exit(w.exit_status);
  MANTA_DEBUG << "worker pid " << w.pid << " ended: " << cause;
  if (!stopping_.load()) processes_lost_.fetch_add(1, std::memory_order_relaxed);
  if (w.actor) {
    actor_host_died(w, cause);
    return;
  }
  // Which tasks were executing (not merely queued) when it died.
  const process::process_slot& slot = control_->slots[w.slot];
  std::uint32_t depth = std::min<std::uint32_t>(slot.depth.load(), process::max_depth);
  auto was_running = [&](std::uint64_t key) {
    for (std::uint32_t i = 0; i < depth; ++i)
      if (slot.running[i].load() == key) return true;
    return false;
  };
  std::vector<task_spec*> lost(w.in_flight.begin(), w.in_flight.end());
  w.in_flight.clear();
  std::vector<std::pair<task_spec*, ipc::error_info>> failed;
  for (auto it = lost.rbegin(); it != lost.rend(); ++it) {  // keep their order at the queue front
    task_spec* t = *it;
    return_cpu(w, *t);
    unpin_inputs(*t);
    t->grant = ipc::no_offset;  // freed with the worker's other extents below
    if (t->cancelled) {  // its results failed when it was cancelled
      finish_task(t);
      continue;
    }
    // Killed to cancel another task, the process did not fail the ones it ran.
    if (was_running(t->key) && !w.killed_to_cancel) {
      ++t->attempts;
      if (t->options.max_retries >= 0 && t->attempts > t->options.max_retries) {
        int sig = WIFSIGNALED(w.exit_status) ? WTERMSIG(w.exit_status) : 0;
        failed.emplace_back(t, ipc::error_info{ipc::error_kind::worker_crashed, "",
                                               "manta: worker pid " + std::to_string(w.pid) +
                                                   " running '" + t->name() + "' died from " + cause +
                                                   " (tried " + std::to_string(t->attempts) + " times)",
                                               t->name(), {}, w.pid, sig});
        continue;
      }
    }
    task_retries_.fetch_add(1, std::memory_order_relaxed);
    requeue_front(t);
  }
  w.blocked = w.active_default = w.nondefault = 0;
  w.awaiting.clear();
  if (w.holds_cpu) ledger_.give_cpu(1);
  w.holds_cpu = false;
  close_link(w);
  for (auto& [t, err] : failed) fail_task(t, err);
  if (!stopping_.load()) request_spawn(w.slot);
  dispatch();
}

}  // namespace manta::runtime

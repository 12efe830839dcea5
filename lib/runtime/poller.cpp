// runtime/poller.cpp: reading what processes send. The I/O thread (or a user
// thread waiting in get, which takes the poll role to save a wake-up) reads the
// worker pipes when their sequence words move, hands each frame to the
// scheduler under its mutex, and turns the zygote's replies into started and
// ended processes. Worker pipes to the driver are not in the epoll set: a
// write wakes nobody unless the I/O thread sleeps (then the writer rings the
// doorbell).
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "observe/crash_stack.hpp"
#include "observe/log.hpp"
#include "runtime/node_runtime.hpp"

#include <sys/wait.h>

namespace manta::runtime {
namespace {
constexpr std::uint64_t ev_writable = 4, ev_zygote = 5;
}  // namespace

namespace {
// Linux 6.12 and later let a SCHED_OTHER thread ask for a shorter time slice
// (sched_attr's runtime); a thread with a shorter slice than the one running
// preempts it when it wakes. Older kernels ignore the request.
void ask_for_short_slices() {
  if (::sched_getscheduler(0) != SCHED_OTHER) return;  // a real-time or batch driver keeps its policy
  struct {
    std::uint32_t size, policy;
    std::uint64_t flags;
    std::int32_t nice;
    std::uint32_t priority;
    std::uint64_t runtime, deadline, period;
  } attr{};
  attr.size = sizeof attr;
  attr.policy = SCHED_OTHER;
  attr.nice = ::getpriority(PRIO_PROCESS, 0);
  attr.runtime = 100'000;  // ns: the shortest slice the kernel allows
  [[maybe_unused]] long rc = ::syscall(SYS_sched_setattr, 0, &attr, 0);
  MANTA_DEBUG << "short slice for the I/O thread: " << (rc == 0 ? "yes" : std::strerror(errno));
}
}  // namespace

void node_runtime::wake_io() {
  char one = 1;
  if (doorbell_[1] >= 0) [[maybe_unused]] auto n = ::write(doorbell_[1], &one, 1);
}

void node_runtime::io_loop() {
  ask_for_short_slices();
  process::context_use hold;  // before poll_mu_ and mu_, like every user thread
  std::unique_lock poll(poll_mu_);
  ipc::adaptive_spin spin;
  auto& idle = control_->driver_idle;
  while (!stopping_.load(std::memory_order_acquire)) {
    run_cluster_io();
    const int sleep_ms = expire_due_timeouts();
    std::uint32_t seen = control_->driver_seq.load(std::memory_order_acquire);
    if (poll_events(0) > 0) continue;
    if (process::core_free(*control_, -1)) {
      process::spinning_mark mark(control_->driver_spinners);
      if (spin.wait_for_change(control_->driver_seq, seen)) continue;
    }
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
    while (::poll(fds, 2, sleep_ms) < 0 && errno == EINTR) {
    }
    char sink[256];
    while (::read(doorbell_[0], sink, sizeof sink) > 0) {
    }
    poll.lock();
    idle_generation_ += 2;
    idle.store(idle_generation_, std::memory_order_seq_cst);
    take_submissions();  // actors retired while it slept
  }
}

int node_runtime::expire_due_timeouts() {
  using clock = std::chrono::steady_clock;
  const clock::time_point next = sched_->next_timeout();
  if (next == clock::time_point::max()) return -1;  // the common case: one atomic load
  clock::time_point now = clock::now();
  if (now >= next) {
    scheduler_lock lock(*this);
    sched_->expire_timeouts(now);
    now = clock::now();
  }
  const clock::time_point after = sched_->next_timeout();
  if (after == clock::time_point::max()) return -1;
  // Rounded up: waking a little late is fine, waking early only loops once more.
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(std::max(after - now, clock::duration(0)))
                              .count());
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
  const int slots = sched_->slots_in_use();
  for (int i = 0; i < slots; ++i) {
    worker_link& w = sched_->link(i);
    if (w.st.load(std::memory_order_acquire) != worker_link::state::alive || w.input_closed) continue;
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
    if (kind == ev_writable) {
      scheduler_lock lock(*this);
      sched_->writable(sched_->link(slot));
    } else if (kind == ev_zygote) {
      if (evs[i].events & EPOLLOUT) {
        scheduler_lock lock(*this);
        if (zygote_->send_queued() && zygote_watched_) {
          epoll_event ev{EPOLLIN, {.u64 = ev_zygote << 32}};
          ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, zygote_->socket(), &ev);
        }
      }
      if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) handle_zygote();
    }
  }
  {
    scheduler_lock lock(*this);
    sched_->flush_dirty();
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
      ipc::frame f;
      try {
        while (w.in.next(f)) sched_->handle(w, f);
      } catch (const ipc::protocol_error& e) {
        sched_->malformed(w, e.what());
        return true;
      }
    }
    if (st == ipc::inbox::status::closed) {
      w.input_closed = true;
      return true;
    }
    if (st == ipc::inbox::status::empty) {
      if (!to_eof || std::chrono::steady_clock::now() > give_up) return true;
      ipc::wait_readable(w.in.fd(), 100);
    }
  }
  return false;
}

void node_runtime::handle_zygote() {
  if (lost_.load(std::memory_order_acquire)) return;
  while (auto r = zygote_->next()) {
    switch (r->kind) {
      case zygote_link::reply::spawned: {
        output_->add(r->pid, r->fds[2], r->fds[3]);
        scheduler_lock lock(*this);
        sched_->spawned(r->slot, r->pid, r->fds[0], r->fds[1]);
        break;
      }
      case zygote_link::reply::spawn_failed: {
        scheduler_lock lock(*this);
        sched_->spawn_failed(r->slot, r->why);
        break;
      }
      case zygote_link::reply::exited: {
        for (int i = 0; i < sched_->slots_in_use(); ++i) {
          worker_link& w = sched_->link(i);
          if (w.pid != r->pid || w.st != worker_link::state::alive) continue;
          // What it sent before it died counts (results, puts, releases): read it all first.
          if (!w.input_closed) drain_worker(w, /*to_eof=*/true);
          // Named before the scheduler's lock: the first naming reads the binary's symbols.
          std::string stack = WIFSIGNALED(r->status) ? observe::take_crash_stack(crash_dir_, r->pid) : "";
          scheduler_lock lock(*this);
          sched_->exited(w, r->status, std::move(stack));
          break;
        }
        scheduler_lock lock(*this);
        sched_->respawn_missing();  // a process gone frees descriptors for one that could not start
        break;
      }
      case zygote_link::reply::closed: {
        if (zygote_watched_.exchange(false)) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, zygote_->socket(), nullptr);
        if (stopping_.load()) return;
        {
          scheduler_lock lock(*this);  // the zygote's pid is read under it (process_ids)
          const pid_t pid = zygote_->pid();
          int status = zygote_->reap();
          lost_why_ = "the runtime's zygote process (pid " + std::to_string(pid) + ") died" +
                      (status >= 0 ? " from " + describe_exit(status) : "");
          sched_->lose_node(lost_why_);
        }
        lost_.store(true, std::memory_order_release);
        dir_->wake_all();
        return;
      }
    }
    if (lost_.load(std::memory_order_acquire)) return;
  }
}

}  // namespace manta::runtime

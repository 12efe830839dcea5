// pool_state.cpp: what the copies of a manta::pool share: the work it has not
// seen finish, close/join/terminate, and the thread running map_async callbacks.
#include <cstdio>

#include <manta/pool.hpp>

#include "process/context.hpp"
#include "observe/thread_name.hpp"

namespace manta {

pool::pool(settings s) : state_(std::make_shared<detail::pool_state>(s.max_retries)) {
  process::require_context("manta::pool");
}

}  // namespace manta

namespace manta::detail {
namespace {
// How long the result thread waits on the jobs it knows before looking for new
// ones: a wait cannot be woken by a job added meanwhile.
constexpr auto result_poll = std::chrono::milliseconds(5);

/// Which of `refs` are done; all of them when the runtime is gone.
std::vector<bool> done_now(const std::vector<counted_ref>& refs, std::size_t num, deadline until) {
  std::vector<ref_node*> nodes;
  nodes.reserve(refs.size());
  for (const auto& r : refs) nodes.push_back(r.node());
  std::vector<bool> ready(refs.size(), true);
  if (nodes.empty() || !process::current_context()) return ready;
  try {
    wait_nodes(nodes, num, until, ready);
  } catch (const usage_error&) {
    ready.assign(refs.size(), true);  // the runtime went away meanwhile
  }
  return ready;
}
}  // namespace

bool pool_state::on_result_thread() const {
  std::lock_guard lock(mu_);
  return results_.joinable() && results_.get_id() == std::this_thread::get_id();
}

pool_state::~pool_state() {
  const bool from_callback = on_result_thread();
  if (!from_callback) {
    try {
      wait_for_work();
    } catch (...) {
      // The pool's work failed or the runtime is gone: nothing left to wait for.
    }
  }
  {
    std::lock_guard lock(loop_->mu);
    loop_->stopping = true;
  }
  loop_->changed.notify_all();
  if (results_.joinable()) {
    if (from_callback)
      results_.detach();  // a callback dropped the last copy: the thread ends after the jobs left
    else
      results_.join();
  }
}

void pool_state::check_open(const char* what) const {
  std::lock_guard lock(mu_);
  if (closed_)
    throw usage_error(std::string("manta: pool::") + what + " on a pool that was " +
                      (terminated_ ? "terminated" : "closed"));
}

void pool_state::check_not_terminated() const {
  std::lock_guard lock(mu_);
  if (terminated_) throw task_cancelled_error("manta: the pool was terminated");
}

void pool_state::track(const counted_ref& ref) {
  std::lock_guard lock(mu_);
  work_.push_back(ref);
  if (work_.size() >= prune_at_) prune_locked();
}

/// Drops the refs already done, so the pool keeps no finished result alive for long.
void pool_state::prune_locked() {
  std::vector<bool> done = done_now(work_, 1, clock::now());
  std::size_t kept = 0;
  for (std::size_t i = 0; i < work_.size(); ++i)
    if (!done[i]) work_[kept++] = std::move(work_[i]);
  work_.resize(kept);
  prune_at_ = std::max<std::size_t>(64, 2 * kept);
}

void pool_state::when_done(std::vector<counted_ref> refs, std::function<void()> finish) {
  {
    std::lock_guard lock(loop_->mu);
    loop_->jobs.push_back({std::move(refs), std::move(finish)});
  }
  loop_->changed.notify_all();
  std::lock_guard lock(mu_);
  if (!results_.joinable()) results_ = std::thread([loop = loop_] {
    observe::name_runtime_thread("manta-pool");
    loop->run();
  });
}

void pool_state::report_dropped(std::exception_ptr e) noexcept {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    std::fprintf(stderr, "manta: a pool callback threw (dropped): %s\n", x.what());
  } catch (...) {
    std::fprintf(stderr, "manta: a pool callback threw (dropped)\n");
  }
}

void pool_state::close() noexcept {
  std::lock_guard lock(mu_);
  closed_ = true;
}

void pool_state::terminate() {
  std::vector<counted_ref> work;
  {
    std::lock_guard lock(mu_);
    closed_ = terminated_ = true;
    work = work_;
  }
  std::vector<bool> done = done_now(work, 1, clock::now());
  for (std::size_t i = 0; i < work.size(); ++i)
    if (!done[i]) cancel_producer(work[i].node());
}

void pool_state::join() {
  {
    std::lock_guard lock(mu_);
    if (!closed_) throw usage_error("manta: pool::join before close or terminate");
  }
  if (on_result_thread()) throw usage_error("manta: pool::join from one of the pool's own callbacks");
  wait_for_work();
}

void pool_state::wait_for_work() {
  std::vector<counted_ref> work;
  {
    std::lock_guard lock(mu_);
    work = work_;
  }
  done_now(work, work.size(), no_deadline);
  {
    std::unique_lock lock(loop_->mu);
    loop_->changed.wait(lock, [&] { return loop_->jobs.empty(); });
  }
  std::lock_guard lock(mu_);
  prune_locked();
}

void result_loop::run() {
  std::unique_lock lock(mu);
  for (;;) {
    changed.wait(lock, [&] { return stopping || !jobs.empty(); });
    if (jobs.empty()) return;
    // Only this thread removes jobs or touches their refs: the list may grow meanwhile.
    std::vector<job*> known;
    std::vector<counted_ref> refs;
    for (job& j : jobs) {
      known.push_back(&j);
      refs.insert(refs.end(), j.pending.begin(), j.pending.end());
    }
    lock.unlock();
    std::vector<bool> done = done_now(refs, 1, clock::now() + result_poll);
    refs.clear();
    std::vector<job*> finished;
    std::size_t k = 0;
    for (job* j : known) {
      std::size_t kept = 0;
      for (std::size_t i = 0; i < j->pending.size(); ++i, ++k)
        if (!done[k]) j->pending[kept++] = std::move(j->pending[i]);
      j->pending.resize(kept);
      if (kept == 0) finished.push_back(j);
    }
    for (job* j : finished) {
      try {
        j->finish();
      } catch (...) {
        pool_state::report_dropped(std::current_exception());
      }
    }
    std::list<job> gone;
    lock.lock();
    for (job* j : finished)
      for (auto it = jobs.begin(); it != jobs.end(); ++it)
        if (&*it == j) {
          gone.splice(gone.end(), jobs, it);
          break;
        }
    lock.unlock();
    changed.notify_all();
    // Their callbacks may hold the pool's last copies: destroyed without the lock.
    gone.clear();
    lock.lock();
  }
}

}  // namespace manta::detail

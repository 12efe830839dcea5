// runtime/spiller.cpp: one thread doing the store's disk work, one job at a time.
#include "runtime/spiller.hpp"

#include <manta/errors.hpp>

#include "observe/thread_name.hpp"
#include "runtime/directory.hpp"
#include "runtime/object_store.hpp"

namespace manta::runtime {

void spiller::stop() {
  std::deque<job> left;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    left.swap(jobs_);
  }
  posted_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (const job& j : left)
    for (object_entry* e : j.entries) detail::release(e);
}

void spiller::post(job j) {
  std::lock_guard lock(mu_);
  if (stop_) {
    for (object_entry* e : j.entries) detail::release(e);
    return;
  }
  jobs_.push_back(j);
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  posted_.notify_one();
}

void spiller::run() {
  observe::name_runtime_thread("manta-spill");
  std::unique_lock lock(mu_);
  for (;;) {
    posted_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (stop_) return;
    const job j = jobs_.front();
    jobs_.pop_front();
    lock.unlock();
    outcome out;
    try {
      if (j.what == job::kind::room) {
        std::string disk_error;
        out.offset = store_.allocate(j.size, disk_error);  // spills cold objects to make room
        if (out.offset == ipc::no_offset) {
          out.error = store_.no_room(j.size, disk_error);
          out.disk_failed = !disk_error.empty();
        }
      } else {
        std::size_t i = 0;
        try {
          for (; i < j.entries.size(); ++i) store_.pin(j.entries[i]);  // read back (room first), held
          out.offset = 0;
        } catch (...) {
          out.failed_at = i;
          while (i-- > 0) store_.unpin(j.entries[i]);
          throw;
        }
      }
    } catch (const std::exception& e) {
      out.error = e.what();
    }
    answer_(j, out);
    lock.lock();
  }
}

}  // namespace manta::runtime

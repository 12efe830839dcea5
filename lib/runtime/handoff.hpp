// runtime/handoff.hpp: queues by which any thread hands work to whichever
// thread holds the scheduler's lock next. They never allocate through TBB
// (runtime/pool_allocated.hpp says why a fork child must not).
#pragma once

#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

namespace manta::runtime {

/// Items linked through their own `Next` member: a push is one CAS and never
/// allocates; take() empties it at once and gives the items in push order.
template <class T, T* T::*Next>
class intrusive_handoff {
 public:
  void push(T* item) noexcept {
    item->*Next = head_.load(std::memory_order_relaxed);
    // Sequentially consistent, as the lock's holder checks empty() after it
    // lets go while the pusher tries the lock after it pushes: one of the two
    // must see the other.
    while (!head_.compare_exchange_weak(item->*Next, item, std::memory_order_seq_cst, std::memory_order_relaxed)) {
    }
  }
  bool empty() const noexcept { return head_.load(std::memory_order_seq_cst) == nullptr; }
  /// Every item pushed so far, oldest first, linked through Next (nullptr ends it).
  T* take() noexcept {
    T* newest = head_.exchange(nullptr, std::memory_order_acquire);
    T* oldest = nullptr;
    while (newest) oldest = std::exchange(newest, std::exchange(newest->*Next, oldest));
    return oldest;
  }

 private:
  std::atomic<T*> head_{nullptr};
};

/// Values handed over rarely (actors to stop, objects freed that nodes copied):
/// a locked vector, with a flag so that looking costs no lock.
template <class T>
class locked_handoff {
 public:
  void push(T value) {
    std::lock_guard lock(mu_);
    items_.push_back(std::move(value));
    nonempty_.store(true, std::memory_order_seq_cst);  // (as above)
  }
  bool empty() const noexcept { return !nonempty_.load(std::memory_order_seq_cst); }
  std::vector<T> take() {
    std::lock_guard lock(mu_);
    nonempty_.store(false, std::memory_order_relaxed);
    return std::exchange(items_, {});
  }

 private:
  std::mutex mu_;
  std::vector<T> items_;
  std::atomic<bool> nonempty_{false};
};

}  // namespace manta::runtime

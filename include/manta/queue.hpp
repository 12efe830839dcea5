// queue.hpp: manta::queue<T>, a FIFO shared by the driver, tasks and actors
// (Ray's Queue, multiprocessing.Queue). Its home is an actor of its own.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <manta/actor.hpp>
#include <manta/errors.hpp>
#include <manta/object_ref.hpp>

namespace manta {
namespace detail {

/// An item on its way in or out of a queue: one ref to the stored value (none:
/// no item), typed as bytes so that one actor class serves every queue<T>.
using queue_item = std::vector<object_ref<std::byte>>;

/// The actor holding a queue's items: a process of its own, so the queue lives
/// on whichever of its users dies. Its calls wait a bounded time, so that more
/// waiting callers than it has threads cannot keep a put or get from running.
class queue_store {
 public:
  explicit queue_store(std::size_t maxsize) : maxsize_(maxsize) {}
  /// Appends `item`, waiting up to `wait_ms` while the queue is full.
  /// @returns false if it was still full.
  bool push(queue_item item, std::int64_t wait_ms);
  /// Takes the oldest item, waiting up to `wait_ms` while the queue is empty.
  /// @returns it, or no item.
  queue_item pop(std::int64_t wait_ms);
  std::size_t size() const;

  /// Threads of the home: callers waiting at once beyond this take turns.
  static constexpr int threads = 16;
  /// Longest a call waits inside the home before its caller asks again.
  static constexpr std::chrono::milliseconds slice{100};

 private:
  const std::size_t maxsize_;  // 0: unbounded
  mutable std::mutex mu_;
  std::condition_variable not_empty_, not_full_;
  std::deque<object_ref<std::byte>> items_;
};

/// A queue's home as seen by one process: started at the first use there, so a
/// queue that is only decoded into (or never used) starts no process.
class queue_home {
 public:
  explicit queue_home(std::size_t maxsize, actor_handle<queue_store> handle = {})
      : maxsize_(maxsize), handle_(std::move(handle)) {}
  std::size_t maxsize() const noexcept { return maxsize_; }
  actor_handle<queue_store> handle() {
    std::lock_guard lock(mu_);
    if (!handle_.node())
      handle_ = actor<queue_store>().max_concurrency(queue_store::threads).remote(maxsize_);
    return handle_;
  }

 private:
  const std::size_t maxsize_;
  std::mutex mu_;
  actor_handle<queue_store> handle_;
};

/// The same object seen through a ref of another type (no copy, one more count).
template <class To, class From>
object_ref<To> retype(const object_ref<From>& r) {
  acquire(r.node());
  return object_ref<To>(r.node());
}

/// How long the home may wait on this call: the time left, at most one slice.
inline std::int64_t slice_ms(deadline until) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock::now());
  return std::clamp<std::int64_t>(left.count(), 0, queue_store::slice.count());
}

}  // namespace detail

/// A FIFO of `T` shared by every process holding a copy of the handle: pass it
/// to tasks and actors, return it from them. Values go through the object store
/// (large ones are not copied through the home). `maxsize` 0: unbounded.
/// The home, an actor process of its own, starts at the first use and lives
/// while any copy of the handle does: the items survive the death of the
/// processes that put them. Each item is delivered at most once: one taken by
/// a `get` whose caller dies meanwhile is lost with it. Thread-safe.
///
///     manta::queue<int> q;
///     manta::task(producer).remote(q);   // void producer(manta::queue<int> q) { q.put(1); }
///     int first = q.get();
template <class T>
class queue {
 public:
  explicit queue(std::size_t maxsize = 0) : home_(std::make_shared<detail::queue_home>(maxsize)) {}

  /// Appends `x`, waiting while the queue is full.
  void put(const T& x) { put_until(x, detail::no_deadline); }
  /// As put(x), giving up after `timeout` with timeout_error.
  template <class Rep, class Period>
  void put(const T& x, std::chrono::duration<Rep, Period> timeout) {
    put_until(x, detail::deadline_after(timeout));
  }
  /// Appends `x` unless the queue is full. @returns whether it did.
  bool try_put(const T& x) { return push(x, detail::clock::now()); }

  /// Takes the oldest item, waiting for one.
  T get() { return *take_until(detail::no_deadline); }
  /// As get(), giving up after `timeout` with timeout_error.
  template <class Rep, class Period>
  T get(std::chrono::duration<Rep, Period> timeout) {
    if (auto v = take_until(detail::deadline_after(timeout))) return std::move(*v);
    throw timeout_error("manta: queue::get timed out: the queue stayed empty");
  }
  /// Takes the oldest item if there is one.
  std::optional<T> try_get() { return take_until(detail::clock::now()); }

  /// Items in the queue now.
  std::size_t size() const { return manta::get(home_->handle().task(&detail::queue_store::size).remote()); }
  bool empty() const { return size() == 0; }
  /// Its capacity (0: unbounded).
  std::size_t maxsize() const noexcept { return home_->maxsize(); }

  /// Serialised as its home (started now if it was not).
  template <class Archive>
  void save(Archive& archive) const {
    archive(home_->handle(), home_->maxsize());
  }
  template <class Archive>
  void load(Archive& archive) {
    actor_handle<detail::queue_store> handle;
    std::size_t maxsize = 0;
    archive(handle, maxsize);
    home_ = std::make_shared<detail::queue_home>(maxsize, std::move(handle));
  }

 private:
  bool push(const T& x, detail::deadline until) {
    detail::queue_item item{detail::retype<std::byte>(manta::put(x))};
    auto home = home_->handle();
    for (;;) {
      if (manta::get(home.task(&detail::queue_store::push).remote(item, detail::slice_ms(until)))) return true;
      if (detail::clock::now() >= until) return false;
    }
  }
  void put_until(const T& x, detail::deadline until) {
    if (!push(x, until))
      throw timeout_error("manta: queue::put timed out: the queue stayed full (maxsize " +
                          std::to_string(maxsize()) + ")");
  }
  std::optional<T> take_until(detail::deadline until) {
    auto home = home_->handle();
    for (;;) {
      detail::queue_item item = manta::get(home.task(&detail::queue_store::pop).remote(detail::slice_ms(until)));
      if (!item.empty()) return manta::get(detail::retype<T>(item.front()));
      if (detail::clock::now() >= until) return std::nullopt;
    }
  }

  std::shared_ptr<detail::queue_home> home_;  // shared by the copies in this process
};

}  // namespace manta

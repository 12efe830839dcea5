// stream.hpp: streaming tasks (Ray's streaming generators). A registered
// function whose first parameter is `manta::emitter<T>&` returns a
// ref_stream<T> from task(f).remote(args...): each value it emits is sealed as
// its own object and reaches the caller at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <iterator>
#include <mutex>
#include <optional>
#include <tuple>
#include <utility>

#include <manta/actor.hpp>
#include <manta/detail/stream_iterator.hpp>
#include <manta/errors.hpp>
#include <manta/object_ref.hpp>
#include <manta/queue.hpp>

namespace manta {
namespace detail {

/// The actor between a streaming task and its caller: the items emitted and not
/// yet taken, in order. One per stream, living while the stream or the task does.
class stream_store {
 public:
  /// Item number `seq` of the stream. A number it had already (the task is a
  /// retry, emitting again what its first run did) is dropped.
  /// @throws usage_error for a gap in the numbers.
  void push(std::uint64_t seq, queue_item item);
  /// The task returned: nothing more will come.
  void finish();
  /// The oldest item not taken, waiting up to `wait_ms` for one; none once the
  /// stream is finished and empty (then `ended` is true), or when none came.
  std::tuple<queue_item, bool> pop(std::int64_t wait_ms);

  /// A caller waiting in pop must not keep the task's push out.
  static constexpr int threads = 4;

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::uint64_t received_ = 0;  // items pushed, duplicates not counted
  bool finished_ = false;
  std::deque<object_ref<std::byte>> items_;
};

}  // namespace detail

/// The first parameter of a streaming task: `emit` hands values to the caller.
/// Move-only; lives in the task's process for the call.
template <class T>
class emitter {
 public:
  emitter() = default;  // what a task's argument is decoded into
  explicit emitter(actor_handle<detail::stream_store> home) : home_(std::move(home)) {}
  emitter(emitter&& o) noexcept
      : home_(std::move(o.home_)), in_task_(std::exchange(o.in_task_, false)), next_(o.next_),
        exceptions_at_start_(o.exceptions_at_start_) {}  // (never moved while emitting)
  emitter& operator=(emitter&&) = delete;
  /// When the task returns (not when it throws), its stream ends at once; else
  /// the caller finds the end, or the error, through the task's result.
  ~emitter() {
    if (!in_task_ || !home_.node() || std::uncaught_exceptions() > exceptions_at_start_) return;
    try {
      manta::get(home_.task(&detail::stream_store::finish).remote());
    } catch (...) {  // the caller still finds the end through the task's result
    }
  }

  /// Seals `value` as an object of its own and hands it to the caller's stream,
  /// returning once the stream holds it. Thread-safe: threads the task started
  /// may emit too; values from one thread keep their order.
  void emit(const T& value) {
    if (!home_.node()) throw usage_error("manta: emit on an emitter that belongs to no stream");
    detail::queue_item item{detail::retype<std::byte>(manta::put(value))};
    std::lock_guard lock(mu_);  // numbers are handed to the store in order
    manta::get(home_.task(&detail::stream_store::push).remote(next_, std::move(item)));
    ++next_;
  }

  template <class Archive>
  void save(Archive& archive) const {
    archive(home_);
  }
  template <class Archive>
  void load(Archive& archive) {
    archive(home_);
    in_task_ = true;
  }

 private:
  actor_handle<detail::stream_store> home_;
  bool in_task_ = false;  // the task's own, decoded from its arguments: ends the stream
  std::uint64_t next_ = 0;  // the number of the next emit, counted again from 0 by a retry
  std::mutex mu_;           // one emit at a time
  int exceptions_at_start_ = std::uncaught_exceptions();
};

/// What task(f).remote(...) returns for a streaming task: an input range of
/// object_ref<T>, one per value emitted, each as soon as it was emitted. It ends
/// when the task returns, and rethrows the task's failure once the values
/// emitted before it were taken. Move-only; single pass; not thread-safe.
///
///     for (auto& r : manta::task(read_lines).remote(path)) use(manta::get(r));
template <class T>
class ref_stream {
 public:
  ref_stream(actor_handle<detail::stream_store> home, object_ref<void> done)
      : home_(std::move(home)), done_(std::move(done)) {}
  ref_stream(ref_stream&&) noexcept = default;
  ref_stream& operator=(ref_stream&&) noexcept = default;

  /// The next value's ref, waiting for it; nullopt at the end.
  /// @throws what the task failed with, after the values it emitted first.
  std::optional<object_ref<T>> next() { return next_until(detail::no_deadline); }
  /// As next(), giving up after `timeout` with timeout_error (the stream goes on).
  template <class Rep, class Period>
  std::optional<object_ref<T>> next(std::chrono::duration<Rep, Period> timeout) {
    return next_until(detail::deadline_after(timeout));
  }

  /// The task's own result: done when it returned, failed as it failed.
  const object_ref<void>& task_result() const noexcept { return done_; }

  using iterator = detail::stream_iterator<ref_stream, object_ref<T>>;
  iterator begin() { return iterator(this); }
  std::default_sentinel_t end() const noexcept { return {}; }

 private:
  std::optional<object_ref<T>> next_until(detail::deadline until) {
    if (ended_) return std::nullopt;
    for (;;) {
      const bool task_over = is_done();
      // Once the task is over, every value it emitted is in the store already:
      // one look without waiting finds what is left.
      auto [item, finished] = manta::get(
          home_.task(&detail::stream_store::pop).remote(task_over ? 0 : detail::slice_ms(until)));
      if (!item.empty()) return detail::retype<T>(item.front());
      if (finished || task_over) {
        ended_ = true;
        manta::get(done_);  // rethrows the task's failure
        return std::nullopt;
      }
      if (detail::clock::now() >= until)
        throw timeout_error("manta: ref_stream::next timed out: the task emitted nothing in time");
    }
  }
  bool is_done() const {
    std::vector<bool> ready;
    detail::ref_node* n = done_.node();
    detail::wait_nodes({&n, 1}, 1, detail::clock::now(), ready);
    return ready[0];
  }

  actor_handle<detail::stream_store> home_;
  object_ref<void> done_;
  bool ended_ = false;
};

namespace detail {

/// task(f).remote(args...) for a streaming f: its stream's home first, then the task.
template <class T>
struct stream_submitter {
  template <class... P, class... A>
  static ref_stream<T> submit(task_request&& request, A&&... args) {
    auto home = actor<stream_store>().max_concurrency(stream_store::threads).remote();
    arg_writer writer(request);
    encode_arg<emitter<T>>(writer, emitter<T>(home));
    (encode_arg<P>(writer, std::forward<A>(args)), ...);
    ref_node* out[1];
    detail::submit(std::move(request), out);
    return ref_stream<T>(std::move(home), object_ref<void>(out[0]));
  }
};

}  // namespace detail
}  // namespace manta

// pool.hpp: manta::pool, the multiprocessing.Pool replacement built on tasks.
// Inputs are cut into chunks, one task per chunk, so mapping a million tiny items
// costs little more than the work itself.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <iterator>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <ranges>
#include <thread>
#include <tuple>
#include <vector>

#include <manta/as_completed.hpp>
#include <manta/detail/stream_iterator.hpp>
#include <manta/object_ref.hpp>
#include <manta/registry.hpp>
#include <manta/task.hpp>

namespace manta {
namespace detail {

/// Number of workers of the running node (for automatic chunk sizes).
std::size_t worker_count();

inline std::size_t auto_chunksize(std::size_t n, std::size_t chunksize) {
  if (chunksize) return chunksize;
  std::size_t parts = std::max<std::size_t>(1, worker_count() * 4);
  return std::max<std::size_t>(1, (n + parts - 1) / parts);
}

/// Submits f over [first, first + n) of `items` as one map or starmap task.
template <class R, class X, class Items>
object_ref<std::vector<R>> submit_chunk(const function_info& fn, call_mode mode, int max_retries,
                                        const Items& items, std::size_t first, std::size_t n) {
  task_request request;
  request.function = &fn;
  request.mode = mode;
  request.options.max_retries = max_retries;
  arg_writer writer(request);
  using Item = std::ranges::range_value_t<Items>;
  if constexpr (is_raw_v<std::vector<X>> && std::ranges::contiguous_range<Items> &&
                std::is_same_v<Item, X>) {
    encoded_value e;  // borrow the caller's contiguous bytes: no copy before the store
    e.type_tag = type_tag<std::vector<X>>();
    e.borrowed = std::ranges::data(items) + first;
    e.size = n * sizeof(X);
    writer.value(e);
  } else {
    auto begin = std::next(std::ranges::begin(items), static_cast<std::ptrdiff_t>(first));
    std::vector<X> chunk(begin, std::next(begin, static_cast<std::ptrdiff_t>(n)));
    writer.value(encode(chunk));
  }
  ref_node* out[1];
  submit(std::move(request), out);
  return object_ref<std::vector<R>>(out[0]);
}

template <class R, class X, class Items>
std::vector<object_ref<std::vector<R>>> submit_chunks(const function_info& fn, call_mode mode,
                                                      int max_retries, const Items& items,
                                                      std::size_t chunksize) {
  const std::size_t n = static_cast<std::size_t>(std::ranges::distance(items));
  chunksize = auto_chunksize(n, chunksize);
  std::vector<object_ref<std::vector<R>>> chunks;
  chunks.reserve((n + chunksize - 1) / chunksize);
  for (std::size_t i = 0; i < n; i += chunksize)
    chunks.push_back(submit_chunk<R, X>(fn, mode, max_retries, items, i, std::min(chunksize, n - i)));
  return chunks;
}

/// Appends a chunk's results to `out`; raw results are copied straight from the store.
template <class R>
void append_chunk(const object_ref<std::vector<R>>& chunk, std::vector<R>& out) {
  if constexpr (is_raw_v<std::vector<R>>) {
    object_data d = fetch(chunk.node(), no_deadline);
    fetch_pin pin(chunk.node());  // unpinned once copied: a long map must not pin every chunk
    check_tag<std::vector<R>>(d);
    std::size_t old = out.size();
    out.resize(old + d.size / sizeof(R));
    if (d.size) std::memcpy(out.data() + old, d.data, d.size);
  } else {
    std::vector<R> part = get(chunk);
    std::move(part.begin(), part.end(), std::back_inserter(out));
  }
}

/// The jobs of map_async waiting for their refs, and the thread running their
/// callbacks. Shared by the pool's state and that thread: a callback may drop
/// the pool's last copy, and the thread still finishes the jobs left.
struct result_loop {
  struct job {
    std::vector<counted_ref> pending;  // not seen done yet
    std::function<void()> finish;
  };
  std::mutex mu;
  std::condition_variable changed;  // a job added or finished, or stopping
  bool stopping = false;            // no new jobs: end once they are done
  std::list<job> jobs;
  /// The thread's body: runs each job's finish once all its refs are done, in
  /// the order they are found done; returns once stopping with no job left.
  void run();
};

/// What a pool's copies, its result streams and its async results share: the
/// work it has not seen finish (for join, terminate and the destructor) and the
/// thread that runs map_async callbacks. Thread-safe.
class pool_state {
 public:
  explicit pool_state(int max_retries) : max_retries(max_retries) {}
  /// Waits for the pool's work and callbacks (not when the runtime is gone).
  ~pool_state();
  pool_state(const pool_state&) = delete;
  pool_state& operator=(const pool_state&) = delete;

  const int max_retries;

  /// @throws usage_error naming `what` once the pool is closed or terminated.
  void check_open(const char* what) const;
  /// @throws task_cancelled_error once the pool is terminated.
  void check_not_terminated() const;
  /// Notes a ref of the pool's work: join waits for it, terminate cancels it.
  void track(const counted_ref& ref);
  /// Runs `finish` on the result thread once every one of `refs` is done.
  void when_done(std::vector<counted_ref> refs, std::function<void()> finish);
  void close() noexcept;
  void terminate();
  void join();
  /// Prints what a callback threw: there is no caller to give it to.
  static void report_dropped(std::exception_ptr e) noexcept;

 private:
  void wait_for_work();
  void prune_locked();
  bool on_result_thread() const;

  mutable std::mutex mu_;
  bool closed_ = false, terminated_ = false;
  std::vector<counted_ref> work_;  // async work not seen done yet
  std::size_t prune_at_ = 64;
  std::shared_ptr<result_loop> loop_ = std::make_shared<result_loop>();
  std::thread results_;  // started at the first job
};

/// Reads a range that is not sized lazily and submits it chunk by chunk.
template <class R, class X, class V>
class chunk_feeder {
 public:
  chunk_feeder(std::shared_ptr<pool_state> pool, const function_info& fn, call_mode mode, V items,
               std::size_t chunksize)
      : pool_(std::move(pool)), fn_(fn), mode_(mode), items_(std::move(items)),
        next_(std::ranges::begin(items_)), chunksize_(chunksize ? chunksize : 1) {}
  chunk_feeder(const chunk_feeder&) = delete;  // next_ may point into items_

  std::optional<object_ref<std::vector<R>>> next() {
    if (next_ == std::ranges::end(items_)) return std::nullopt;
    pool_->check_not_terminated();
    std::vector<X> chunk;
    while (chunk.size() < chunksize_ && next_ != std::ranges::end(items_)) {
      chunk.push_back(*next_);
      ++next_;
    }
    auto ref = submit_chunk<R, X>(fn_, mode_, pool_->max_retries, chunk, 0, chunk.size());
    pool_->track(ref);
    return ref;
  }

 private:
  std::shared_ptr<pool_state> pool_;
  const function_info& fn_;
  call_mode mode_;
  V items_;
  std::ranges::iterator_t<V> next_;
  std::size_t chunksize_;
};

template <class F>
const function_info& mapped_function(F f, bool star) {
  const function_info& fn = function_for(reinterpret_cast<erased_fn>(f));
  if ((star ? fn.starmap : fn.map) == nullptr)
    throw usage_error("manta: pool cannot map '" + fn.name + "' (it returns void or takes spans)");
  return fn;
}

}  // namespace detail

/// Results of imap / imap_unordered: an input range yielding each R as it is ready.
/// A failed chunk rethrows its error once; the stream then goes on with the next.
/// A lazy input is read as results are taken, a bounded window of chunks ahead.
/// Keeps its pool alive. Single pass; not thread-safe.
template <class R>
class result_stream {
 public:
  using chunk_ref = object_ref<std::vector<R>>;
  using feed_fn = std::function<std::optional<chunk_ref>()>;

  /// @param items  how many results it will yield, 0 if not known (for the progress bar)
  result_stream(std::shared_ptr<detail::pool_state> pool, std::vector<chunk_ref> chunks, feed_fn feed,
                std::size_t window, bool ordered, std::size_t items = 0, const char* what = "imap")
      : pool_(std::move(pool)), feed_(std::move(feed)), window_(window), items_(items), what_(what) {
    if (!ordered) unordered_.emplace(std::vector<chunk_ref>{});
    for (auto& c : chunks) add(std::move(c));
  }

  /// The next result, or nullopt at the end. Rethrows a chunk's failure.
  std::optional<R> next() {
    if (!bar_ && !done_) bar_ = std::make_unique<detail::progress_bar>(items_, what_);
    while (buffer_.empty()) {
      top_up();
      std::optional<chunk_ref> chunk;
      if (unordered_) {
        chunk = unordered_->next();
      } else if (!in_order_.empty()) {
        chunk = std::move(in_order_.front());
        in_order_.pop_front();
      }
      if (!chunk) {
        bar_.reset();  // the last line drawn, if any
        done_ = true;
        return std::nullopt;
      }
      --in_flight_;
      std::vector<R> part = get(*chunk);
      buffer_.assign(std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
    }
    R r = std::move(buffer_.front());
    buffer_.pop_front();
    bar_->advance();
    return r;
  }

  using iterator = detail::stream_iterator<result_stream, R>;
  iterator begin() { return iterator(this); }
  std::default_sentinel_t end() { return {}; }

 private:
  void add(chunk_ref c) {
    ++in_flight_;
    if (unordered_)
      unordered_->add(std::move(c));
    else
      in_order_.push_back(std::move(c));
  }
  /// Submits chunks of a lazy input until `window_` are in flight.
  void top_up() {
    while (feed_ && in_flight_ < window_) {
      std::optional<chunk_ref> c = feed_();
      if (!c) {
        feed_ = nullptr;
        break;
      }
      add(std::move(*c));
    }
  }

  std::shared_ptr<detail::pool_state> pool_;
  feed_fn feed_;                                   // lazy input; empty once read to the end
  std::size_t window_;
  std::size_t in_flight_ = 0;                      // chunks submitted and not taken
  std::deque<chunk_ref> in_order_;                 // imap
  std::optional<completion_stream<std::vector<R>>> unordered_;  // imap_unordered
  std::deque<R> buffer_;
  std::size_t items_;
  const char* what_;
  std::unique_ptr<detail::progress_bar> bar_;  // made by the first next()
  bool done_ = false;
};

/// What map_async and starmap_async return (multiprocessing's AsyncResult):
/// the results, in order, once every chunk is done. Copyable; thread-safe.
template <class R>
class async_result {
 public:
  async_result(std::vector<object_ref<std::vector<R>>> chunks, std::shared_future<void> callbacks_done)
      : chunks_(std::move(chunks)), callbacks_done_(std::move(callbacks_done)) {}

  /// The results, waiting for them (and for the callback, if one was given).
  /// @throws the first failure of a chunk.
  std::vector<R> get() const {
    wait();
    return collect();
  }
  /// As get(), giving up after `timeout` with timeout_error.
  template <class Rep, class Period>
  std::vector<R> get(std::chrono::duration<Rep, Period> timeout) const {
    if (!wait(timeout)) throw timeout_error("manta: async_result::get timed out");
    return collect();
  }
  void wait() const { wait_until(detail::no_deadline); }
  /// @returns whether everything is done within `timeout`.
  template <class Rep, class Period>
  bool wait(std::chrono::duration<Rep, Period> timeout) const {
    return wait_until(detail::deadline_after(timeout));
  }
  /// Every chunk is done, and so is the callback.
  bool ready() const { return wait_until(detail::clock::now()); }
  /// Every chunk succeeded. @throws usage_error while not ready (as Python's ValueError).
  bool successful() const {
    if (!ready()) throw usage_error("manta: async_result::successful before the result is ready");
    try {
      collect();
      return true;
    } catch (const std::exception&) {
      return false;
    }
  }

 private:
  bool wait_until(detail::deadline until) const {
    std::vector<detail::ref_node*> nodes;
    for (const auto& c : chunks_) nodes.push_back(c.node());
    std::vector<bool> ready;
    detail::wait_nodes(nodes, nodes.size(), until, ready);
    for (bool r : ready)
      if (!r) return false;
    return !callbacks_done_.valid() ||
           callbacks_done_.wait_until(until) == std::future_status::ready;
  }
  std::vector<R> collect() const {
    std::vector<R> out;
    for (const auto& c : chunks_) detail::append_chunk(c, out);
    return out;
  }

  std::vector<object_ref<std::vector<R>>> chunks_;
  std::shared_future<void> callbacks_done_;  // invalid without callbacks
};

/// Callbacks of map_async / starmap_async, run on the pool's result thread (one
/// thread per pool, one callback at a time) once every chunk is done: keep them
/// short. Exactly one of them runs; what they throw is printed and dropped.
template <class R>
struct async_callbacks {
  std::function<void(const std::vector<R>&)> on_result;
  std::function<void(std::exception_ptr)> on_error;
};

/// A process pool in the style of multiprocessing.Pool, running on the runtime's
/// workers. Functions must be registered with MANTA_REMOTE. Thread-safe. Copies
/// share one pool: its work, close/join/terminate and its callback thread; the
/// last copy to go waits for the pool's work (and callbacks) to finish.
///
///     manta::pool p;
///     std::vector<int> squares = p.map(square, std::vector<int>{1, 2, 3});
class pool {
 public:
  struct settings {
    /// Times a chunk is re-run when its worker dies (-1: until it succeeds).
    int max_retries = 3;
  };

  /// Uses the running runtime's workers.
  /// @throws usage_error without a runtime.
  pool() : pool(settings{}) {}
  explicit pool(settings s);

  /// [f(x) for x in xs], in order. `chunksize` 0 picks about 4 chunks per worker
  /// (1 for a range that is not sized, which is read lazily).
  template <class R, class P, std::ranges::input_range Items>
  std::vector<R> map(R (*f)(P), Items&& xs, std::size_t chunksize = 0) const {
    return run_map<R, detail::param_t<P>>(detail::mapped_function(f, false), detail::call_mode::map,
                                          std::forward<Items>(xs), chunksize, "map");
  }

  /// [f(a, b, ...) for (a, b, ...) in tuples], in order.
  template <class R, class... P, std::ranges::input_range Items>
  std::vector<R> starmap(R (*f)(P...), Items&& tuples, std::size_t chunksize = 0) const {
    return run_map<R, std::tuple<detail::param_t<P>...>>(detail::mapped_function(f, true),
                                                         detail::call_mode::starmap,
                                                         std::forward<Items>(tuples), chunksize, "starmap");
  }

  /// Results in order, each available as soon as its chunk is done. A range that
  /// is not sized is read lazily, two chunks per worker ahead of the results taken.
  template <class R, class P, std::ranges::input_range Items>
  result_stream<R> imap(R (*f)(P), Items&& xs, std::size_t chunksize = 0) const {
    return stream<R, detail::param_t<P>>(detail::mapped_function(f, false), detail::call_mode::map,
                                         std::forward<Items>(xs), chunksize, true, "imap");
  }

  /// Results in the order their chunks finish.
  template <class R, class P, std::ranges::input_range Items>
  result_stream<R> imap_unordered(R (*f)(P), Items&& xs, std::size_t chunksize = 0) const {
    return stream<R, detail::param_t<P>>(detail::mapped_function(f, false), detail::call_mode::map,
                                         std::forward<Items>(xs), chunksize, false, "imap_unordered");
  }

  /// map without waiting: the input is read and every chunk submitted at once.
  template <class R, class P, std::ranges::input_range Items>
  async_result<R> map_async(R (*f)(P), Items&& xs, async_callbacks<R> callbacks = {},
                            std::size_t chunksize = 0) const {
    return run_async<R, detail::param_t<P>>(detail::mapped_function(f, false), detail::call_mode::map,
                                            std::forward<Items>(xs), std::move(callbacks), chunksize,
                                            "map_async");
  }

  /// starmap without waiting.
  template <class R, class... P, std::ranges::input_range Items>
  async_result<R> starmap_async(R (*f)(P...), Items&& tuples, async_callbacks<R> callbacks = {},
                                std::size_t chunksize = 0) const {
    return run_async<R, std::tuple<detail::param_t<P>...>>(
        detail::mapped_function(f, true), detail::call_mode::starmap, std::forward<Items>(tuples),
        std::move(callbacks), chunksize, "starmap_async");
  }

  /// f(args...) as one task; same as manta::task(f).remote(args...).
  template <class R, class... P, class... A>
  object_ref<R> apply_async(R (*f)(P...), A&&... args) const {
    state_->check_open("apply_async");
    object_ref<R> r = task(f).remote(std::forward<A>(args)...);
    state_->track(r);
    return r;
  }

  /// f(args...) as one task, waiting for its result.
  template <class R, class... P, class... A>
  R apply(R (*f)(P...), A&&... args) const {
    state_->check_open("apply");
    return get(task(f).remote(std::forward<A>(args)...));
  }

  /// No more work may be given to the pool (a usage_error says so); what it has
  /// runs to its end, including the lazy inputs of its streams.
  void close() noexcept { state_->close(); }
  /// Closes the pool and cancels its unfinished work: tasks not started never run,
  /// running ones have their process killed and replaced; their results, and the
  /// streams still reading lazy inputs, fail with task_cancelled_error.
  void terminate() { state_->terminate(); }
  /// Waits for the pool's submitted work and its callbacks.
  /// @throws usage_error unless closed or terminated first (as multiprocessing),
  /// or when called from one of its callbacks.
  void join() { state_->join(); }

 private:
  template <class R, class X, class Items>
  std::vector<R> run_map(const detail::function_info& fn, detail::call_mode mode, Items&& xs,
                         std::size_t chunksize, const char* what) const {
    state_->check_open(what);
    std::vector<R> out;
    if constexpr (std::ranges::sized_range<Items>) {
      auto chunks = detail::submit_chunks<R, X>(fn, mode, state_->max_retries, xs, chunksize);
      out.reserve(std::ranges::size(xs));
      detail::progress_bar bar(std::ranges::size(xs), what);
      for (const auto& c : chunks) {
        detail::append_chunk(c, out);
        bar.set(out.size());
      }
    } else {
      for (auto& r : stream<R, X>(fn, mode, std::forward<Items>(xs), chunksize, true, what))
        out.push_back(std::move(r));
    }
    return out;
  }

  template <class R, class X, class Items>
  result_stream<R> stream(const detail::function_info& fn, detail::call_mode mode, Items&& xs,
                          std::size_t chunksize, bool ordered, const char* what) const {
    state_->check_open(what);
    if constexpr (std::ranges::sized_range<Items>) {
      auto chunks = detail::submit_chunks<R, X>(fn, mode, state_->max_retries, xs, chunksize);
      for (const auto& c : chunks) state_->track(c);
      return {state_, std::move(chunks), nullptr, 0, ordered, std::ranges::size(xs), what};
    } else {
      using V = std::views::all_t<Items>;
      auto feeder = std::make_shared<detail::chunk_feeder<R, X, V>>(
          state_, fn, mode, std::views::all(std::forward<Items>(xs)), chunksize);
      return {state_, {}, [feeder] { return feeder->next(); }, 2 * detail::worker_count(), ordered, 0, what};
    }
  }

  template <class R, class X, class Items>
  async_result<R> run_async(const detail::function_info& fn, detail::call_mode mode, Items&& xs,
                            async_callbacks<R> callbacks, std::size_t chunksize, const char* what) const {
    state_->check_open(what);
    std::vector<object_ref<std::vector<R>>> chunks;
    if constexpr (std::ranges::sized_range<Items>) {
      chunks = detail::submit_chunks<R, X>(fn, mode, state_->max_retries, xs, chunksize);
    } else {
      std::vector<X> all;  // read whole: the result is one list (the end may be a sentinel)
      for (auto&& x : xs) all.push_back(std::forward<decltype(x)>(x));
      chunks = detail::submit_chunks<R, X>(fn, mode, state_->max_retries, all, chunksize);
    }
    std::vector<detail::counted_ref> refs(chunks.begin(), chunks.end());
    for (const auto& c : refs) state_->track(c);
    if (!callbacks.on_result && !callbacks.on_error) return {std::move(chunks), {}};
    auto done = std::make_shared<std::promise<void>>();
    std::shared_future<void> done_future = done->get_future().share();
    state_->when_done(std::move(refs), [chunks, callbacks = std::move(callbacks), done] {
      struct signal {  // the result is ready once the callback has run, or thrown
        std::promise<void>& p;
        ~signal() { p.set_value(); }
      } at_end{*done};
      std::vector<R> out;
      std::exception_ptr failure;
      try {
        for (const auto& c : chunks) detail::append_chunk(c, out);
      } catch (...) {
        failure = std::current_exception();
      }
      try {
        if (failure && callbacks.on_error) callbacks.on_error(failure);
        if (!failure && callbacks.on_result) callbacks.on_result(out);
      } catch (...) {
        detail::pool_state::report_dropped(std::current_exception());
      }
    });
    return {std::move(chunks), std::move(done_future)};
  }

  std::shared_ptr<detail::pool_state> state_;
};

}  // namespace manta

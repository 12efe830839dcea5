// pool.hpp: manta::pool, the multiprocessing.Pool replacement built on tasks.
// Inputs are cut into chunks, one task per chunk, so mapping a million tiny items
// costs little more than the work itself.
#pragma once

#include <algorithm>
#include <cstring>
#include <deque>
#include <iterator>
#include <optional>
#include <ranges>
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
/// Single pass; not thread-safe.
template <class R>
class result_stream {
 public:
  result_stream(std::vector<object_ref<std::vector<R>>> chunks, bool ordered) {
    if (ordered)
      in_order_.assign(std::make_move_iterator(chunks.begin()), std::make_move_iterator(chunks.end()));
    else
      unordered_.emplace(std::move(chunks));
  }

  /// The next result, or nullopt at the end. Rethrows a chunk's failure.
  std::optional<R> next() {
    while (buffer_.empty()) {
      std::optional<object_ref<std::vector<R>>> chunk;
      if (unordered_) {
        chunk = unordered_->next();
      } else if (!in_order_.empty()) {
        chunk = std::move(in_order_.front());
        in_order_.pop_front();
      }
      if (!chunk) return std::nullopt;
      std::vector<R> part = get(*chunk);
      buffer_.assign(std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
    }
    R r = std::move(buffer_.front());
    buffer_.pop_front();
    return r;
  }

  using iterator = detail::stream_iterator<result_stream, R>;
  iterator begin() { return iterator(this); }
  std::default_sentinel_t end() { return {}; }

 private:
  std::deque<object_ref<std::vector<R>>> in_order_;                  // imap
  std::optional<completion_stream<std::vector<R>>> unordered_;       // imap_unordered
  std::deque<R> buffer_;
};

/// A process pool in the style of multiprocessing.Pool, running on the runtime's
/// workers. Functions must be registered with MANTA_REMOTE. Thread-safe.
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

  /// [f(x) for x in xs], in order. `chunksize` 0 picks about 4 chunks per worker.
  template <class R, class P, std::ranges::sized_range Items>
  std::vector<R> map(R (*f)(P), const Items& xs, std::size_t chunksize = 0) const {
    auto chunks = detail::submit_chunks<R, detail::param_t<P>>(detail::mapped_function(f, false),
                                                               detail::call_mode::map, settings_.max_retries, xs, chunksize);
    std::vector<R> out;
    out.reserve(std::ranges::size(xs));
    for (const auto& c : chunks) detail::append_chunk(c, out);
    return out;
  }

  /// [f(a, b, ...) for (a, b, ...) in tuples], in order.
  template <class R, class... P, std::ranges::sized_range Items>
  std::vector<R> starmap(R (*f)(P...), const Items& tuples, std::size_t chunksize = 0) const {
    auto chunks = detail::submit_chunks<R, std::tuple<detail::param_t<P>...>>(
        detail::mapped_function(f, true), detail::call_mode::starmap, settings_.max_retries, tuples, chunksize);
    std::vector<R> out;
    out.reserve(std::ranges::size(tuples));
    for (const auto& c : chunks) detail::append_chunk(c, out);
    return out;
  }

  /// Results in order, each available as soon as its chunk is done.
  template <class R, class P, std::ranges::sized_range Items>
  result_stream<R> imap(R (*f)(P), const Items& xs, std::size_t chunksize = 0) const {
    return {detail::submit_chunks<R, detail::param_t<P>>(detail::mapped_function(f, false),
                                                         detail::call_mode::map, settings_.max_retries, xs, chunksize),
            true};
  }

  /// Results in the order their chunks finish.
  template <class R, class P, std::ranges::sized_range Items>
  result_stream<R> imap_unordered(R (*f)(P), const Items& xs, std::size_t chunksize = 0) const {
    return {detail::submit_chunks<R, detail::param_t<P>>(detail::mapped_function(f, false),
                                                         detail::call_mode::map, settings_.max_retries, xs, chunksize),
            false};
  }

  /// f(args...) as one task; same as manta::task(f).remote(args...).
  template <class R, class... P, class... A>
  object_ref<R> apply_async(R (*f)(P...), A&&... args) const {
    return task(f).remote(std::forward<A>(args)...);
  }

  /// f(args...) as one task, waiting for its result.
  template <class R, class... P, class... A>
  R apply(R (*f)(P...), A&&... args) const {
    return get(task(f).remote(std::forward<A>(args)...));
  }

 private:
  settings settings_;
};

}  // namespace manta

// detail/stream_iterator.hpp: the iterator of manta's single-pass result ranges.
#pragma once

#include <cstddef>
#include <exception>
#include <iterator>
#include <optional>
#include <utility>

namespace manta::detail {

/// Input iterator over a stream whose `next()` returns std::optional<V> (nullopt
/// at the end); compared with std::default_sentinel_t.
///
/// When `next()` throws (a failed item), `++` throws it and the iterator holds
/// no value: the next comparison with the end, or `*`, moves on to the item
/// after it. So a loop that catches per item goes on with the rest, and never
/// sees the item before the failure twice:
///
///     for (auto it = r.begin(); it != r.end();) {
///       try { use(*it); ++it; } catch (const manta::task_error&) {}
///     }
template <class Stream, class V>
class stream_iterator {
 public:
  using value_type = V;
  using difference_type = std::ptrdiff_t;
  stream_iterator() = default;
  /// The first item is taken at the first look, not here: `begin()` never
  /// throws, and a first item that failed throws from `*` like any other.
  explicit stream_iterator(Stream* s) : stream_(s), behind_(true) {}
  /// @throws what moving on past a failed item threw (the item after it failed too)
  const V& operator*() const {
    settle();
    if (failure_) std::rethrow_exception(take_failure());
    return *current_;
  }
  stream_iterator& operator++() {
    if (!started_) settle();  // (past the first item, looked at or not)
    current_.reset();
    failure_ = nullptr;
    behind_ = true;  // (until next() returns: if it throws, the next look moves on)
    current_ = stream_->next();
    behind_ = false;
    return *this;
  }
  void operator++(int) { ++*this; }
  friend bool operator==(const stream_iterator& it, std::default_sentinel_t) {
    it.settle();
    return !it.current_ && !it.failure_;
  }

 private:
  /// After a failed `++`: takes the next item now, keeping a failure for `*`
  /// (a comparison must not throw).
  void settle() const {
    if (!behind_) return;
    behind_ = false;
    started_ = true;
    try {
      current_ = stream_->next();
    } catch (...) {
      failure_ = std::current_exception();
    }
  }
  std::exception_ptr take_failure() const {
    behind_ = true;  // past this failed item too: the next look moves on again
    return std::exchange(failure_, nullptr);
  }

  Stream* stream_ = nullptr;
  // (Mutable: comparing with the end may have to take the item after a failed one.)
  mutable std::optional<V> current_;
  mutable std::exception_ptr failure_;
  mutable bool behind_ = false;
  mutable bool started_ = false;  ///< the first item was taken
};

}  // namespace manta::detail

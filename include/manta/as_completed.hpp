// as_completed.hpp: refs in the order their objects are done, as Dask's and
// concurrent.futures' as_completed.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <manta/detail/core.hpp>
#include <manta/detail/stream_iterator.hpp>
#include <manta/errors.hpp>
#include <manta/object_ref.hpp>

namespace manta {

/// An input range over the refs it was given, yielding each once its object is
/// ready or failed (`get` on a failed one throws), earliest first; refs found done
/// at the same moment come in the order given. Single pass; not thread-safe.
/// Each wait scans the refs still pending.
///
///     for (auto& r : manta::as_completed(refs)) use(manta::get(r));
template <class T>
class completion_stream {
 public:
  explicit completion_stream(std::vector<object_ref<T>> refs) : pending_(std::move(refs)) {
    for (const auto& r : pending_) detail::check_ref(r.node());
  }

  /// The next ref done, waiting as long as it takes; nullopt after the last.
  std::optional<object_ref<T>> next() { return next_until(detail::no_deadline); }

  /// The next ref done, waiting at most `timeout`; nullopt after the last.
  /// @throws timeout_error if refs remain and none is done in time.
  template <class Rep, class Period>
  std::optional<object_ref<T>> next(std::chrono::duration<Rep, Period> timeout) {
    return next_until(detail::deadline_after(timeout));
  }

  /// Adds a ref to those it yields (Dask's as_completed.add).
  /// @throws usage_error for an empty ref.
  void add(object_ref<T> ref) {
    detail::check_ref(ref.node());
    pending_.push_back(std::move(ref));
  }

  /// Refs not yielded yet.
  std::size_t remaining() const noexcept { return pending_.size() + done_.size(); }

  using iterator = detail::stream_iterator<completion_stream, object_ref<T>>;
  iterator begin() { return iterator(this); }
  std::default_sentinel_t end() const noexcept { return {}; }

 private:
  std::optional<object_ref<T>> next_until(detail::deadline until) {
    if (done_.empty() && !pending_.empty()) collect(until);
    if (done_.empty()) {
      if (pending_.empty()) return std::nullopt;
      throw timeout_error("manta: as_completed: none of " + std::to_string(pending_.size()) +
                          " refs was done in time");
    }
    object_ref<T> r = std::move(done_.front());
    done_.pop_front();
    return r;
  }

  /// Waits until one pending ref is done (or `until`), then moves every done one out.
  void collect(detail::deadline until) {
    nodes_.clear();
    for (const auto& r : pending_) nodes_.push_back(r.node());
    detail::wait_nodes(nodes_, 1, until, ready_);
    std::size_t kept = 0;
    for (std::size_t i = 0; i < pending_.size(); ++i) {
      if (ready_[i]) {
        done_.push_back(std::move(pending_[i]));
      } else {
        if (kept != i) pending_[kept] = std::move(pending_[i]);
        ++kept;
      }
    }
    pending_.resize(kept);
  }

  std::vector<object_ref<T>> pending_;
  std::deque<object_ref<T>> done_;
  std::vector<detail::ref_node*> nodes_;  // scratch for wait_nodes
  std::vector<bool> ready_;
};

/// The refs of `refs` in the order their objects are done (see completion_stream).
/// @throws usage_error for an empty ref.
template <class T>
completion_stream<T> as_completed(std::vector<object_ref<T>> refs) {
  return completion_stream<T>(std::move(refs));
}

}  // namespace manta

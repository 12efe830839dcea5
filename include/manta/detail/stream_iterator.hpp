// detail/stream_iterator.hpp: the iterator of manta's single-pass result ranges.
#pragma once

#include <cstddef>
#include <iterator>
#include <optional>

namespace manta::detail {

/// Input iterator over a stream whose `next()` returns std::optional<V> (nullopt
/// at the end); compared with std::default_sentinel_t.
template <class Stream, class V>
class stream_iterator {
 public:
  using value_type = V;
  using difference_type = std::ptrdiff_t;
  stream_iterator() = default;
  explicit stream_iterator(Stream* s) : stream_(s) { ++*this; }
  const V& operator*() const { return *current_; }
  stream_iterator& operator++() {
    current_ = stream_->next();
    return *this;
  }
  void operator++(int) { ++*this; }
  friend bool operator==(const stream_iterator& it, std::default_sentinel_t) { return !it.current_; }

 private:
  Stream* stream_ = nullptr;
  std::optional<V> current_;
};

}  // namespace manta::detail

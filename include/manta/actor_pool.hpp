// actor_pool.hpp: Ray's ActorPool: items mapped over several actors, each actor
// given its next item only when it has finished its previous one.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <ranges>
#include <type_traits>
#include <utility>
#include <vector>

#include <manta/actor.hpp>
#include <manta/detail/stream_iterator.hpp>
#include <manta/errors.hpp>
#include <manta/object_ref.hpp>

namespace manta {
namespace detail {

/// One map over a pool of actors: an item goes to an actor as soon as it is
/// idle; results come back in the order they finish, each with its item's index.
template <class T, class M, class Item>
class actor_map_run {
 public:
  using R = method_result_t<M>;

  actor_map_run(std::vector<actor_handle<T>> actors, M method, std::vector<Item> items)
      : actors_(std::move(actors)), method_(method), items_(std::move(items)) {
    for (std::size_t a = 0; a < actors_.size(); ++a) idle_.push_back(a);
  }

  std::size_t items() const noexcept { return items_.size(); }

  /// The next result to finish with its item's index; nullopt once all came back.
  /// A failed call rethrows here once (its actor is given the next item first).
  std::optional<std::pair<std::size_t, R>> next() {
    hand_out();
    if (calls_.empty()) return std::nullopt;
    auto [ready, rest] = manta::wait(calls_, 1);
    std::size_t k = 0;
    while (!(calls_[k] == ready.front())) ++k;
    object_ref<R> done = std::move(calls_[k]);
    const auto [index, actor] = owners_[k];
    calls_.erase(calls_.begin() + static_cast<std::ptrdiff_t>(k));
    owners_.erase(owners_.begin() + static_cast<std::ptrdiff_t>(k));
    idle_.push_back(actor);
    hand_out();  // the actor works on its next item while this result is read
    return std::pair<std::size_t, R>(index, get(done));
  }

 private:
  void hand_out() {
    while (!idle_.empty() && next_item_ < items_.size()) {
      const std::size_t actor = idle_.front();
      calls_.push_back(actors_[actor].task(method_).remote(items_[next_item_]));
      idle_.pop_front();
      owners_.emplace_back(next_item_++, actor);
    }
  }

  std::vector<actor_handle<T>> actors_;
  M method_;
  std::vector<Item> items_;
  std::size_t next_item_ = 0;
  std::deque<std::size_t> idle_;                            // actors with nothing to do
  std::vector<object_ref<R>> calls_;                        // in flight, one per busy actor
  std::vector<std::pair<std::size_t, std::size_t>> owners_;  // of each call: item index, actor
};

}  // namespace detail

/// Results of actor_pool::map_unordered, in the order they finish: an input range.
/// A failed call rethrows once; the stream then goes on. Single pass; not thread-safe.
template <class T, class M, class Item>
class actor_pool_stream {
 public:
  using R = detail::method_result_t<M>;
  explicit actor_pool_stream(detail::actor_map_run<T, M, Item> run) : run_(std::move(run)) {}

  /// The next result, or nullopt at the end.
  std::optional<R> next() {
    auto r = run_.next();
    if (!r) return std::nullopt;
    return std::move(r->second);
  }

  using iterator = detail::stream_iterator<actor_pool_stream, R>;
  iterator begin() { return iterator(this); }
  std::default_sentinel_t end() const noexcept { return {}; }

 private:
  detail::actor_map_run<T, M, Item> run_;
};

/// Ray's ActorPool: maps items over a fixed set of actors (each keeps its state
/// across items). The method takes one argument, an item. Copyable; each map is
/// independent, and two maps at once on one pool may give one actor two items.
/// The manual calls (submit, get_next) keep their queue in this object: a copy
/// gets a copy of it. Not thread-safe.
///
///     manta::actor_pool<Model> pool(models);
///     std::vector<double> scores = pool.map(&Model::score, inputs);
///
///     pool.submit(&Model::score, x);       // sent as soon as an actor is idle
///     while (pool.has_next()) use(pool.get_next<double>());
template <class T>
class actor_pool {
 public:
  /// @throws usage_error if `actors` is empty or holds an empty handle.
  explicit actor_pool(std::vector<actor_handle<T>> actors) : actors_(std::move(actors)) {
    if (actors_.empty()) throw usage_error("manta: an actor_pool needs at least one actor");
    for (const auto& a : actors_)
      if (!a.node()) throw usage_error("manta: an actor_pool was given an empty actor_handle");
    for (std::size_t a = 0; a < actors_.size(); ++a) idle_.push_back(a);
  }

  std::size_t size() const noexcept { return actors_.size(); }

  /// Queues `method(item)`: sent at once if an actor is idle, else when one is
  /// (an actor is idle once its previous call finished, read or not).
  template <class M, class Item>
  void submit(M method, Item item) {
    check_method<M>();
    pending_.push_back({submitted_++, [method, item = std::move(item)](const actor_handle<T>& a) {
                          return detail::counted_ref(a.task(method).remote(item));
                        }});
    dispatch();
  }

  /// True while a submitted call's result has not been taken by get_next.
  bool has_next() const noexcept { return !pending_.empty() || !flight_.empty() || !finished_.empty(); }

  /// True if an actor is idle (a submit would be sent at once).
  bool has_free() {
    collect(detail::clock::now());
    return !idle_.empty();
  }

  /// The result of the oldest submitted call not yet taken, waiting for it.
  /// `R` is the method's result type (checked: a wrong one is a usage_error).
  /// @throws what the call threw (its result is then taken); usage_error when
  /// nothing was submitted.
  template <class R>
  R get_next() {
    return take<R>(oldest_index(), detail::no_deadline, "get_next");
  }
  /// As get_next(), giving up after `timeout` with timeout_error (the result stays next).
  template <class R, class Rep, class Period>
  R get_next(std::chrono::duration<Rep, Period> timeout) {
    return take<R>(oldest_index(), detail::deadline_after(timeout), "get_next");
  }

  /// The result of whichever submitted call finishes first, waiting for one.
  template <class R>
  R get_next_unordered() {
    return take<R>(any_index, detail::no_deadline, "get_next_unordered");
  }
  /// As get_next_unordered(), giving up after `timeout` with timeout_error.
  template <class R, class Rep, class Period>
  R get_next_unordered(std::chrono::duration<Rep, Period> timeout) {
    return take<R>(any_index, detail::deadline_after(timeout), "get_next_unordered");
  }

  /// `method(x)` for every item, in the order of `xs`.
  /// @throws the first failure met (the calls still running are left to finish).
  template <class M, std::ranges::input_range Items>
  std::vector<detail::method_result_t<M>> map(M method, const Items& xs) const {
    auto run = start(method, xs);
    std::vector<std::optional<detail::method_result_t<M>>> slots(run.items());
    while (auto r = run.next()) slots[r->first] = std::move(r->second);
    std::vector<detail::method_result_t<M>> out;
    out.reserve(slots.size());
    for (auto& s : slots) out.push_back(std::move(*s));
    return out;
  }

  /// `method(x)` for every item, yielded in the order the calls finish.
  template <class M, std::ranges::input_range Items>
  auto map_unordered(M method, const Items& xs) const {
    return actor_pool_stream<T, M, std::ranges::range_value_t<Items>>(start(method, xs));
  }

 private:
  using launcher = std::function<detail::counted_ref(const actor_handle<T>&)>;
  struct call {
    std::size_t index;  // in submission order
    std::size_t actor;
    detail::counted_ref result;
  };
  static constexpr std::size_t any_index = static_cast<std::size_t>(-1);

  template <class M>
  static void check_method() {
    static_assert(std::is_same_v<typename detail::method_traits<M>::class_type, T>,
                  "manta: the method belongs to another class");
    static_assert(!std::is_void_v<detail::method_result_t<M>>, "manta: actor_pool maps methods that return a value");
  }

  /// Sends queued submissions to idle actors, oldest first.
  void dispatch() {
    while (!idle_.empty() && !pending_.empty()) {
      const std::size_t actor = idle_.front();
      auto& [index, launch] = pending_.front();
      flight_.push_back({index, actor, launch(actors_[actor])});
      idle_.pop_front();
      pending_.pop_front();
    }
  }

  /// Moves the calls that finished by `until` (at least one, unless `until`
  /// passes first) to finished_, freeing their actors for queued submissions.
  void collect(detail::deadline until) {
    if (flight_.empty()) return;
    std::vector<detail::ref_node*> nodes;
    for (const auto& c : flight_) nodes.push_back(c.result.node());
    std::vector<bool> ready;
    detail::wait_nodes(nodes, 1, until, ready);
    std::size_t kept = 0;
    for (std::size_t k = 0; k < flight_.size(); ++k) {
      if (ready[k]) {
        idle_.push_back(flight_[k].actor);
        finished_.emplace(flight_[k].index, std::move(flight_[k].result));
      } else {
        flight_[kept++] = std::move(flight_[k]);
      }
    }
    flight_.resize(kept);
    dispatch();
  }

  /// The oldest submission not taken yet (queued ones are younger than those sent).
  std::size_t oldest_index() const {
    std::size_t i = pending_.empty() ? any_index : pending_.front().first;
    for (const auto& c : flight_) i = std::min(i, c.index);
    if (!finished_.empty()) i = std::min(i, finished_.begin()->first);
    return i;
  }

  template <class R>
  R take(std::size_t index, detail::deadline until, const char* what) {
    if (!has_next()) throw usage_error(std::string("manta: actor_pool::") + what + " with no call submitted");
    collect(detail::clock::now());
    for (;;) {
      auto it = index == any_index ? finished_.begin() : finished_.find(index);
      if (it != finished_.end()) {
        detail::ref_node* n = it->second.node();
        detail::acquire(n);
        object_ref<R> ref(n);
        try {
          R value = get(ref);
          finished_.erase(it);
          return value;
        } catch (const usage_error&) {
          throw;  // a wrong R: the result stays to be taken
        } catch (...) {
          finished_.erase(it);  // the call's own failure: taken
          throw;
        }
      }
      if (detail::clock::now() >= until)
        throw timeout_error(std::string("manta: actor_pool::") + what + " timed out");
      collect(until);
    }
  }

  template <class M, class Items>
  auto start(M method, const Items& xs) const {
    check_method<M>();
    using Item = std::ranges::range_value_t<Items>;
    std::vector<Item> items;
    for (auto&& x : xs) items.push_back(x);
    return detail::actor_map_run<T, M, Item>(actors_, method, std::move(items));
  }

  std::vector<actor_handle<T>> actors_;
  // The manual calls: each submission is in exactly one of these until taken.
  std::size_t submitted_ = 0;
  std::deque<std::pair<std::size_t, launcher>> pending_;  // not sent yet
  std::vector<call> flight_;                              // sent, running or queued at their actor
  std::map<std::size_t, detail::counted_ref> finished_;   // done, by submission index
  std::deque<std::size_t> idle_;                          // actors with no manual call
};

}  // namespace manta

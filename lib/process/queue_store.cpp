// queue_store.cpp: the actor that is a manta::queue's home.
#include <manta/queue.hpp>
#include <manta/registry.hpp>

namespace manta::detail {

bool queue_store::push(queue_item item, std::int64_t wait_ms) {
  if (item.size() != 1) throw usage_error("manta: a queue item holds exactly one ref");
  std::unique_lock lock(mu_);
  if (maxsize_ && !not_full_.wait_for(lock, std::chrono::milliseconds(wait_ms),
                                      [&] { return items_.size() < maxsize_; }))
    return false;
  items_.push_back(std::move(item.front()));
  not_empty_.notify_one();
  return true;
}

queue_item queue_store::pop(std::int64_t wait_ms) {
  std::unique_lock lock(mu_);
  if (!not_empty_.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] { return !items_.empty(); }))
    return {};
  queue_item out{std::move(items_.front())};
  items_.pop_front();
  not_full_.notify_one();
  return out;
}

std::size_t queue_store::size() const {
  std::lock_guard lock(mu_);
  return items_.size();
}

}  // namespace manta::detail

// Registered under its full name (a user's own `queue` actor class must not
// collide with it), shown by the tools as "queue", not as the detail class.
MANTA_ACTOR(manta::detail::queue_store, &manta::detail::queue_store::push, &manta::detail::queue_store::pop,
            &manta::detail::queue_store::size);
[[maybe_unused]] static const bool queue_store_shown_as_queue =
    (manta::detail::show_actor_class_as(manta::detail::type_tag<manta::detail::queue_store>(), "queue"), true);

// stream_store.cpp: the actor between a streaming task and its caller.
#include <manta/registry.hpp>
#include <manta/stream.hpp>

namespace manta::detail {

void stream_store::push(std::uint64_t seq, queue_item item) {
  if (item.size() != 1) throw usage_error("manta: a stream item holds exactly one ref");
  std::lock_guard lock(mu_);
  if (seq < received_) return;  // a retry emitting again what was received
  if (seq > received_)
    throw usage_error("manta: stream item " + std::to_string(seq) + " arrived after only " +
                      std::to_string(received_));
  items_.push_back(std::move(item.front()));
  ++received_;
  changed_.notify_all();
}

void stream_store::finish() {
  std::lock_guard lock(mu_);
  finished_ = true;
  changed_.notify_all();
}

std::tuple<queue_item, bool> stream_store::pop(std::int64_t wait_ms) {
  std::unique_lock lock(mu_);
  changed_.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] { return !items_.empty() || finished_; });
  if (items_.empty()) return {queue_item{}, finished_};
  queue_item out{std::move(items_.front())};
  items_.pop_front();
  return {std::move(out), false};
}

}  // namespace manta::detail

// Registered under its full name, shown as "stream" (as queue_store).
MANTA_ACTOR(manta::detail::stream_store, &manta::detail::stream_store::push, &manta::detail::stream_store::finish,
            &manta::detail::stream_store::pop);
[[maybe_unused]] static const bool stream_store_shown_as_stream =
    (manta::detail::show_actor_class_as(manta::detail::type_tag<manta::detail::stream_store>(), "stream"), true);

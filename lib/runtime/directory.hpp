// runtime/directory.hpp: the node's object directory. Each object is an entry,
// reference-counted by everything that holds it (driver object_refs, pending
// tasks, worker processes, objects that contain it); freed at zero, and the
// refs it contains with it, iteratively (release_entry).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <tbb/concurrent_hash_map.h>

#include <manta/detail/core.hpp>

#include "ipc/messages.hpp"
#include "runtime/object_store.hpp"
#include "runtime/pool_allocated.hpp"

namespace manta::runtime {

struct task_spec;
struct actor_record;

/// Object states, in the low bits of object_entry::state.
enum : std::uint32_t {
  state_pending = 0,
  state_ready = 1,
  state_failed = 2,
  state_mask = 3,
  state_waiters = 1u << 31,  ///< somebody sleeps until this entry is sealed
};

struct subscriber {
  /// Not a worker's slot: a node of the cluster waits for the entry (node_runtime::object_settled).
  static constexpr int cluster = -2;
  int slot;
  std::uint64_t generation;
};

/// What waits for an entry to be sealed: out of line, made for the first
/// waiter, as most entries never have one (a pending task's return is one of a
/// million). Both lists are the scheduler's, under its mutex.
struct entry_waiters : pool_allocated {
  pool_vector<subscriber> subscribers;  ///< workers (or nodes) to tell
  pool_vector<task_spec*> dependents;   ///< the task graph's: tasks waiting for it
};

struct object_entry final : detail::ref_node, pool_allocated {
  ~object_entry() override;

  std::atomic<std::uint32_t> state{state_pending};
  std::int32_t owner = 0;  ///< pid of the process that made it (manta memory)
  // Set once before the entry is sealed, immutable afterwards (beside owner: an
  // entry stays in the allocator's 192-byte bin, whose blocks are cache-line aligned).
  bool large = false;  ///< its bytes live in the arena (or the spill file), not inline
  bool on_nodes = false;  ///< a remote task named it: nodes of the cluster may keep copies
  std::uint64_t type_tag = 0;
  std::uint64_t size = 0;
  std::string inline_bytes;
  ipc::failure_ptr error;  ///< set when it failed
  pool_vector<detail::ref_node*> contained;  ///< counted refs serialised inside
  object_store* store = nullptr;             ///< owner of the extent; null once it is unmapped
  // Where a large object's bytes are: moved only by the store, never while pinned.
  std::uint64_t offset = ipc::no_offset;  ///< arena extent, or no_offset (inline, or spilled)
  std::uint64_t spill_at = 0;             ///< its range of the spill file, while spilled
  /// Readers that need the bytes in place, or spilled_mark while they are on disk.
  std::atomic<std::int32_t> pins{0};
  /// When it was last pinned or sealed: the store's clock, in 32 bits (the
  /// store compares ages, which wrap correctly).
  std::atomic<std::uint32_t> last_use{0};
  actor_record* actor = nullptr;   ///< set when this entry is an actor (what handles point to)
  const detail::function_info* made_by = nullptr;  ///< the task whose result it is; null: a put

  static constexpr std::int32_t spilled_mark = INT32_MIN;

  std::uint32_t status() const noexcept { return state.load(std::memory_order_acquire) & state_mask; }
  /// Its bytes: for a large object, only while pinned.
  const std::byte* data() const noexcept {
    return large ? store->base() + offset : reinterpret_cast<const std::byte*>(inline_bytes.data());
  }
  /// Tells `s` when it is sealed (the scheduler's, under its mutex).
  void subscribe(subscriber s) { waiters().subscribers.push_back(s); }
  /// A process waits to be told (the scheduler's, under its mutex).
  bool has_subscribers() const noexcept { return waiters_ && !waiters_->subscribers.empty(); }
  /// Whom to tell, now that it was sealed (the scheduler's, under its mutex).
  pool_vector<subscriber> take_subscribers() {
    return waiters_ ? std::move(waiters_->subscribers) : pool_vector<subscriber>();
  }

 private:
  // The task graph's edges: only it reads or writes them (task_graph.hpp).
  friend class task_graph;
  entry_waiters& waiters() {
    if (!waiters_) waiters_.reset(new entry_waiters);
    return *waiters_;
  }
  task_spec* producer_ = nullptr;  ///< the task that will seal it, until it is done
  std::unique_ptr<entry_waiters> waiters_;  ///< null until something waits
};

class task_graph;

/// Frees `e` (its count reached zero and it left the directory), then whatever
/// that released in turn, without recursing: a list of 100,000 nested refs
/// goes in a loop, not 100,000 stack frames.
void free_entry(object_entry* e) noexcept;

/// Stored arguments at least this long go to a node of the cluster by
/// reference (fetched once per node); shorter ones travel inside each task.
inline constexpr std::uint64_t by_reference_bytes = 1u << 20;
/// Whether an actor's key in the cluster names one that lives on its driver's
/// own node, offered to the cluster ("<driver id>/d<N>"), rather than one the
/// head placed on a node ("<driver id>/<N>").
inline bool on_driver_key(std::string_view key) {
  const auto slash = key.rfind('/');
  return slash != std::string_view::npos && key.size() > slash + 2 && key[slash + 1] == 'd' &&
         key.find_first_not_of("0123456789", slash + 2) == std::string_view::npos;
}

/// Whether argument `e` of a remote task in `mode` goes by reference. Not an
/// actor's constructor's: the head keeps that whole, to start the actor again;
/// nor a call's of an actor on a driver's node (`actor_key`): that driver
/// fetches nothing from other members.
inline bool by_reference(const object_entry& e, detail::call_mode mode, std::string_view actor_key = {}) {
  return e.large && e.size >= by_reference_bytes && mode != detail::call_mode::construct &&
         !on_driver_key(actor_key);
}

class directory {
 public:
  /// @param epoch  the runtime's generation, in every id and entry it makes
  /// @param store  where entries' large bytes live (null in unit tests)
  directory(std::uint32_t epoch, object_store* store) : epoch_(epoch), store_(store) {}

  std::uint32_t epoch() const noexcept { return epoch_; }
  /// The sequence number of the last id next_id handed out.
  std::uint64_t last_seq() const noexcept { return next_seq_.load(std::memory_order_acquire); }
  /// A fresh id of this runtime.
  object_id next_id() noexcept {
    return {std::uint64_t{epoch_} << 32, next_seq_.fetch_add(1, std::memory_order_relaxed) + 1};
  }
  /// A new pending entry for `id` holding `count` counts (not inserted yet).
  object_entry* create(const object_id& id, std::int64_t count) const;

  void insert(object_entry* e);
  /// The entry for `id` with one more count, or nullptr.
  object_entry* acquire(const object_id& id);
  /// The entry for `id` without counting (the caller holds it some other way).
  object_entry* find(const object_id& id);
  /// Removes `e` if its count is still zero; then the caller frees it. Every
  /// entry is inserted before any ref to it escapes, so `false` also covers a
  /// concurrent releaser that erased it first.
  bool erase_if_unused(object_entry* e);
  std::size_t size() const { return map_.size(); }
  /// Removes and returns every entry (at shutdown).
  std::vector<object_entry*> take_all();

  // ---- sealing: user threads sleep on one futex word until entries change
  /// Sets `e`'s state (ready or failed); wakes sleepers if any wait on it.
  void publish(object_entry* e, std::uint32_t status);
  /// Wakes every sleeper (to look again, e.g. at shutdown).
  void wake_all();
  /// The word sleepers wait on: read it, check, then wait while it is unchanged.
  std::atomic<std::uint32_t>& seal_word() noexcept { return seal_seq_; }

 private:
  struct id_compare {
    static std::size_t hash(const object_id& id) { return std::hash<object_id>{}(id); }
    static bool equal(const object_id& a, const object_id& b) { return a == b; }
  };
  std::uint32_t epoch_;
  object_store* store_;
  std::atomic<std::uint64_t> next_seq_{0};
  std::atomic<std::uint32_t> seal_seq_{0};
  tbb::concurrent_hash_map<object_id, object_entry*, id_compare,
                           pool_allocator<std::pair<const object_id, object_entry*>>>
      map_;
};

/// An object id as 32 hex digits (what the tools and the cluster show), and
/// back (nullopt if malformed).
std::string id_text(const object_id& id);
std::optional<object_id> id_from_text(std::string_view text);

}  // namespace manta::runtime

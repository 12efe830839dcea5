// detail/core.hpp: the small interface between manta's header templates and the
// compiled runtime: object ids, reference nodes, encoded values and the entry points.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace manta {

/// 128-bit identity of an object, unique across the cluster.
struct object_id {
  std::uint64_t hi = 0;  ///< runtime epoch (high 32 bits) and creating process (low 32 bits)
  std::uint64_t lo = 0;  ///< sequence number inside the creating process
  bool empty() const noexcept { return hi == 0 && lo == 0; }
  friend bool operator==(const object_id&, const object_id&) = default;
};

namespace detail {

/// A process-local, reference-counted node behind every object_ref. In the driver
/// it is the directory entry itself; in a worker, a slot of its local ref table.
struct ref_node {
  virtual ~ref_node() = default;
  object_id id;
  std::atomic<std::int64_t> count{0};  ///< object_refs in this process pointing here
  std::uint32_t epoch = 0;             ///< runtime generation that created the node
};

/// Called when the last object_ref of this process pointing at `n` goes away.
void release_slow(ref_node* n) noexcept;

inline void acquire(ref_node* n) noexcept {
  if (n) n->count.fetch_add(1, std::memory_order_relaxed);
}
inline void release(ref_node* n) noexcept {
  if (n && n->count.fetch_sub(1, std::memory_order_acq_rel) == 1) release_slow(n);
}

/// Values up to this size travel inline in messages; larger ones go to the arena.
inline constexpr std::size_t max_inline_bytes = 64 * 1024;

/// A value ready to be stored: its type tag and bytes, either owned or borrowed
/// from the caller's object for the duration of the call (no copy for raw data).
struct encoded_value {
  std::uint64_t type_tag = 0;
  std::string owned;                   ///< bytes when the encoder produced them
  const void* borrowed = nullptr;      ///< bytes of the caller's own object otherwise
  std::size_t size = 0;
  std::vector<object_id> contained;    ///< refs serialised inside the value
  const void* data() const noexcept { return borrowed ? borrowed : owned.data(); }
};

/// A sealed object's bytes as seen by this process; valid while pinned (see fetch).
struct object_data {
  std::uint64_t type_tag = 0;
  const std::byte* data = nullptr;
  std::size_t size = 0;
};

using clock = std::chrono::steady_clock;
using deadline = clock::time_point;
inline constexpr deadline no_deadline = deadline::max();

template <class Rep, class Period>
deadline deadline_after(std::chrono::duration<Rep, Period> d) {
  auto now = clock::now();
  if (d >= std::chrono::duration_cast<std::chrono::duration<Rep, Period>>(no_deadline - now))
    return no_deadline;
  return now + std::chrono::duration_cast<clock::duration>(d);
}

/// A writable extent of the arena owned by this process until it is put or freed.
struct extent {
  std::uint64_t offset = ~std::uint64_t{0};
  std::byte* data = nullptr;
  std::size_t size = 0;
  std::uint32_t epoch = 0;  ///< runtime that granted it
};

// ---- entry points implemented by the runtime (driver or worker, whichever this process is)

/// Reserve `bytes` of the arena. @throws object_store_full, usage_error without a runtime.
extent allocate_extent(std::size_t bytes);
/// Give back an extent that was never put.
void free_extent(const extent& x) noexcept;
/// Seal `size` bytes written into `x` as an object of type `tag`, without a copy;
/// the object owns the extent afterwards. Returns a node holding one count.
ref_node* put_extent(std::uint64_t tag, const extent& x, std::size_t size);

/// Store a value; returns a node holding one count.
/// @throws usage_error without a runtime; object_store_full when it cannot fit.
ref_node* put_value(const encoded_value& v);

/// Wait until the object is sealed and return its bytes, pinned in memory (not
/// spilled) until `unpin`; rethrows its failure (then nothing is pinned).
/// @throws task_error, worker_crashed_error, timeout_error, usage_error,
/// object_store_full (a spilled object finds no room to come back)
object_data fetch(ref_node* n, deadline until);
/// One more pin of an object this caller fetched and has not unpinned.
void repin(ref_node* n) noexcept;
void unpin(ref_node* n) noexcept;

/// Wait until `num` of `nodes` are sealed (or failed) or `until` passes; sets ready[i].
void wait_nodes(std::span<ref_node* const> nodes, std::size_t num, deadline until,
                std::vector<bool>& ready);

/// The node for an id read from a serialised ref; returns it holding one count.
ref_node* ref_from_id(const object_id& id);

/// Name of a type tag, if this process has seen it (for error messages).
std::string type_name_of_tag(std::uint64_t tag);
void remember_type_name(std::uint64_t tag, const char* mangled);

/// Collects the ids of refs serialised while it is installed (per thread).
struct ref_collector {
  explicit ref_collector(std::vector<object_id>& out) noexcept;
  ~ref_collector();
  ref_collector(const ref_collector&) = delete;
  ref_collector& operator=(const ref_collector&) = delete;
  static void note(const object_id& id) noexcept;

 private:
  std::vector<object_id>* out_;
  ref_collector* previous_;
};

/// Holds one count of a ref_node: what object_ref and actor_handle share.
/// Copies count, moves do not; serialised as the id (collected while encoding).
class counted_ref {
 public:
  counted_ref() noexcept = default;
  /// Adopts one count of `node` (runtime use).
  explicit counted_ref(ref_node* node) noexcept : node_(node) {}
  counted_ref(const counted_ref& o) noexcept : node_(o.node_) { acquire(node_); }
  counted_ref(counted_ref&& o) noexcept : node_(o.node_) { o.node_ = nullptr; }
  counted_ref& operator=(const counted_ref& o) noexcept {
    if (this != &o) {
      acquire(o.node_);
      release(node_);
      node_ = o.node_;
    }
    return *this;
  }
  counted_ref& operator=(counted_ref&& o) noexcept {
    if (this != &o) {
      release(node_);
      node_ = o.node_;
      o.node_ = nullptr;
    }
    return *this;
  }
  ~counted_ref() { release(node_); }

  /// False for a default-constructed (empty) one.
  bool valid() const noexcept { return node_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }
  object_id id() const noexcept { return node_ ? node_->id : object_id{}; }
  /// Runtime use: the node behind it (not counted).
  ref_node* node() const noexcept { return node_; }

  /// Serialised as its id, noted as held inside the value being encoded.
  template <class Archive>
  void save(Archive& archive) const {
    object_id i = id();
    if (!i.empty()) ref_collector::note(i);
    archive(i.hi, i.lo);
  }
  template <class Archive>
  void load(Archive& archive) {
    object_id i;
    archive(i.hi, i.lo);
    *this = counted_ref(i.empty() ? nullptr : ref_from_id(i));
  }

 private:
  ref_node* node_ = nullptr;
};

}  // namespace detail
}  // namespace manta

template <>
struct std::hash<manta::object_id> {
  std::size_t operator()(const manta::object_id& id) const noexcept {
    return static_cast<std::size_t>((id.hi * 0x9e3779b97f4a7c15ULL) ^ id.lo);
  }
};

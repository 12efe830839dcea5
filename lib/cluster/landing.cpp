#include "cluster/landing.hpp"

#include <cstring>
#include <numeric>
#include <string>
#include <utility>

#include "process/args_blob.hpp"
#include "runtime/node_runtime.hpp"

namespace manta::runtime {

landed_values::~landed_values() {
  for (const value& v : values_)
    if (v.room.data) rt_.free_extent(v.room);
}

std::vector<std::uint32_t> landed_values::numbers() const {
  std::vector<std::uint32_t> out;
  out.reserve(values_.size());
  for (const value& v : values_) out.push_back(v.number);
  return out;
}

bool landed_values::add(std::size_t size, std::uint64_t tag, std::uint32_t number) {
  std::optional<detail::extent> room;
  try {
    room = rt_.landing_room(size);
  } catch (const std::exception&) {  // (stopping)
  }
  if (!room) return false;  // the value stays in the frame; putting it makes room (or says why not)
  values_.push_back({*room, tag, number});
  return true;
}

landed_values::value landed_values::take(std::size_t i) {
  if (i >= values_.size() || !values_[i].room.data)
    throw usage_error("manta: a task from the cluster names a value that did not land here");
  return std::exchange(values_[i], {});
}

detail::ref_node* landed_values::claim(std::size_t i) {
  value v = take(i);
  try {
    return rt_.put_extent(v.tag, v.room, v.room.size);
  } catch (...) {
    rt_.free_extent(v.room);
    throw;
  }
}

detail::ref_node* landed_values::claim_as(std::size_t i, const object_id& id) {
  value v = take(i);
  return rt_.import_extent(id, v.tag, v.room);  // (which frees it if it throws)
}

namespace {

/// The value a landing is reading: `left` bytes still to come, going to
/// `into` (its arena extent) if it landed, else onto the frame's body.
struct value_in_progress {
  std::uint64_t left = 0;
  std::byte* into = nullptr;
  /// Takes what `bytes` holds of it (removed from `bytes`).
  void take(std::string_view& bytes, std::string& body) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(left, bytes.size()));
    if (into) {
      std::memcpy(into, bytes.data(), n);
      into += n;
    } else {
      body.append(bytes.data(), n);
    }
    left -= n;
    bytes.remove_prefix(n);
  }
};

/// Reads a task's argument blob as it streams in: small arguments are copied
/// into the blob kept, large values into the arena.
class task_landing final : public bridge::frame_landing {
 public:
  task_landing(node_runtime& rt, std::string_view first, std::uint64_t total)
      : landed_(std::make_shared<landed_values>(rt)) {
    const bridge::remote_task t = bridge::decode_task(first);  // the header comes whole in the first part
    objects_ = t.objects.size();
    args_left_ = t.arg_count;
    head_size_ = first.size() - t.args.size();
    body_.assign(first.substr(0, head_size_));
    frame_left_ = total - head_size_;  // (the assembler holds the first part to `total`)
    take(t.args);
  }

  void take(std::string_view bytes) override {
    frame_left_ -= std::min<std::uint64_t>(frame_left_, bytes.size());
    while (!bytes.empty() && !broken_) {
      if (value_.left > 0) {  // the bytes of the value begun
        value_.take(bytes, body_);
        continue;
      }
      if (args_left_ == 0) return broken();
      const std::size_t n = std::min(sizeof header_ - header_have_, bytes.size());
      std::memcpy(header_ + header_have_, bytes.data(), n);
      header_have_ += n;
      bytes.remove_prefix(n);
      if (header_have_ == sizeof header_) {
        here_left_ = bytes.size();
        begin_argument();
      }
    }
  }

  bridge::frame finish() override {
    if (args_left_ != 0 || value_.left != 0 || header_have_ != 0) broken();
    return {bridge::frame_type::run_task, std::move(body_), landed_->size() ? landed_ : nullptr};
  }

 private:
  /// A malformed blob fails its task, not the link (it came from a driver,
  /// through the head): the task keeps its header and no argument, which
  /// running it finds truncated.
  void broken() {
    broken_ = true;
    body_.resize(head_size_);
    landed_ = std::make_shared<landed_values>(landed_->runtime());
  }

  void begin_argument() {
    header_have_ = 0;
    --args_left_;
    std::uint8_t kind;
    std::uint64_t tag;
    std::uint32_t size_or_index;
    std::memcpy(&kind, header_, 1);
    std::memcpy(&tag, header_ + 1, sizeof tag);
    std::memcpy(&size_or_index, header_ + 1 + sizeof tag, sizeof size_or_index);
    const auto ref = static_cast<std::uint8_t>(process::arg_kind::ref);
    if (kind > ref) return broken();
    value_.into = nullptr;
    if (kind == ref) {
      // Indexes past `objects` are the landed values': a sender's names none of them.
      if (size_or_index >= objects_) size_or_index = ~std::uint32_t{0};
      std::memcpy(header_ + 1 + sizeof tag, &size_or_index, sizeof size_or_index);
    } else {
      // (What is left of this frame: the bytes of this take() after the header, and the later parts.)
      if (size_or_index > frame_left_ + here_left_) return broken();  // announced past the frame's end
      value_.left = size_or_index;
      if (size_or_index > detail::max_inline_bytes) {
        if (landed_->add(size_or_index, tag)) {
          value_.into = landed_->back().room.data;
          process::append_arg_header(body_, process::arg_kind::ref, tag,
                                     static_cast<std::uint32_t>(objects_ + landed_->size() - 1));
          return;
        }
        if (!reserved_) body_.reserve(body_.size() + sizeof header_ + frame_left_ + here_left_);  // joined, as without a landing
        reserved_ = true;
      }
    }
    body_.append(header_, sizeof header_);
  }

  std::shared_ptr<landed_values> landed_;
  std::string body_;  ///< the header, then the blob without the landed values
  std::size_t head_size_ = 0;  ///< the task's header in body_
  std::uint64_t frame_left_ = 0;  ///< bytes of the frame after those given to take() so far
  std::size_t here_left_ = 0;     ///< bytes of the current take() after the header just read
  bool reserved_ = false;         ///< body_ has room for the rest (a value that could not land)
  bool broken_ = false;
  std::size_t objects_ = 0;
  std::uint32_t args_left_ = 0;
  char header_[1 + sizeof(std::uint64_t) + sizeof(std::uint32_t)];  ///< an argument's, as it comes
  std::size_t header_have_ = 0;
  value_in_progress value_;
};

/// Reads an outcome's values as they stream in: small ones are kept in the
/// body, large ones go into the arena.
class outcome_landing final : public bridge::frame_landing {
 public:
  outcome_landing(node_runtime& rt, std::string_view first, std::uint64_t total)
      : landed_(std::make_shared<landed_values>(rt)) {
    bridge::outcome_layout layout = bridge::layout_of_outcome(first, total);  // (the head checked it too)
    sizes_ = std::move(layout.sizes);
    body_.assign(first.substr(0, layout.head));
    take(first.substr(layout.head));
  }

  void take(std::string_view bytes) override {
    while (!bytes.empty()) {
      if (value_.left == 0 && !begin_value()) throw bridge::wire_error("manta bridge: an outcome with bytes past its values");
      value_.take(bytes, body_);
    }
  }

  bridge::frame finish() override {
    if (value_.left != 0 || begin_value()) throw bridge::wire_error("manta bridge: an outcome ends short of its values");
    return {bridge::frame_type::task_result, std::move(body_), landed_->size() ? landed_ : nullptr};
  }

 private:
  /// Begins the next value that has bytes; false if none is left.
  bool begin_value() {
    while (next_ < sizes_.size() && sizes_[next_] == 0) ++next_;
    if (next_ == sizes_.size()) return false;
    const std::uint64_t size = sizes_[next_];
    value_.into = nullptr;
    if (size > detail::max_inline_bytes) {
      if (landed_->add(size, 0, static_cast<std::uint32_t>(next_))) {
        value_.into = landed_->back().room.data;
      } else if (!reserved_) {  // joined, as without a landing: the rest at once
        body_.reserve(body_.size() + std::accumulate(sizes_.begin() + static_cast<std::ptrdiff_t>(next_), sizes_.end(),
                                                     std::uint64_t{0}));
        reserved_ = true;
      }
    }
    value_.left = size;
    ++next_;
    return true;
  }

  std::shared_ptr<landed_values> landed_;
  std::string body_;  ///< the head, then the values that did not land
  std::vector<std::uint64_t> sizes_;
  std::size_t next_ = 0;          ///< the value to begin next
  bool reserved_ = false;         ///< body_ has room for the rest (a value that could not land)
  value_in_progress value_;
};

}  // namespace

std::unique_ptr<bridge::frame_landing> land_task(node_runtime& rt, std::string_view first, std::uint64_t total) {
  return std::make_unique<task_landing>(rt, first, total);
}

std::unique_ptr<bridge::frame_landing> land_outcome(node_runtime& rt, std::string_view first, std::uint64_t total) {
  return std::make_unique<outcome_landing>(rt, first, total);
}

bridge::frame_lander lander_for(node_runtime& rt) {
  return [&rt](bridge::frame_type type, std::string_view first,
               std::uint64_t total) -> std::unique_ptr<bridge::frame_landing> {
    if (type == bridge::frame_type::run_task) return land_task(rt, first, total);
    if (type == bridge::frame_type::task_result) return land_outcome(rt, first, total);
    return nullptr;
  };
}

}  // namespace manta::runtime

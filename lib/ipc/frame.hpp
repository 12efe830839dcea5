// ipc/frame.hpp: binary framing of control messages. A frame is an 8-byte header
// (body size, message type) and a body padded to 8 bytes, so frames laid end to
// end in an 8-aligned buffer keep their payloads 8-aligned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace manta::ipc {

struct frame_header {
  std::uint32_t size;  ///< body bytes, without padding
  std::uint16_t type;
  std::uint16_t flags;
};
static_assert(sizeof(frame_header) == 8);

/// Frames larger than this are malformed (a corrupt or hostile peer): values over
/// 64 KiB never travel inline, and long id lists travel in the arena, so real
/// frames stay far below it.
inline constexpr std::uint32_t max_frame_bytes = 64u << 20;

constexpr std::size_t pad8(std::size_t n) noexcept { return (n + 7) & ~std::size_t{7}; }

/// A malformed frame: the peer that sent it cannot be trusted any more.
class protocol_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A frame this process tried to write is larger than max_frame_bytes.
class frame_too_large : public std::length_error {
 public:
  using std::length_error::length_error;
};

/// Appends one frame to a byte string. `finish` completes it; a writer destroyed
/// unfinished (an exception while writing) takes its partial frame back.
class frame_writer {
 public:
  explicit frame_writer(std::string& out, std::uint16_t type) : out_(out), start_(out.size()) {
    frame_header h{0, type, 0};
    out_.append(reinterpret_cast<const char*>(&h), sizeof h);
  }
  frame_writer(const frame_writer&) = delete;
  frame_writer& operator=(const frame_writer&) = delete;
  ~frame_writer() {
    if (!done_) out_.resize(start_);
  }

  template <class T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void bytes(const void* p, std::size_t n) { out_.append(static_cast<const char*>(p), n); }
  void string(std::string_view s) {
    put(static_cast<std::uint32_t>(s.size()));
    bytes(s.data(), s.size());
  }
  /// Pads so the next field starts 8-aligned relative to the frame.
  void align() { out_.append(pad8(out_.size() - start_) - (out_.size() - start_), '\0'); }
  std::size_t body_size() const { return out_.size() - start_ - sizeof(frame_header); }

  /// Completes the frame. @throws frame_too_large (and takes the frame back).
  void finish() {
    std::size_t body = body_size();
    if (body > max_frame_bytes) {
      out_.resize(start_);
      done_ = true;
      throw frame_too_large("manta: a message of " + std::to_string(body) +
                            " bytes exceeds the frame limit of " + std::to_string(max_frame_bytes));
    }
    std::uint32_t size = static_cast<std::uint32_t>(body);
    std::memcpy(out_.data() + start_, &size, sizeof size);
    out_.append(pad8(body) - body, '\0');
    done_ = true;
  }

 private:
  std::string& out_;
  std::size_t start_;
  bool done_ = false;
};

/// Reads the body of one frame, checking every bound.
class frame_reader {
 public:
  frame_reader(const std::byte* body, std::size_t size) : base_(body), size_(size) {}

  template <class T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T));
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  const std::byte* bytes(std::size_t n) {
    need(n);
    const std::byte* p = base_ + pos_;
    pos_ += n;
    return p;
  }
  std::string_view string_view() {
    auto n = get<std::uint32_t>();
    auto p = bytes(n);
    return {reinterpret_cast<const char*>(p), n};
  }
  std::string string() { return std::string(string_view()); }
  /// A count of elements of `element_bytes` each that must still fit in the frame:
  /// a count is never trusted further than the bytes that back it.
  std::size_t count(std::size_t element_bytes) {
    auto n = get<std::uint32_t>();
    if (element_bytes && n > remaining() / element_bytes)
      throw protocol_error("manta: a count larger than its frame");
    return n;
  }
  void align() {
    std::size_t a = pad8(pos_ + sizeof(frame_header)) - sizeof(frame_header);
    need(a - pos_);
    pos_ = a;
  }
  std::size_t remaining() const { return size_ - pos_; }
  const std::byte* base() const { return base_; }
  const std::byte* here() const { return base_ + pos_; }

 private:
  void need(std::size_t n) const {
    if (n > size_ - pos_) throw protocol_error("manta: truncated frame");
  }
  const std::byte* base_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

/// A complete frame inside a receive buffer.
struct frame {
  std::uint16_t type = 0;
  const std::byte* body = nullptr;
  std::size_t size = 0;
  frame_reader reader() const { return {body, size}; }
};

}  // namespace manta::ipc

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
/// 64 KiB never travel inline, so real frames stay far below it.
inline constexpr std::uint32_t max_frame_bytes = 64u << 20;

constexpr std::size_t pad8(std::size_t n) noexcept { return (n + 7) & ~std::size_t{7}; }

/// A malformed frame: the peer that sent it cannot be trusted any more.
class protocol_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Appends frames to a byte string.
class frame_writer {
 public:
  explicit frame_writer(std::string& out, std::uint16_t type) : out_(out), start_(out.size()) {
    frame_header h{0, type, 0};
    out_.append(reinterpret_cast<const char*>(&h), sizeof h);
  }
  frame_writer(const frame_writer&) = delete;
  frame_writer& operator=(const frame_writer&) = delete;
  ~frame_writer() { finish(); }

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
  /// Reserves n bytes and returns where they start (valid until the next append).
  char* reserve(std::size_t n) {
    out_.resize(out_.size() + n);
    return out_.data() + out_.size() - n;
  }
  std::size_t body_size() const { return out_.size() - start_ - sizeof(frame_header); }

  void finish() {
    if (done_) return;
    done_ = true;
    std::size_t body = body_size();
    if (body > max_frame_bytes) throw protocol_error("manta: message too large for one frame");
    std::uint32_t size = static_cast<std::uint32_t>(body);
    std::memcpy(out_.data() + start_, &size, sizeof size);
    out_.append(pad8(body) - body, '\0');
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
  std::string string() {
    auto n = get<std::uint32_t>();
    auto p = bytes(n);
    return std::string(reinterpret_cast<const char*>(p), n);
  }
  void align() {
    std::size_t a = pad8(pos_ + sizeof(frame_header)) - sizeof(frame_header);
    need(a - pos_);
    pos_ = a;
  }
  std::size_t remaining() const { return size_ - pos_; }
  const std::byte* base() const { return base_; }

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

// bridge/wire.cpp: encoding and decoding frames.
#include "bridge/wire.hpp"

#include <cstring>

namespace manta::bridge {
namespace {

constexpr std::size_t length_bytes = 4, type_bytes = 2;

void put_le(std::string& out, std::uint64_t v, std::size_t bytes) {
  for (std::size_t i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint64_t get_le(const char* p, std::size_t bytes) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < bytes; ++i) v |= std::uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

}  // namespace

std::string frame_header(frame_type type, std::size_t body_size) {
  if (body_size > max_frame_body)
    throw wire_error("manta bridge: a frame of " + std::to_string(body_size) + " bytes is over the " +
                     std::to_string(max_frame_body) + "-byte limit");
  std::string out;
  out.reserve(length_bytes + type_bytes);
  put_le(out, type_bytes + body_size, length_bytes);
  put_le(out, static_cast<std::uint16_t>(type), type_bytes);
  return out;
}

std::string encode(frame_type type, std::string_view body) {
  std::string out = frame_header(type, body.size());
  out.reserve(out.size() + body.size());
  out.append(body);
  return out;
}

std::optional<frame> frame_decoder::next() {
  if (pending() < length_bytes) return std::nullopt;
  const char* head = buffer_.data() + start_;
  std::uint64_t length = get_le(head, length_bytes);
  if (length < type_bytes) throw wire_error("manta bridge: a frame too short to hold its type");
  if (length - type_bytes > max_body_)
    throw wire_error("manta bridge: a peer announced a frame of " + std::to_string(length - type_bytes) +
                     " bytes, over the " + std::to_string(max_body_) + "-byte limit");
  if (pending() < length_bytes + length) return std::nullopt;
  frame f;
  f.type = static_cast<frame_type>(get_le(head + length_bytes, type_bytes));
  f.body.assign(head + length_bytes + type_bytes, length - type_bytes);
  start_ += length_bytes + length;
  // What was handed out goes once it is half the buffer: amortised, no copy per frame.
  if (start_ == buffer_.size()) {
    buffer_.clear();
    start_ = 0;
  } else if (start_ > buffer_.size() / 2) {
    buffer_.erase(0, start_);
    start_ = 0;
  }
  return f;
}

}  // namespace manta::bridge

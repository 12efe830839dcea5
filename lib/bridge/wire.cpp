// bridge/wire.cpp: encoding and decoding frames.
#include "bridge/wire.hpp"

#include <algorithm>
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

namespace {
constexpr std::uint8_t part_first = 1, part_last = 2, part_abort = 4;
constexpr std::size_t part_short = 8 + 1, part_long = part_short + 2 + 8;
}  // namespace

std::string encode_part_header(const part_header& h) {
  std::string out;
  out.reserve(part_long);
  put_le(out, h.stream, 8);
  out.push_back(static_cast<char>((h.first ? part_first : 0) | (h.last ? part_last : 0) | (h.abort ? part_abort : 0)));
  if (h.first) {
    put_le(out, static_cast<std::uint16_t>(h.type), 2);
    put_le(out, h.total, 8);
  }
  return out;
}

part_header decode_part_header(std::string_view body, std::string_view& bytes) {
  if (body.size() < part_short) throw wire_error("manta bridge: a part shorter than its header");
  part_header h;
  h.stream = get_le(body.data(), 8);
  const auto flags = static_cast<std::uint8_t>(body[8]);
  if (flags & ~(part_first | part_last | part_abort)) throw wire_error("manta bridge: a part with unknown flags");
  h.first = flags & part_first;
  h.last = flags & part_last;
  h.abort = flags & part_abort;
  std::size_t at = part_short;
  if (h.first) {
    if (body.size() < part_long) throw wire_error("manta bridge: a first part shorter than its header");
    h.type = static_cast<frame_type>(get_le(body.data() + part_short, 2));
    h.total = get_le(body.data() + part_short + 2, 8);
    if (h.type == frame_type::part) throw wire_error("manta bridge: a part of a part");
    if (h.total > max_long_body)
      throw wire_error("manta bridge: a long frame of " + std::to_string(h.total) + " bytes, over the " +
                       std::to_string(max_long_body >> 30) + " GiB limit");
    at = part_long;
  }
  bytes = body.substr(at);
  return h;
}

std::uint64_t total_size(std::span<const std::string_view> pieces) {
  std::uint64_t total = 0;
  for (auto p : pieces) total += p.size();
  if (total > max_long_body)
    throw wire_error("manta bridge: " + std::to_string(total) + " bytes to send, over the " +
                     std::to_string(max_long_body >> 30) + " GiB a frame may carry");
  return total;
}

void append_frame(std::string& out, frame_type type, std::span<const std::string_view> pieces) {
  const std::uint64_t total = total_size(pieces);
  out += frame_header(type, total);
  for (auto p : pieces) out += p;
}

std::string part_frame_header(const part_header& h, std::size_t bytes) {
  std::string prefix = encode_part_header(h);
  std::string out = frame_header(frame_type::part, prefix.size() + bytes);
  out += prefix;
  return out;
}

std::optional<frame> part_assembler::take(std::string_view part_body) {
  std::string_view bytes;
  part_header h = decode_part_header(part_body, bytes);
  auto it = streams_.find(h.stream);
  if (h.first) {
    if (it != streams_.end()) throw wire_error("manta bridge: a stream started twice");
    if (h.total > max_pending_ - pending_)
      throw wire_error("manta bridge: long frames of more than " + std::to_string(max_pending_) +
                       " bytes on their way at once");
    pending_ += h.total;
    partial p;
    p.type = h.type;
    p.total = h.total;
    if (lander_) p.landing = lander_(h.type, bytes, h.total);
    if (!p.landing) p.body.reserve(h.total);  // (the peer proved the token: its announcement is believed)
    it = streams_.emplace(h.stream, std::move(p)).first;
  } else if (it == streams_.end()) {
    if (h.abort) return std::nullopt;  // (one that never began here)
    throw wire_error("manta bridge: a part of a stream that never began");
  }
  partial& p = it->second;
  if (h.abort) {
    pending_ -= p.total;
    streams_.erase(it);
    return std::nullopt;
  }
  if (bytes.size() > p.total - p.received) throw wire_error("manta bridge: a long frame runs past its length");
  // (The first part went to the lander, which chose the landing from it.)
  if (!p.landing) p.body.append(bytes);
  else if (!h.first) p.landing->take(bytes);
  p.received += bytes.size();
  const bool complete = p.received == p.total;
  if (complete != h.last)
    throw wire_error(h.last ? "manta bridge: a long frame ended short of its length"
                            : "manta bridge: a long frame goes on past its length");
  if (!complete) return std::nullopt;
  frame f = p.landing ? p.landing->finish() : frame{p.type, std::move(p.body), {}};
  pending_ -= p.total;
  streams_.erase(it);
  return f;
}

void frame_decoder::feed(const void* data, std::size_t size) {
  if (size == 0) return;
  std::memcpy(space(size).data(), data, size);
  commit(size);
}

std::span<char> frame_decoder::space(std::size_t bytes) {
  if (capacity_ - end_ < bytes) {
    const std::size_t kept = pending();
    if (capacity_ - kept >= bytes && kept <= start_) {
      // What was handed out goes, once it is as much as what is kept: amortised.
      std::memmove(buffer_.get(), buffer_.get() + start_, kept);
    } else {
      const std::size_t grown = std::max(kept + bytes, capacity_ + capacity_ / 2);
      auto bigger = std::make_unique_for_overwrite<char[]>(grown);
      if (kept) std::memcpy(bigger.get(), buffer_.get() + start_, kept);
      buffer_ = std::move(bigger);
      capacity_ = grown;
    }
    start_ = 0;
    end_ = kept;
  }
  return {buffer_.get() + end_, capacity_ - end_};
}

std::size_t frame_decoder::frame_length() const {
  if (pending() < length_bytes) return 0;
  std::uint64_t length = get_le(buffer_.get() + start_, length_bytes);
  if (length < type_bytes) throw wire_error("manta bridge: a frame too short to hold its type");
  if (length - type_bytes > max_body_)
    throw wire_error("manta bridge: a peer announced a frame of " + std::to_string(length - type_bytes) +
                     " bytes, over the " + std::to_string(max_body_) + "-byte limit");
  return length_bytes + length;
}

std::size_t frame_decoder::wanted() const noexcept {
  constexpr std::size_t at_least = 256u << 10;
  std::size_t length = 0;
  try {
    length = frame_length();
  } catch (const wire_error&) {  // (next() says so)
  }
  return std::max(at_least, length > pending() ? length - pending() : 0);
}

bool frame_decoder::has_frame() const noexcept {
  try {
    const std::size_t length = frame_length();
    return length != 0 && pending() >= length;
  } catch (const wire_error&) {
    return true;
  }
}

std::optional<frame_view> frame_decoder::next_view() {
  const std::size_t length = frame_length();
  if (length == 0 || pending() < length) return std::nullopt;
  const char* head = buffer_.get() + start_;
  frame_view f{static_cast<frame_type>(get_le(head + length_bytes, type_bytes)),
               std::string_view(head + length_bytes + type_bytes, length - length_bytes - type_bytes)};
  start_ += length;
  if (start_ == end_) start_ = end_ = 0;  // (the view stays valid: nothing is overwritten until the next read)
  return f;
}

std::optional<frame> frame_decoder::next() {
  auto v = next_view();
  if (!v) return std::nullopt;
  return frame{v->type, std::string(v->body)};
}

}  // namespace manta::bridge

// process/args_blob.hpp: the argument blob of a task request, as arg_writer
// writes it: per argument, a value ([0][tag][size][bytes]) or a ref to resolve
// ([1][tag][index into deps]).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#include "ipc/frame.hpp"

namespace manta::process {

enum class arg_kind : std::uint8_t { value = 0, ref = 1 };

struct blob_arg {
  arg_kind kind;
  std::uint64_t tag;
  std::uint32_t size_or_index;
  const char* bytes;  ///< value bytes (kind == value)
};

/// Calls f(blob_arg) for each argument. @throws ipc::protocol_error if malformed.
template <class F>
void for_each_arg(std::string_view blob, std::size_t count, F&& f) {
  std::size_t pos = 0;
  auto take = [&](void* dst, std::size_t n) {
    if (n > blob.size() - pos) throw ipc::protocol_error("manta: truncated argument blob");
    std::memcpy(dst, blob.data() + pos, n);
    pos += n;
  };
  for (std::size_t i = 0; i < count; ++i) {
    blob_arg a{};
    std::uint8_t kind;
    take(&kind, 1);
    if (kind > 1) throw ipc::protocol_error("manta: bad argument kind");
    a.kind = static_cast<arg_kind>(kind);
    take(&a.tag, sizeof a.tag);
    take(&a.size_or_index, sizeof a.size_or_index);
    if (a.kind == arg_kind::value) {
      if (a.size_or_index > blob.size() - pos) throw ipc::protocol_error("manta: truncated argument");
      a.bytes = blob.data() + pos;
      pos += a.size_or_index;
    }
    f(a);
  }
}

inline void append_arg_header(std::string& blob, arg_kind kind, std::uint64_t tag,
                              std::uint32_t size_or_index) {
  blob.push_back(static_cast<char>(kind));
  blob.append(reinterpret_cast<const char*>(&tag), sizeof tag);
  blob.append(reinterpret_cast<const char*>(&size_or_index), sizeof size_or_index);
}

}  // namespace manta::process

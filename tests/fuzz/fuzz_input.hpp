// fuzz_input.hpp: a fuzzer's input read as a stream of small values (what
// the targets that build messages from their input share).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

namespace manta::fuzzing {

struct input {
  const std::uint8_t* p;
  std::size_t n;
  bool empty() const { return n == 0; }
  /// The next byte; 0 once the input is used up.
  std::uint8_t byte() {
    if (!n) return 0;
    --n;
    return *p++;
  }
  /// The next `bytes` bytes, big-endian.
  std::uint64_t u64(int bytes = 8) {
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v = (v << 8) | byte();
    return v;
  }
  /// Up to `max` bytes, as many as the next byte says.
  std::string bytes(std::size_t max) {
    const std::size_t k = std::min<std::size_t>(byte() % (max + 1), n);
    std::string s(reinterpret_cast<const char*>(p), k);
    p += k;
    n -= k;
    return s;
  }
};

}  // namespace manta::fuzzing

// value_fuzz: arbitrary bytes read as stored values of several types, as a get,
// a view or a task argument would. Decoding must succeed or throw
// manta::usage_error: never crash, never read out of bounds.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <manta/manta.hpp>

namespace {

template <class T>
void try_decode(std::span<const std::byte> bytes) {
  try {
    (void)manta::detail::decode<T>(bytes);
  } catch (const manta::usage_error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  switch (data[0] % 7) {
    case 0: try_decode<int>(bytes); break;
    case 1: try_decode<std::string>(bytes); break;
    case 2: try_decode<std::vector<double>>(bytes); break;
    case 3: try_decode<std::vector<std::string>>(bytes); break;
    case 4: try_decode<std::map<std::string, int>>(bytes); break;
    case 5: try_decode<std::tuple<int, std::string, std::vector<int>>>(bytes); break;
    default: try_decode<std::vector<manta::object_ref<int>>>(bytes); break;
  }
  return 0;
}

// serialization.hpp: how values become bytes. Contiguous arithmetic data
// (arithmetic scalars, std::vector<E>, std::array<E, N>, std::string) moves as raw
// bytes; every other type goes through cereal's binary archive.
#pragma once

#include <array>
#include <cstring>
#include <span>
#include <streambuf>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include <cereal/archives/binary.hpp>
#include <cereal/types/array.hpp>
#include <cereal/types/chrono.hpp>
#include <cereal/types/complex.hpp>
#include <cereal/types/deque.hpp>
#include <cereal/types/list.hpp>
#include <cereal/types/map.hpp>
#include <cereal/types/memory.hpp>
#include <cereal/types/optional.hpp>
#include <cereal/types/set.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/tuple.hpp>
#include <cereal/types/unordered_map.hpp>
#include <cereal/types/unordered_set.hpp>
#include <cereal/types/utility.hpp>
#include <cereal/types/variant.hpp>
#include <cereal/types/vector.hpp>

#include <manta/detail/core.hpp>
#include <manta/errors.hpp>

namespace manta {

/// True for types stored as their raw bytes: arithmetic scalars, std::vector and
/// std::array of arithmetic elements (not bool vectors), and std::string.
template <class T>
struct is_raw : std::bool_constant<std::is_arithmetic_v<T>> {};
template <class E, class A>
struct is_raw<std::vector<E, A>>
    : std::bool_constant<std::is_arithmetic_v<E> && !std::is_same_v<E, bool>> {};
template <class E, std::size_t N>
struct is_raw<std::array<E, N>> : std::bool_constant<std::is_arithmetic_v<E>> {};
template <>
struct is_raw<std::string> : std::true_type {};
template <class T>
inline constexpr bool is_raw_v = is_raw<T>::value;

namespace detail {

constexpr std::uint64_t fnv1a(std::string_view s) noexcept {
  std::uint64_t h = 1469598103934665603ULL;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  return h;
}

/// Stable tag of a type, the same in every process of one binary: the hash of its
/// mangled name. Used to check that a ref is read as the type it was stored as.
template <class T>
std::uint64_t type_tag() {
  static const std::uint64_t tag = [] {
    const char* name = typeid(T).name();
    std::uint64_t t = fnv1a(name);
    remember_type_name(t, name);
    return t;
  }();
  return tag;
}

/// A streambuf appending to a std::string, so cereal writes without iostream copies.
class string_sink : public std::streambuf {
 public:
  explicit string_sink(std::string& out) : out_(out) {}

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    out_.append(s, static_cast<std::size_t>(n));
    return n;
  }
  int_type overflow(int_type c) override {
    if (c != traits_type::eof()) out_.push_back(static_cast<char>(c));
    return c;
  }

 private:
  std::string& out_;
};

/// cereal's binary input format, read straight from a byte span, refusing any
/// size larger than the bytes left: a corrupt or hostile stored value cannot make
/// decoding allocate what the input could never fill.
class bounded_input : public cereal::InputArchive<bounded_input, cereal::AllowEmptyClassElision> {
 public:
  explicit bounded_input(std::span<const std::byte> bytes)
      : InputArchive(this), pos_(bytes.data()), end_(bytes.data() + bytes.size()) {}
  void load_binary(void* data, std::size_t size) {
    if (size > remaining()) throw cereal::Exception("stored value is truncated");
    if (size == 0) return;  // an empty string's data may be null
    std::memcpy(data, pos_, size);
    pos_ += size;
  }
  std::size_t remaining() const noexcept { return static_cast<std::size_t>(end_ - pos_); }

 private:
  const std::byte* pos_;
  const std::byte* end_;
};

template <class T>
std::enable_if_t<std::is_arithmetic_v<T>> CEREAL_LOAD_FUNCTION_NAME(bounded_input& ar, T& t) {
  ar.load_binary(std::addressof(t), sizeof(t));
}
template <class T>
void CEREAL_LOAD_FUNCTION_NAME(bounded_input& ar, cereal::NameValuePair<T>& t) {
  ar(t.value);
}
template <class T>
void CEREAL_LOAD_FUNCTION_NAME(bounded_input& ar, cereal::SizeTag<T>& t) {
  ar(t.size);
  // Every element takes at least a byte, but for elements of empty types: allow
  // those a bounded slack rather than refuse them.
  constexpr std::size_t empty_element_slack = 1024;
  if (static_cast<std::uint64_t>(t.size) > ar.remaining() + empty_element_slack)
    throw cereal::Exception("stored size exceeds the value's bytes");
}
template <class T>
void CEREAL_LOAD_FUNCTION_NAME(bounded_input& ar, cereal::BinaryData<T>& bd) {
  ar.load_binary(bd.data, static_cast<std::size_t>(bd.size));
}

template <class T>
constexpr bool is_vector_v = false;
template <class E, class A>
constexpr bool is_vector_v<std::vector<E, A>> = true;

/// Encode a value. Raw types borrow the caller's bytes (no copy); others are
/// serialised by cereal, collecting the ids of any object_ref inside.
template <class T>
encoded_value encode(const T& value) {
  encoded_value e;
  e.type_tag = type_tag<T>();
  if constexpr (std::is_arithmetic_v<T>) {
    e.borrowed = &value;
    e.size = sizeof(T);
  } else if constexpr (is_raw_v<T>) {
    e.borrowed = value.data();
    e.size = value.size() * sizeof(*value.data());
  } else {
    static_assert(cereal::traits::is_output_serializable<T, cereal::BinaryOutputArchive>::value,
                  "manta: this type cannot be stored: give it a cereal serialize() member (or "
                  "save/load, or free functions), or use a raw type");
    ref_collector collect(e.contained);
    string_sink sink(e.owned);
    std::ostream os(&sink);
    try {
      cereal::BinaryOutputArchive archive(os);
      archive(value);
    } catch (const cereal::Exception& x) {
      throw usage_error("manta: a value of type " + type_name_of_tag(e.type_tag) +
                        " cannot be serialised: " + x.what());
    }
    e.size = e.owned.size();
  }
  return e;
}

/// Decode a value stored as `T`.
/// @throws usage_error if the bytes are malformed for T.
template <class T>
T decode(std::span<const std::byte> bytes) {
  if constexpr (std::is_arithmetic_v<T>) {
    if (bytes.size() != sizeof(T))
      throw usage_error("manta: stored value has " + std::to_string(bytes.size()) +
                        " bytes, expected " + std::to_string(sizeof(T)));
    T v;
    std::memcpy(&v, bytes.data(), sizeof(T));
    return v;
  } else if constexpr (is_raw_v<T>) {
    using E = std::remove_cvref_t<decltype(*std::declval<T&>().data())>;
    if (bytes.size() % sizeof(E) != 0)
      throw usage_error("manta: stored array has a size that is not a multiple of its element");
    T v{};
    if constexpr (is_vector_v<T> || std::is_same_v<T, std::string>) {
      v.resize(bytes.size() / sizeof(E));
    } else if (bytes.size() != v.size() * sizeof(E)) {  // (not sizeof(T): an empty array takes a byte)
      throw usage_error("manta: stored std::array has the wrong length");
    }
    if (!bytes.empty()) std::memcpy(v.data(), bytes.data(), bytes.size());
    return v;
  } else {
    T v{};
    try {
      bounded_input archive(bytes);
      archive(v);
    } catch (const usage_error&) {
      throw;
    } catch (const std::exception& e) {  // cereal's own, or length_error/bad_alloc on nonsense
      throw usage_error(std::string("manta: cannot decode stored value: ") + e.what());
    }
    return v;
  }
}

}  // namespace detail
}  // namespace manta

CEREAL_REGISTER_ARCHIVE(manta::detail::bounded_input)

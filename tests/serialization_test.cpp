// serialization_test: values survive encode/decode; raw data stays raw.
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <manta/manta.hpp>

namespace {

struct nothing {
  template <class A>
  void serialize(A&) {}
};

struct point {
  double x = 0, y = 0;
  std::string label;
  template <class A>
  void serialize(A& a) {
    a(x, y, label);
  }
  friend bool operator==(const point&, const point&) = default;
};

template <class T>
T round_trip(const T& v) {
  manta::detail::encoded_value e = manta::detail::encode(v);
  auto* p = static_cast<const std::byte*>(e.data());
  return manta::detail::decode<T>({p, e.size});
}

TEST(serialization, raw_types_borrow_the_callers_bytes) {
  std::vector<double> v{1, 2, 3};
  auto e = manta::detail::encode(v);
  EXPECT_EQ(e.borrowed, v.data());
  EXPECT_EQ(e.size, 3 * sizeof(double));
  EXPECT_TRUE(e.owned.empty());
  static_assert(manta::is_raw_v<std::vector<float>>);
  static_assert(manta::is_raw_v<std::string>);
  static_assert(!manta::is_raw_v<std::vector<bool>>);
  static_assert(!manta::is_raw_v<std::vector<std::string>>);
}

TEST(serialization, round_trips) {
  EXPECT_EQ(round_trip(42), 42);
  EXPECT_EQ(round_trip(2.5), 2.5);
  EXPECT_EQ(round_trip(std::string("hello")), "hello");
  EXPECT_EQ(round_trip(std::string()), "");
  EXPECT_EQ(round_trip(std::vector<int>{1, 2, 3}), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(round_trip(std::vector<int>{}), std::vector<int>{});
  EXPECT_EQ(round_trip(std::vector<std::string>{"a", "bc"}), (std::vector<std::string>{"a", "bc"}));
  std::map<std::string, int> m{{"a", 1}, {"b", 2}};
  EXPECT_EQ(round_trip(m), m);
  EXPECT_EQ(round_trip(point{1, 2, "p"}), (point{1, 2, "p"}));
  EXPECT_EQ(round_trip(std::vector<bool>{true, false}), (std::vector<bool>{true, false}));
  EXPECT_EQ(round_trip(std::array<int, 3>{4, 5, 6}), (std::array<int, 3>{4, 5, 6}));
  // Empty: stored as no bytes, though sizeof says one (it could be put, never read).
  EXPECT_EQ(round_trip(std::array<double, 0>{}), (std::array<double, 0>{}));
}

TEST(serialization, type_tags_differ_by_type) {
  EXPECT_NE(manta::detail::type_tag<int>(), manta::detail::type_tag<long>());
  EXPECT_EQ(manta::detail::type_tag<int>(), manta::detail::type_tag<int>());
  EXPECT_NE(manta::detail::type_name_of_tag(manta::detail::type_tag<point>()).find("point"),
            std::string::npos);
}

TEST(serialization, malformed_bytes_are_a_clear_error) {
  std::byte junk[3]{};
  EXPECT_THROW(manta::detail::decode<int>({junk, 3}), manta::usage_error);
  EXPECT_THROW(manta::detail::decode<point>({junk, 3}), manta::usage_error);
  EXPECT_THROW(manta::detail::decode<std::vector<double>>({junk, 3}), manta::usage_error);
}

// Found by tests/fuzz/value_fuzz: a size tag claiming more elements than there are
// bytes must not allocate them, and an empty string may sit at the very end.
TEST(serialization, sizes_larger_than_the_bytes_are_refused_before_allocating) {
  std::uint64_t huge = std::uint64_t{1} << 60;
  std::byte bytes[sizeof huge];
  std::memcpy(bytes, &huge, sizeof huge);
  EXPECT_THROW(manta::detail::decode<std::vector<std::string>>({bytes, sizeof bytes}),
               manta::usage_error);
  EXPECT_THROW((manta::detail::decode<std::map<std::string, int>>({bytes, sizeof bytes})),
               manta::usage_error);
  EXPECT_THROW(manta::detail::decode<point>({bytes, sizeof bytes}), manta::usage_error);

  std::uint64_t one = 1, empty = 0;
  std::byte last_empty[16];
  std::memcpy(last_empty, &one, 8);
  std::memcpy(last_empty + 8, &empty, 8);
  EXPECT_EQ(manta::detail::decode<std::vector<std::string>>({last_empty, 16}),
            std::vector<std::string>{""});
  // Elements of an empty type take no bytes at all, and still decode.
  EXPECT_EQ(round_trip(std::vector<nothing>(100)).size(), 100u);
}

TEST(serialization, names_split_at_top_level_commas) {
  auto names = manta::detail::split_names(" a, ns::b ,c<int, long>, &T::m ");
  ASSERT_EQ(names.size(), 4u);
  EXPECT_EQ(names[0], "a");
  EXPECT_EQ(names[1], "ns::b");
  EXPECT_EQ(names[2], "c<int, long>");
  EXPECT_EQ(names[3], "T::m");
}

}  // namespace

// objects_test: put, get, get_view, wait, spans read in place, and reference
// counting across processes (objects freed when the last ref anywhere goes).
#include <chrono>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "support.hpp"

namespace {
using namespace std::chrono_literals;
using manta::testing::runtime_per_workers;

double sum_span(std::span<const double> xs) { return std::accumulate(xs.begin(), xs.end(), 0.0); }
std::uintptr_t address_of(std::span<const double> xs) { return reinterpret_cast<std::uintptr_t>(xs.data()); }
std::vector<double> filled(std::size_t n, double v) { return std::vector<double>(n, v); }
int slow_value(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
manta::object_ref<std::vector<double>> put_inside(std::size_t n) {
  return manta::put(std::vector<double>(n, 3.0));
}
double sum_of_refs(std::vector<manta::object_ref<std::vector<double>>> refs) {
  double s = 0;
  for (auto& r : refs) s += sum_span(manta::get_view(r).span());
  return s;
}
/// Refuses to be serialised at run time, as cereal does for, say, an unregistered
/// polymorphic type.
struct refuses {
  int x = 0;
  template <class A>
  void save(A&) const {
    throw cereal::Exception("this value refuses to be saved");
  }
  template <class A>
  void load(A&) {}
};
refuses make_refuses(int x) { return {x}; }
int read_refuses(refuses r) { return r.x; }
MANTA_REMOTE(sum_span, address_of, filled, slow_value, put_inside, sum_of_refs, make_refuses,
             read_refuses);

class objects : public runtime_per_workers {};
INSTANTIATE_TEST_SUITE_P(workers, objects, ::testing::Values(1, 2, 4));

TEST_P(objects, put_and_get_small_and_large_values) {
  EXPECT_EQ(manta::get(manta::put(7)), 7);
  EXPECT_EQ(manta::get(manta::put(std::string("abc"))), "abc");
  std::vector<double> big(1 << 20);
  std::iota(big.begin(), big.end(), 0.0);
  auto r = manta::put(big);
  EXPECT_EQ(manta::get(r), big);
  EXPECT_GE(manta::detail::arena_used_bytes(), big.size() * sizeof(double));
}

TEST_P(objects, views_are_zero_copy_and_pin_the_object) {
  auto r = manta::put(std::vector<double>(1 << 18, 2.0));
  auto v1 = manta::get_view(r);
  auto v2 = manta::get_view(r);
  EXPECT_EQ(v1.data(), v2.data());  // both read the same bytes in the arena
  EXPECT_EQ(v1.size(), 1u << 18);
  r = {};  // the views keep it alive
  EXPECT_EQ(v1[100], 2.0);
  EXPECT_EQ(sum_span(v2.span()), 2.0 * (1 << 18));
  auto s = manta::get_view(manta::put(std::string("text")));
  EXPECT_EQ(s.str(), "text");
}

TEST_P(objects, a_span_parameter_reads_the_arena_in_place) {
  auto r = manta::put(std::vector<double>(1 << 18, 1.0));
  auto view = manta::get_view(r);
  EXPECT_EQ(manta::get(manta::task(sum_span).remote(r)), double(1 << 18));
  // The worker saw the driver's arena address: the same mapping, no copy.
  EXPECT_EQ(manta::get(manta::task(address_of).remote(r)),
            reinterpret_cast<std::uintptr_t>(view.data()));
}

TEST_P(objects, large_results_and_arguments_travel_through_the_arena) {
  auto big = manta::task(filled).remote(std::size_t{1} << 20, 0.5);
  EXPECT_EQ(manta::get(manta::task(sum_span).remote(big)), 0.5 * (1 << 20));
  // A large value passed directly is stored once and passed by reference.
  std::vector<double> direct(1 << 19, 1.0);
  EXPECT_EQ(manta::get(manta::task(sum_span).remote(direct)), double(1 << 19));
}

TEST_P(objects, get_with_timeout_and_wait) {
  auto slow = manta::task(slow_value).remote(400);
  EXPECT_THROW(manta::get(slow, 10ms), manta::timeout_error);
  auto fast = manta::put(1);
  std::vector<manta::object_ref<int>> refs{slow, fast};
  auto [ready, pending] = manta::wait(refs, 1, 5s);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0], fast);
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0], slow);
  auto never = manta::task(slow_value).remote(60000);  // ends with the runtime
  auto [none, all] = manta::wait(std::vector{never}, 1, 0ms);
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(all.size(), 1u);
  manta::cancel(never);
  auto [both, rest] = manta::wait(refs, 2, 10s);
  EXPECT_EQ(both.size(), 2u);
  EXPECT_TRUE(rest.empty());
  EXPECT_EQ(manta::get(slow, 1s), 400);
}

TEST_P(objects, objects_are_freed_when_the_last_ref_anywhere_goes) {
  std::size_t objects_before = manta::detail::object_count();
  std::size_t arena_before = manta::detail::arena_used_bytes();
  {
    auto a = manta::put(std::vector<double>(1 << 18, 1.0));
    auto inner = manta::task(put_inside).remote(std::size_t{1} << 18);  // a ref made in a worker
    auto ref_in_worker = manta::get(inner);
    std::vector<manta::object_ref<std::vector<double>>> both{a, ref_in_worker};
    EXPECT_EQ(manta::get(manta::task(sum_of_refs).remote(both)), (1 << 18) * 4.0);
    auto holder = manta::put(both);  // refs inside another object keep them alive
    a = {};
    ref_in_worker = {};
    inner = {};
    auto back = manta::get(holder);
    EXPECT_EQ(manta::get(back[1])[0], 3.0);
  }
  // Releases from workers arrive asynchronously: wait until the directory is back.
  EXPECT_TRUE(manta::testing::eventually([&] {
    return manta::detail::object_count() == objects_before &&
           manta::detail::arena_used_bytes() == arena_before;
  })) << manta::detail::object_count() << " objects, " << manta::detail::arena_used_bytes() << " bytes";
}

TEST_P(objects, many_objects_do_not_grow_the_store) {
  std::size_t arena_before = manta::detail::arena_used_bytes();
  for (int i = 0; i < 200; ++i) {
    auto r = manta::put(std::vector<double>(100000, i));
    EXPECT_EQ(manta::get_view(r)[5], i);
  }
  EXPECT_EQ(manta::detail::arena_used_bytes(), arena_before);
  EXPECT_EQ(manta::detail::object_count(), 0u);
}

TEST_P(objects, wrong_use_is_a_clear_error) {
  manta::object_ref<int> empty;
  EXPECT_THROW(manta::get(empty), manta::usage_error);
  // The runtime keeps working.
  EXPECT_EQ(manta::get(manta::put(3)), 3);
}

TEST_P(objects, a_value_cereal_cannot_serialise_fails_the_call_that_stores_it) {
  try {
    manta::put(refuses{1});
    ADD_FAILURE() << "put did not throw";
  } catch (const manta::usage_error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("refuses"), std::string::npos) << what;
    EXPECT_NE(what.find("cannot be serialised"), std::string::npos) << what;
  }
  EXPECT_THROW(manta::task(read_refuses).remote(refuses{2}), manta::usage_error);
  // As a task's result: that task fails, naming the type; nothing else does.
  auto r = manta::task(make_refuses).remote(3);
  try {
    manta::get(r, std::chrono::seconds(30));
    ADD_FAILURE() << "get of an unserialisable result did not throw";
  } catch (const manta::error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be serialised"), std::string::npos) << e.what();
  }
  EXPECT_EQ(manta::get(manta::put(4)), 4);
  EXPECT_EQ(manta::get(manta::task(slow_value).remote(1), std::chrono::seconds(30)), 1);
  // Only r is left once the workers' releases have arrived (asynchronously).
  EXPECT_TRUE(manta::testing::eventually([] { return manta::detail::object_count() == 1u; }))
      << manta::detail::object_count() << " objects";
}

TEST_P(objects, a_ref_read_as_the_wrong_type_names_both_types) {
  auto stored = manta::put(7);
  manta::detail::acquire(stored.node());  // a second count, adopted by `wrong`
  manta::object_ref<std::string> wrong(stored.node());
  try {
    manta::get(wrong);
    ADD_FAILURE() << "get as the wrong type did not throw";
  } catch (const manta::usage_error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("string"), std::string::npos) << what;
    EXPECT_NE(what.find("stored as int"), std::string::npos) << what;
  }
  auto big = manta::put(std::vector<double>(100000, 1.0));
  manta::detail::acquire(big.node());
  manta::object_ref<std::vector<float>> wrong_view(big.node());
  EXPECT_THROW(manta::get_view(wrong_view), manta::usage_error);
  // Nothing else breaks: the object still reads as what it is, and is freed.
  EXPECT_EQ(manta::get(stored), 7);
  EXPECT_EQ(manta::get(manta::task(sum_span).remote(big)), 100000.0);
  wrong = {};
  wrong_view = {};
}

TEST(objects_store, a_put_larger_than_the_store_throws_object_store_full) {
  manta::init({.num_workers = 1, .object_store_bytes = 8 << 20});
  EXPECT_THROW(manta::put(std::vector<char>(16 << 20)), manta::object_store_full);
  EXPECT_EQ(manta::get(manta::put(std::vector<char>(1 << 20, 'x')))[7], 'x');
  manta::shutdown();
}

}  // namespace

namespace {
manta::buffer<double> fill_buffer(std::size_t n, double v) {
  auto b = manta::make_buffer<double>(n);
  for (auto& x : b) x = v;
  return b;
}
std::tuple<manta::buffer<int>, int> buffer_and_count(int n) {
  auto b = manta::make_buffer<int>(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) b[static_cast<std::size_t>(i)] = i;
  return {std::move(b), n};
}
manta::object_ref<std::vector<double>> put_buffer_inside(std::size_t n) {
  auto b = manta::make_buffer<double>(n);
  for (auto& x : b) x = 7;
  return manta::put(std::move(b));
}
double drop_buffer(std::size_t n) {
  auto b = manta::make_buffer<double>(n);  // never returned: its room goes back
  b[0] = 1;
  return b[0];
}
MANTA_REMOTE(fill_buffer, buffer_and_count, put_buffer_inside, drop_buffer);

class buffers : public manta::testing::runtime_per_workers {};
INSTANTIATE_TEST_SUITE_P(workers, buffers, ::testing::Values(1, 2));

TEST_P(buffers, a_task_writes_its_result_in_place) {
  std::size_t arena_before = manta::detail::arena_used_bytes();
  for (int round = 0; round < 5; ++round) {  // later rounds write into the extent offered at dispatch
    manta::object_ref<std::vector<double>> r = manta::task(fill_buffer).remote(std::size_t{1} << 18, round);
    auto v = manta::get_view(r);
    ASSERT_EQ(v.size(), 1u << 18);
    EXPECT_EQ(v[12345], round);
    EXPECT_EQ(manta::get(manta::task(sum_span).remote(r)), double(round) * (1 << 18));
  }
  auto [ints, count] = manta::task(buffer_and_count).num_returns<2>().remote(100000);
  EXPECT_EQ(manta::get(count), 100000);
  EXPECT_EQ(manta::get(ints)[99999], 99999);
  auto nested = manta::get(manta::task(put_buffer_inside).remote(std::size_t{1} << 17));
  EXPECT_EQ(manta::get_view(nested)[5], 7.0);
  EXPECT_EQ(manta::get(manta::task(drop_buffer).remote(std::size_t{1} << 17)), 1.0);
  ints = {};
  nested = {};
  EXPECT_TRUE(manta::testing::eventually(
      [&] { return manta::detail::arena_used_bytes() == arena_before; }))
      << manta::detail::arena_used_bytes() << " bytes still used";
}

TEST_P(buffers, the_driver_puts_a_buffer_without_a_copy) {
  std::size_t arena_before = manta::detail::arena_used_bytes();
  auto b = manta::make_buffer<float>(1000);
  float* where = b.data();
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i);
  auto r = manta::put(std::move(b));
  EXPECT_EQ(manta::get_view(r).data(), where);  // the object is the buffer's bytes
  EXPECT_EQ(manta::get(r)[999], 999.0f);
  { auto dropped = manta::make_buffer<char>(1 << 20); }
  r = {};
  EXPECT_EQ(manta::detail::arena_used_bytes(), arena_before);
}
}  // namespace

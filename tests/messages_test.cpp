// messages_test: every control message survives a write and a read unchanged,
// and a reader given a count its frame cannot back refuses before allocating.
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ipc/messages.hpp"

namespace {
using namespace manta;
using namespace manta::ipc;

/// Writes `m` as a frame and returns a reader over its body.
template <class M>
struct framed {
  explicit framed(const M& m) {
    append(buf, m);
    std::memcpy(&header, buf.data(), sizeof header);
  }
  frame_reader reader() const {
    return {reinterpret_cast<const std::byte*>(buf.data() + sizeof header), header.size};
  }
  std::string buf;
  frame_header header{};
};

const object_id a{1, 2}, b{3, 4}, c{5, 6};

TEST(messages, run_task_round_trips) {
  std::string inline_bytes = "hello";
  std::vector<object_id> returns{a, b};
  std::vector<std::int32_t> gpus{0, 3};
  std::vector<value_location> args{{7, 5, no_offset, reinterpret_cast<const std::byte*>(inline_bytes.data())},
                                   {8, 1 << 20, 4096, nullptr}};
  run_task m{42, 99, detail::call_mode::construct, 4, "named", returns, 128, 64, true, 77, gpus, args};
  framed f(m);
  EXPECT_EQ(f.header.type, static_cast<std::uint16_t>(msg::run_task));
  auto r = f.reader();
  std::vector<value_location> storage;
  auto back = run_task::read(r, storage);
  EXPECT_EQ(back.key, 42u);
  EXPECT_EQ(back.function, 99u);
  EXPECT_TRUE(back.ahead);
  EXPECT_EQ(back.ahead_seq, 77u);
  EXPECT_EQ(back.mode, detail::call_mode::construct);
  EXPECT_EQ(back.concurrency, 4);
  EXPECT_EQ(back.name, "named");
  ASSERT_EQ(back.returns.size(), 2u);
  EXPECT_EQ(back.returns[1], b);
  EXPECT_EQ(back.grant_offset, 128u);
  EXPECT_EQ(back.grant_size, 64u);
  ASSERT_EQ(back.gpus.size(), 2u);
  EXPECT_EQ(back.gpus[1], 3);
  ASSERT_EQ(back.args.size(), 2u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(back.args[0].inline_data), 5), "hello");
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(back.args[0].inline_data) % 8, 0u);
  EXPECT_EQ(back.args[1].offset, 4096u);
  EXPECT_EQ(back.args[1].size, 1u << 20);
  EXPECT_EQ(r.remaining(), 0u);
}

TEST(messages, task_done_round_trips_results_and_errors) {
  std::vector<object_id> ids{a, b, c};
  task_done ok;
  ok.key = 7;
  ok.grant_used = true;
  ok.ns = 1234;
  ok.started_ns = 98765;
  ok.thread = 4321;
  ok.results.push_back({{ids, no_offset, 3}, {11, 3, no_offset, reinterpret_cast<const std::byte*>("abc")}});
  ok.results.push_back({{{}, 512, 1000000}, {12, 100000, 8192, nullptr}});
  framed f(ok);
  auto r = f.reader();
  auto back = task_done::read(r);
  EXPECT_EQ(back.key, 7u);
  EXPECT_TRUE(back.ok);
  EXPECT_TRUE(back.grant_used);
  EXPECT_EQ(back.ns, 1234u);
  EXPECT_EQ(back.started_ns, 98765u);
  EXPECT_EQ(back.thread, 4321);
  ASSERT_EQ(back.results.size(), 2u);
  ASSERT_EQ(back.results[0].contained.ids.size(), 3u);
  EXPECT_EQ(back.results[0].contained.ids[2], c);
  EXPECT_EQ(back.results[1].contained.offset, 512u);
  EXPECT_EQ(back.results[1].contained.count, 1000000u);
  EXPECT_EQ(back.results[1].location.offset, 8192u);

  task_done failed;
  failed.key = 8;
  failed.ok = false;
  failed.error = {error_kind::cancelled, "T", "msg", "fn", "x <- y", 12, 9};
  framed g(failed);
  auto r2 = g.reader();
  auto back2 = task_done::read(r2);
  EXPECT_FALSE(back2.ok);
  EXPECT_EQ(back2.error.kind, error_kind::cancelled);
  EXPECT_EQ(back2.error.chain, "x <- y");
  EXPECT_EQ(back2.error.pid, 12);
  EXPECT_EQ(back2.error.signal, 9);
}

TEST(messages, submit_round_trips_with_options) {
  detail::task_options o;
  o.num_cpus = 0.5;
  o.num_gpus = 1;
  o.resources = {{"sensor", 2}, {"disk", 0.25}};
  o.max_retries = -1;
  o.retry_exceptions = true;
  o.max_concurrency = 3;
  o.name = "job";
  std::vector<object_id> returns{a}, deps{b, c}, contained{a};
  submit m{1, 2, detail::call_mode::method, 3, o, c, returns, deps, contained, "blob"};
  framed f(m);
  auto r = f.reader();
  auto back = submit::read(r);
  EXPECT_EQ(back.function, 1u);
  EXPECT_EQ(back.parent, 2u);
  EXPECT_EQ(back.mode, detail::call_mode::method);
  EXPECT_EQ(back.arg_count, 3);
  EXPECT_EQ(back.options.num_cpus, 0.5);
  EXPECT_EQ(back.options.resources.at("disk"), 0.25);
  EXPECT_EQ(back.options.max_retries, -1);
  EXPECT_TRUE(back.options.retry_exceptions);
  EXPECT_EQ(back.options.max_concurrency, 3);
  EXPECT_EQ(back.options.name, "job");
  EXPECT_EQ(back.actor, c);
  EXPECT_EQ(back.deps.size(), 2u);
  EXPECT_EQ(back.contained[0], a);
  EXPECT_EQ(back.args, "blob");
}

TEST(messages, small_messages_round_trip) {
  {
    object_ready m{a, true, {5, 2, no_offset, reinterpret_cast<const std::byte*>("hi")}, {}};
    framed f(m);
    auto r = f.reader();
    auto back = object_ready::read(r);
    EXPECT_EQ(back.id, a);
    EXPECT_TRUE(back.ok);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(back.location.inline_data), 2), "hi");
  }
  {
    object_ready m{b, false, {}, {error_kind::node_died, "", "gone", "", "", 0, 0}};
    framed f(m);
    auto r = f.reader();
    auto back = object_ready::read(r);
    EXPECT_FALSE(back.ok);
    EXPECT_EQ(back.error.kind, error_kind::node_died);
  }
  {
    framed f(alloc_reply{3, 4096});
    auto r = f.reader();
    auto back = alloc_reply::read(r);
    EXPECT_EQ(back.request, 3u);
    EXPECT_EQ(back.offset, 4096u);
    EXPECT_TRUE(back.error.empty());
  }
  {
    framed f(alloc_reply{4, no_offset, "spilling failed: disk full"});
    auto r = f.reader();
    auto back = alloc_reply::read(r);
    EXPECT_EQ(back.offset, no_offset);
    EXPECT_EQ(back.error, "spilling failed: disk full");
  }
  {
    framed f(actor_reply{9, b, "no such actor"});
    auto r = f.reader();
    auto back = actor_reply::read(r);
    EXPECT_EQ(back.id, b);
    EXPECT_EQ(back.error, "no such actor");
  }
  {
    framed f(resources_reply{5, {{"CPU", 2}, {"GPU", 1}}});
    auto r = f.reader();
    EXPECT_EQ(resources_reply::read(r).amounts.at("CPU"), 2);
  }
  {
    std::vector<object_id> ids{c};
    framed f(ipc::put{a, {ids, no_offset, 1}, {3, 100000, 64, nullptr}});
    auto r = f.reader();
    auto back = put::read(r);
    EXPECT_EQ(back.id, a);
    EXPECT_EQ(back.contained.ids[0], c);
    EXPECT_EQ(back.location.offset, 64u);
  }
  {
    std::vector<object_id> ids{a, b};
    framed f(block{17, 1, ids, 9});
    auto r = f.reader();
    auto back = block::read(r);
    EXPECT_EQ(back.key, 17u);
    EXPECT_EQ(back.wait, 9u);
    EXPECT_EQ(back.ids.size(), 2u);
  }
  {
    framed f(unblock{17, 9});
    auto r = f.reader();
    auto back = unblock::read(r);
    EXPECT_EQ(back.key, 17u);
    EXPECT_EQ(back.wait, 9u);
  }
  {
    framed f(alloc_request{1, 1 << 30});
    auto r = f.reader();
    EXPECT_EQ(alloc_request::read(r).size, 1u << 30);
  }
  {
    framed f(free_alloc{77});
    auto r = f.reader();
    EXPECT_EQ(free_alloc::read(r).offset, 77u);
  }
  {
    framed f(find_actor{2, 88, "counter"});
    auto r = f.reader();
    auto back = find_actor::read(r);
    EXPECT_EQ(back.class_tag, 88u);
    EXPECT_EQ(back.name, "counter");
  }
  {
    framed f(resources_request{4, true});
    auto r = f.reader();
    EXPECT_TRUE(resources_request::read(r).available);
  }
  {
    framed f(nodes_reply{5, {{"node-1", "10.0.0.2:4000", {{"CPU", 8}, {"special", 1}}, false}, {"n2", "", {}, true}}});
    auto r = f.reader();
    auto back = nodes_reply::read(r);
    EXPECT_EQ(back.request, 5u);
    ASSERT_EQ(back.nodes.size(), 2u);
    EXPECT_EQ(back.nodes[0].address, "10.0.0.2:4000");
    EXPECT_EQ(back.nodes[0].resources.at("special"), 1);
    EXPECT_FALSE(back.nodes[0].alive);
    EXPECT_TRUE(back.nodes[1].alive);
  }
}

TEST(messages, long_id_lists_are_split_across_frames) {
  std::vector<object_id> ids(max_ids_per_message * 2 + 5);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = {1, i};
  std::string buf;
  append(buf, release{ids});
  std::size_t pos = 0, seen = 0, frames = 0;
  while (pos < buf.size()) {
    frame_header h;
    std::memcpy(&h, buf.data() + pos, sizeof h);
    EXPECT_LE(h.size, max_frame_bytes);
    frame_reader r(reinterpret_cast<const std::byte*>(buf.data() + pos + sizeof h), h.size);
    for (const auto& id : release::read(r).ids) EXPECT_EQ(id.lo, seen++);
    pos += sizeof h + pad8(h.size);
    ++frames;
  }
  EXPECT_EQ(seen, ids.size());
  EXPECT_EQ(frames, 3u);
}

// A hostile worker's counts must never drive an allocation the frame cannot back.
TEST(messages, counts_larger_than_their_frame_are_refused) {
  std::string buf;
  {
    frame_writer w(buf, static_cast<std::uint16_t>(msg::release));
    w.put(std::uint32_t{0xffffffff});  // four billion ids, none present
    w.finish();
  }
  frame_reader r(reinterpret_cast<const std::byte*>(buf.data() + 8), buf.size() - 8);
  EXPECT_THROW(release::read(r), protocol_error);

  std::string buf2;
  {
    frame_writer w(buf2, static_cast<std::uint16_t>(msg::task_done));
    w.put(std::uint64_t{1});
    w.put(std::uint8_t{1});
    w.put(std::uint8_t{0});
    w.put(std::uint64_t{0});
    w.put(std::uint32_t{0x7fffffff});  // results
    w.finish();
  }
  frame_reader r2(reinterpret_cast<const std::byte*>(buf2.data() + 8), buf2.size() - 8);
  EXPECT_THROW(task_done::read(r2), protocol_error);

  std::string buf3;
  {
    frame_writer w(buf3, static_cast<std::uint16_t>(msg::resources_reply));
    w.put(std::uint64_t{1});
    w.put(std::uint32_t{100000000});
    w.finish();
  }
  frame_reader r3(reinterpret_cast<const std::byte*>(buf3.data() + 8), buf3.size() - 8);
  EXPECT_THROW(resources_reply::read(r3), protocol_error);
}

TEST(messages, a_frame_over_the_limit_is_refused_and_taken_back) {
  std::string buf = "prefix";
  std::string huge(max_frame_bytes + 1, 'x');
  EXPECT_THROW(append(buf, find_actor{1, 2, huge}), frame_too_large);
  EXPECT_EQ(buf, "prefix");
}

TEST(failures, chains_share_their_cause_and_spell_out_bounded) {
  auto root = make_failure({error_kind::task_exception, "E", "boom", "f", "", 1, 0});
  auto one = chain_failure(root, "g");
  auto two = chain_failure(one, "h");
  EXPECT_EQ(two->describe().chain, "h <- g");
  EXPECT_EQ(two->describe().message, "boom");
  EXPECT_EQ(root->describe().chain, "");
  failure_ptr f = root;
  for (int i = 0; i < 200000; ++i) {
    std::string name = std::to_string(i);  // ("t" + ... trips a g++ 12 -Wrestrict false positive)
    name.insert(name.begin(), 't');
    f = chain_failure(f, name);
  }
  auto e = f->describe();
  EXPECT_NE(e.chain.find("(199936 more)"), std::string::npos);
  EXPECT_EQ(e.chain.rfind("t0", 0), std::string::npos);  // outermost first
  EXPECT_LT(e.chain.size(), 2000u);
  f.reset();  // 200,000 links go without recursing once per link
}

}  // namespace

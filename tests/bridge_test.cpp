// bridge_test.cpp: the bridge's parts alone: frames, the token file and the
// handshake that proves the token, over real loopback TCP connections (and a
// forked peer process), with every wait bounded.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "bridge/auth.hpp"
#include "bridge/socket_io.hpp"
#include "bridge/task_wire.hpp"
#include "bridge/head.hpp"
#include "bridge/node_link.hpp"
#include "bridge/token.hpp"
#include "bridge/wire.hpp"
#include "support.hpp"

namespace {

using namespace manta::bridge;
using namespace std::chrono_literals;

// ---- frames

TEST(bridge_wire, frames_come_out_whole_however_the_bytes_arrive) {
  std::string bytes = encode(frame_type::heartbeat, "one") + encode(frame_type::refused, std::string(1000, 'x')) +
                      encode(frame_type::challenge, "");
  frame_decoder d;
  std::vector<frame> out;
  for (char c : bytes) {  // a byte at a time
    d.feed(&c, 1);
    while (auto f = d.next()) out.push_back(*f);
  }
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].type, frame_type::heartbeat);
  EXPECT_EQ(out[0].body, "one");
  EXPECT_EQ(out[1].body, std::string(1000, 'x'));
  EXPECT_EQ(out[2].type, frame_type::challenge);
  EXPECT_EQ(out[2].body, "");
  EXPECT_EQ(d.pending(), 0u);
}

TEST(bridge_wire, an_oversized_frame_is_refused_from_its_header_alone) {
  frame_decoder d(1024);
  std::string header = encode(frame_type::proof, std::string(2000, 'y')).substr(0, 6);  // the body never comes
  d.feed(header.data(), header.size());
  EXPECT_THROW(d.next(), wire_error);
  frame_decoder short_one;
  const char too_short[4] = {1, 0, 0, 0};  // a length of 1 cannot hold the 2-byte type
  short_one.feed(too_short, 4);
  EXPECT_THROW(short_one.next(), wire_error);
  EXPECT_THROW(encode(frame_type::proof, std::string(max_frame_body + 1, 'z')), wire_error);
}

/// The frames for_each_frame makes of `pieces`, as a peer would read them.
std::vector<frame> framed(frame_type type, std::vector<std::string_view> pieces, std::uint64_t stream) {
  std::string bytes;
  for_each_frame(type, pieces, stream, [&](const std::string& header, std::string_view body) {
    bytes += header;
    bytes += body;
  });
  frame_decoder d;
  d.feed(bytes.data(), bytes.size());
  std::vector<frame> out;
  while (auto f = d.next()) out.push_back(std::move(*f));
  EXPECT_EQ(d.pending(), 0u);
  return out;
}

TEST(bridge_wire, a_long_body_goes_in_parts_that_interleave_and_come_back_whole) {
  const std::string head = "header", a(part_size * 2 + 5, 'a'), b(3, 'b');
  auto first = framed(frame_type::run_task, {head, a, b}, 1);
  ASSERT_EQ(first.size(), 5u);  // the header whole, `a` in three, `b` alone: no part spans two pieces
  for (const auto& f : first) EXPECT_EQ(f.type, frame_type::part);
  auto second = framed(frame_type::task_result, {std::string_view(a)}, 2);  // one piece: in one part
  auto short_one = framed(frame_type::task_result, {"short", "!"}, 3);
  ASSERT_EQ(short_one.size(), 1u);  // a short body, even in pieces, is one plain frame
  EXPECT_EQ(short_one[0].type, frame_type::task_result);
  EXPECT_EQ(short_one[0].body, "short!");
  // The two streams' parts arrive interleaved, with a heartbeat between.
  part_assembler parts;
  std::vector<frame> whole;
  std::size_t i = 0, j = 0;
  while (i < first.size() || j < second.size()) {
    for (auto* f : {i < first.size() ? &first[i++] : nullptr, j < second.size() ? &second[j++] : nullptr})
      if (f)
        if (auto w = parts.take(f->body)) whole.push_back(std::move(*w));
  }
  ASSERT_EQ(whole.size(), 2u);
  EXPECT_EQ(whole[0].type, frame_type::task_result);  // the shorter stream ends first
  EXPECT_EQ(whole[0].body, a);
  EXPECT_EQ(whole[1].type, frame_type::run_task);
  EXPECT_EQ(whole[1].body, head + a + b);
  EXPECT_EQ(parts.open_streams(), 0u);
}

TEST(bridge_wire, a_long_frame_lands_where_its_receiver_chooses_part_by_part) {
  // A landing that counts what it is given and keeps only the first part's bytes.
  struct counting : frame_landing {
    std::string first;
    std::size_t taken = 0, calls = 0;
    void take(std::string_view bytes) override {
      taken += bytes.size();
      ++calls;
    }
    frame finish() override { return {frame_type::run_task, first + "/" + std::to_string(taken), {}}; }
  };
  std::vector<std::string> chosen;
  part_assembler parts(2 * max_long_body, [&](frame_type type, std::string_view first, std::uint64_t total)
                                               -> std::unique_ptr<frame_landing> {
    chosen.push_back(std::string(first) + "@" + std::to_string(total));
    if (type != frame_type::run_task) return nullptr;  // joined, as without a lander
    auto l = std::make_unique<counting>();
    l->first = first;
    return l;
  });
  const std::string head = "head", a(part_size + 7, 'a');
  std::vector<frame> whole;
  for (auto& f : framed(frame_type::run_task, {head, a}, 1))
    if (auto w = parts.take(f.body)) whole.push_back(std::move(*w));
  for (auto& f : framed(frame_type::task_result, {head, a}, 2))
    if (auto w = parts.take(f.body)) whole.push_back(std::move(*w));
  ASSERT_EQ(whole.size(), 2u);
  EXPECT_EQ(whole[0].body, "head/" + std::to_string(a.size())) << "every byte after the first part, given to the landing";
  EXPECT_EQ(whole[1].body, head + a) << "a frame the lander declines is joined";
  ASSERT_EQ(chosen.size(), 2u);
  EXPECT_EQ(chosen[0], "head@" + std::to_string(head.size() + a.size()));
  // Lengths are held to the announcement as before, landing or not.
  auto p = framed(frame_type::run_task, {head, a}, 3);
  EXPECT_FALSE(parts.take(p[0].body));
  EXPECT_FALSE(parts.take(p[1].body));
  EXPECT_THROW(parts.take(p[2].body + "x"), wire_error) << "a landing stream past its length";
}

TEST(bridge_wire, an_outcome_decodes_with_values_that_landed_outside_its_frame) {
  task_outcome o;
  o.id = 8;
  o.values = {{1, "small"}, {2, std::string(100, 'L')}, {3, ""}, {4, std::string(70, 'M')}};
  const std::string body = encode_outcome(o);
  const outcome_layout layout = layout_of_outcome(std::string_view(body).substr(0, encode_outcome_head(o).size() + 2),
                                                  body.size());
  EXPECT_EQ(layout.head, encode_outcome_head(o).size());
  EXPECT_EQ(layout.sizes, (std::vector<std::uint64_t>{5, 100, 0, 70}));
  EXPECT_THROW(layout_of_outcome(encode_outcome_head(o), body.size() + 1), wire_error);
  // Values 1 and 3 landed elsewhere: the body keeps the head and the others' bytes.
  const std::uint32_t landed[] = {1, 3};
  task_outcome back = decode_outcome(encode_outcome_head(o) + "small", std::span<const std::uint32_t>(landed));
  ASSERT_EQ(back.values.size(), 4u);
  EXPECT_EQ(back.values[0].data(), "small");
  EXPECT_FALSE(back.values[0].landed);
  EXPECT_EQ(back.values[1].landed, 0u);
  EXPECT_EQ(back.values[1].tag, 2u);
  EXPECT_EQ(back.values[2].data(), "");
  EXPECT_EQ(back.values[3].landed, 1u);
  EXPECT_THROW(decode_outcome(encode_outcome_head(o) + "small", std::span<const std::uint32_t>(landed, 1)), wire_error)
      << "the bytes of a value said to have landed are missing";
  const std::uint32_t wrong[] = {1, 9};
  EXPECT_THROW(decode_outcome(encode_outcome_head(o) + "small", std::span<const std::uint32_t>(wrong)), wire_error) << "a value it does not have";
}

TEST(bridge_wire, parts_out_of_order_too_long_or_of_no_stream_are_refused) {
  const std::string a(part_size + 1, 'a');
  auto parts_of = [&](std::uint64_t stream) { return framed(frame_type::run_task, {"head", a}, stream); };
  auto p = parts_of(1);
  ASSERT_EQ(p.size(), 3u);  // the header, then `a` in two
  {
    part_assembler in;
    EXPECT_THROW(in.take(p[1].body), wire_error) << "a part of a stream that never began";
  }
  {
    part_assembler in;
    EXPECT_FALSE(in.take(p[0].body));
    EXPECT_THROW(in.take(p[0].body), wire_error) << "a stream started twice";
  }
  {
    part_assembler in;
    EXPECT_FALSE(in.take(p[0].body));
    EXPECT_FALSE(in.take(p[1].body));
    std::string longer = p[2].body + "x";
    EXPECT_THROW(in.take(longer), wire_error) << "a stream past its length";
  }
  {
    part_assembler in;
    EXPECT_FALSE(in.take(p[0].body));
    std::string early = encode_part_header({1, false, true, false}) + "x";
    EXPECT_THROW(in.take(early), wire_error) << "a last part short of the length";
  }
  {
    part_assembler in(a.size() + 20);  // room for one stream's announcement, not two
    EXPECT_FALSE(in.take(p[0].body));
    EXPECT_THROW(in.take(parts_of(2)[0].body), wire_error);
  }
  {
    part_assembler in;
    EXPECT_FALSE(in.take(p[0].body));
    EXPECT_FALSE(in.take(encode_part_header({1, false, false, true})));  // aborted: dropped
    EXPECT_EQ(in.open_streams(), 0u);
    EXPECT_FALSE(in.take(encode_part_header({9, false, false, true})));  // one never begun: nothing
  }
  std::string_view rest;
  EXPECT_THROW(decode_part_header("short", rest), wire_error);
  std::string huge = encode_part_header({1, true, false, false, frame_type::run_task, max_long_body + 1});
  EXPECT_THROW(decode_part_header(huge, rest), wire_error);
  std::string nested = encode_part_header({1, true, false, false, frame_type::part, 10});
  EXPECT_THROW(decode_part_header(nested, rest), wire_error);
}

TEST(bridge_wire, tasks_and_outcomes_decode_alike_moved_or_viewed_and_a_head_checks_a_start) {
  remote_task t;
  t.id = 5;
  t.name = "f";
  t.arg_count = 1;
  t.args = std::string(100, 'q');
  const std::string body = encode_task(t);
  EXPECT_EQ(body, encode_task_head(t) + t.args);
  remote_task moved = decode_task(std::string(body));
  EXPECT_EQ(moved.args, t.args);
  EXPECT_EQ(moved.name, "f");
  EXPECT_EQ(decode_task(std::string_view(body).substr(0, encode_task_head(t).size()), false).name, "f");
  EXPECT_FALSE(moved.spilled);
  t.spilled = true;  // (a spilled task goes back to its driver rather than wait at the head for a node)
  EXPECT_TRUE(decode_task(encode_task(t)).spilled);

  task_outcome o;
  o.id = 6;
  o.values = {{1, "first"}, {2, std::string(50, 'v')}};
  const std::string out = encode_outcome(o);
  EXPECT_EQ(out, encode_outcome_head(o) + "first" + std::string(50, 'v'));
  task_outcome back = decode_outcome(std::string(out));
  ASSERT_EQ(back.values.size(), 2u);
  EXPECT_EQ(back.values[0].data(), "first");
  EXPECT_EQ(back.values[1].data(), std::string(50, 'v'));
  EXPECT_EQ(back.values[1].tag, 2u);
  const task_outcome copy = back;  // (views into a frame both keep)
  back = {};
  EXPECT_EQ(copy.values[1].data(), std::string(50, 'v'));
  const std::string start = encode_outcome_head(o);
  EXPECT_EQ(decode_outcome_head(start, out.size()).id, 6u);
  EXPECT_THROW(decode_outcome_head(start, out.size() + 1), wire_error) << "bytes past its values";
  EXPECT_THROW(decode_outcome_head(start, out.size() - 1), wire_error) << "values past its end";
  EXPECT_THROW(decode_outcome_head(start, 3), wire_error);
}

TEST(bridge_wire, an_outcome_carries_the_ids_inside_its_values_and_the_objects_they_name) {
  const std::string a(32, 'a'), b = std::string(16, '0') + std::string(16, 'f');
  task_outcome o;
  o.id = 7;
  o.values.resize(3);
  o.values[0].tag = 1;
  o.values[0].bytes = "result";
  o.values[0].inside = {a, b};
  o.values[1].tag = 2;
  o.values[1].bytes = "inner";
  o.values[1].id = a;
  o.values[2].id = b;
  o.values[2].error = remote_error{3, "std::runtime_error", "no", "g", "", "", 12, 0};
  const task_outcome back = decode_outcome(encode_outcome(o));
  ASSERT_EQ(back.values.size(), 3u);
  EXPECT_EQ(back.values[0].inside, (std::vector<std::string>{a, b}));
  EXPECT_TRUE(back.values[0].id.empty());
  EXPECT_EQ(back.values[1].id, a);
  EXPECT_EQ(back.values[1].data(), "inner");
  ASSERT_TRUE(back.values[2].error.has_value());
  EXPECT_EQ(back.values[2].error->message, "no");
  EXPECT_EQ(back.values[2].error->pid, 12);
  // An id that is not 32 hex digits is a malformed outcome: a head stops it, a driver never sees it.
  for (const std::string& bad : {std::string(31, 'a'), std::string(32, 'g'), std::string(32, 'A')}) {
    task_outcome wrong = o;
    wrong.values[0].inside = {bad};
    EXPECT_THROW(decode_outcome(encode_outcome(wrong)), wire_error) << bad;
    const std::string start = encode_outcome_head(wrong);
    EXPECT_THROW(decode_outcome_head(start, encode_outcome(wrong).size()), wire_error) << bad;
    wrong = o;
    wrong.values[1].id = bad;
    EXPECT_THROW(decode_outcome(encode_outcome(wrong)), wire_error) << bad;
  }
}

TEST(bridge_wire, an_outcome_carries_the_actor_handles_its_values_name_and_how_they_change_hands) {
  task_outcome o;
  o.id = 9;
  o.values.resize(1);
  o.values[0].bytes = "handles";
  o.values[0].inside = {std::string(32, 'c'), std::string(32, 'd')};
  returned_handle here, borrowed;
  here.id = std::string(32, 'c');
  here.key = "driver-2/d1";
  here.class_tag = 42;
  here.label = "Counter";
  here.owned = here.hosted = true;
  borrowed.id = std::string(32, 'd');
  borrowed.key = "driver-1/3";
  o.handles = {here, borrowed};
  o.lender = "driver-2";
  for (const task_outcome& back :
       {decode_outcome(encode_outcome(o)), decode_outcome_head(encode_outcome_head(o), encode_outcome(o).size())}) {
    ASSERT_EQ(back.handles.size(), 2u);
    EXPECT_EQ(back.handles[0].key, "driver-2/d1");
    EXPECT_EQ(back.handles[0].class_tag, 42u);
    EXPECT_EQ(back.handles[0].label, "Counter");
    EXPECT_TRUE(back.handles[0].owned && back.handles[0].hosted);
    EXPECT_EQ(back.handles[1].id, std::string(32, 'd'));
    EXPECT_FALSE(back.handles[1].owned || back.handles[1].hosted);
    EXPECT_EQ(back.lender, "driver-2");
  }
  // A malformed id, an empty key, or hosted without being handed over: refused.
  task_outcome wrong = o;
  wrong.handles[1].id = std::string(31, 'd');
  EXPECT_THROW(decode_outcome(encode_outcome(wrong)), wire_error);
  wrong = o;
  wrong.handles[1].key.clear();
  EXPECT_THROW(decode_outcome(encode_outcome(wrong)), wire_error);
  wrong = o;
  wrong.handles[0].owned = false;
  EXPECT_THROW(decode_outcome(encode_outcome(wrong)), wire_error);
}

TEST(bridge_wire, an_actors_key_and_restarts_travel_with_its_constructor_and_its_end_on_its_own) {
  remote_task t;
  t.id = 9;
  t.name = "Counter";
  t.mode = 3;
  t.actor = "driver-1/4";
  t.max_restarts = -1;
  t.max_task_retries = 2;
  t.max_concurrency = 4;
  const remote_task back = decode_task(encode_task(t));
  EXPECT_EQ(back.actor, "driver-1/4");
  EXPECT_EQ(back.max_restarts, -1);
  EXPECT_EQ(back.max_task_retries, 2);
  EXPECT_EQ(back.max_concurrency, 4);
  remote_task plain;
  plain.name = "f";
  EXPECT_EQ(encode_task(plain).find("actor"), std::string::npos) << "a plain task carries no actor fields";
  EXPECT_TRUE(decode_task(encode_task(plain)).actor.empty());

  const actor_end e = decode_actor_end(encode_actor_end({"driver-2/7", true}));
  EXPECT_EQ(e.actor, "driver-2/7");
  EXPECT_TRUE(e.kill);
  EXPECT_THROW(decode_actor_end("{\"actor\": 3}"), wire_error);
  EXPECT_THROW(decode_actor_end("not json"), wire_error);
}

TEST(bridge_wire, an_object_note_carries_the_error_of_an_object_that_failed_or_could_not_be_sent) {
  const object_note plain = decode_object_note(encode_object_note({"driver-1/ab", "node-2", "freed"}));
  EXPECT_EQ(plain.object, "driver-1/ab");
  EXPECT_EQ(plain.why, "freed");
  EXPECT_FALSE(plain.error);
  object_note n{"driver-1/cd", "node-3", "it failed"};
  n.error = remote_error{4, "std::invalid_argument", "boom", "f", "g", "#0 f", 42, 0};
  n.failed = true;
  const object_note back = decode_object_note(encode_object_note(n));
  ASSERT_TRUE(back.error);
  EXPECT_TRUE(back.failed);
  EXPECT_EQ(back.error->kind, 4);
  EXPECT_EQ(back.error->remote_type, "std::invalid_argument");
  EXPECT_EQ(back.error->message, "boom");
  EXPECT_EQ(back.error->stack, "#0 f");
  EXPECT_EQ(back.error->pid, 42);
  EXPECT_THROW(decode_object_note(R"({"object":"a","node":"b","why":"c","error":{"kind":1}})"), wire_error);
}

// ---- sending to a slow reader (issue 31, defect 1: a node reading slower
// than an 8 MiB part a ~6 s lost its connection while it read)

TEST(bridge_send, a_slow_reader_that_keeps_reading_is_waited_for_and_one_that_stops_is_not) {
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  int small = 16 << 10;
  ::setsockopt(pair[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  ::setsockopt(pair[1], SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  const std::string payload(1 << 20, 'x');
  std::atomic<std::size_t> got{0};
  std::thread reader([&] {  // 8 KiB every 10 ms (about 1.3 s for the payload), then it stops reading
    char buf[8192];
    while (got < payload.size()) {
      ssize_t n = ::read(pair[1], buf, sizeof buf);
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
      std::this_thread::sleep_for(10ms);
    }
  });
  const std::string_view piece = payload;
  // The deadline (200 ms) passes long before the end; the reader's progress moves it.
  EXPECT_NO_THROW(send_all(pair[0], std::span<const std::string_view>(&piece, 1), io_clock::now() + 200ms, 2s));
  reader.join();
  EXPECT_EQ(got, payload.size());
  // Nobody reads now: the send fails once nothing left for the stall limit.
  EXPECT_THROW(send_all(pair[0], std::span<const std::string_view>(&piece, 1), io_clock::now() + 200ms, 500ms),
               io_error);
  ::close(pair[0]);
  ::close(pair[1]);
}

// ---- the token file

class bridge_token : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = manta::testing::temp_path("token");
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(bridge_token, is_made_0600_and_read_back) {
  std::string path = dir_ + "/cluster.token";
  std::string token = make_token_file(path);
  EXPECT_EQ(token.size(), 64u);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(read_token_file(path), token);
  EXPECT_NE(make_token_file(path), token) << "a new token each time";
}

TEST_F(bridge_token, is_refused_when_others_may_read_it_or_it_holds_nothing) {
  std::string path = dir_ + "/cluster.token";
  make_token_file(path);
  ::chmod(path.c_str(), 0644);
  try {
    read_token_file(path);
    FAIL();
  } catch (const token_error& e) {
    EXPECT_NE(std::string(e.what()).find("others may read"), std::string::npos) << e.what();
  }
  std::string empty = dir_ + "/empty.token";
  std::ofstream(empty).close();
  ::chmod(empty.c_str(), 0600);
  EXPECT_THROW(read_token_file(empty), token_error);
  EXPECT_THROW(read_token_file(dir_ + "/missing.token"), token_error);
}

TEST_F(bridge_token, is_never_written_or_read_through_a_link) {
  std::string victim = dir_ + "/victim";
  std::ofstream(victim) << "keep me\n";
  std::string path = dir_ + "/cluster.token";
  std::filesystem::create_symlink(victim, path);
  EXPECT_THROW(read_token_file(path), token_error);
  make_token_file(path);
  std::ifstream in(victim);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "keep me");
  EXPECT_FALSE(std::filesystem::is_symlink(path));
}

// ---- the handshake, over loopback TCP

/// A connected pair of TCP sockets on 127.0.0.1: {head's end, peer's end}.
std::pair<int, int> tcp_pair() {
  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return {-1, -1};
  int peer = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (::connect(peer, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return {-1, -1};
  int head = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  ::close(listener);
  return {head, peer};
}

/// Runs the head's side on a thread; its error text, or "" on success.
std::future<std::string> head_side(int fd, std::string token, std::chrono::milliseconds timeout = handshake_timeout) {
  return std::async(std::launch::async, [fd, token, timeout] {
    try {
      authenticate_peer(fd, token, timeout);
      return std::string();
    } catch (const auth_error& e) {
      return std::string(e.what());
    }
  });
}

const std::string token = "4f6c2b8e0d1a9c7e5f3b2d1c0a9e8f7d6c5b4a39281706f5e4d3c2b1a0f9e8d7";

TEST(bridge_auth, peers_that_know_the_token_are_welcomed_both_ways) {
  auto [head, peer] = tcp_pair();
  ASSERT_GE(head, 0);
  auto result = head_side(head, token);
  EXPECT_NO_THROW(authenticate_to_head(peer, token));
  ASSERT_EQ(result.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(result.get(), "");
  ::close(head);
  ::close(peer);
}

TEST(bridge_auth, a_wrong_token_is_refused_with_a_clear_error_on_both_sides) {
  auto [head, peer] = tcp_pair();
  ASSERT_GE(head, 0);
  auto result = head_side(head, token);
  try {
    authenticate_to_head(peer, "not-the-cluster-token-at-all");
    FAIL() << "a wrong token was welcomed";
  } catch (const auth_error& e) {
    EXPECT_NE(std::string(e.what()).find("refused this peer: wrong cluster token"), std::string::npos) << e.what();
  }
  ASSERT_EQ(result.wait_for(10s), std::future_status::ready);
  EXPECT_NE(result.get().find("wrong cluster token"), std::string::npos);
  ::close(head);
  ::close(peer);
}

TEST(bridge_auth, a_head_that_cannot_prove_the_token_is_not_believed) {
  auto [head, peer] = tcp_pair();
  ASSERT_GE(head, 0);
  // An impostor: a challenge, then a welcome it cannot have computed.
  std::string opening = encode(frame_type::challenge, std::string(32, 'n')) + encode(frame_type::welcome, std::string(32, 'w'));
  ASSERT_EQ(::send(head, opening.data(), opening.size(), 0), static_cast<ssize_t>(opening.size()));
  try {
    authenticate_to_head(peer, token, 2s);
    FAIL();
  } catch (const auth_error& e) {
    EXPECT_NE(std::string(e.what()).find("did not prove"), std::string::npos) << e.what();
  }
  ::close(head);
  ::close(peer);
}

TEST(bridge_auth, garbage_an_oversized_frame_or_silence_ends_the_handshake) {
  {
    auto [head, peer] = tcp_pair();
    auto result = head_side(head, token);
    std::string http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";  // the length field reads as a huge frame
    ::send(peer, http.data(), http.size(), MSG_NOSIGNAL);
    ASSERT_EQ(result.wait_for(10s), std::future_status::ready);
    EXPECT_NE(result.get().find("malformed"), std::string::npos);
    ::close(head);
    ::close(peer);
  }
  {
    auto [head, peer] = tcp_pair();
    auto result = head_side(head, token);
    std::string big = encode(frame_type::proof, std::string(100000, 'p')).substr(0, 6);
    ::send(peer, big.data(), big.size(), MSG_NOSIGNAL);
    ASSERT_EQ(result.wait_for(10s), std::future_status::ready);
    EXPECT_NE(result.get().find("over the 64-byte limit"), std::string::npos);
    ::close(head);
    ::close(peer);
  }
  {
    auto [head, peer] = tcp_pair();
    auto result = head_side(head, token, 300ms);  // the peer says nothing
    ASSERT_EQ(result.wait_for(10s), std::future_status::ready);
    EXPECT_NE(result.get().find("timed out"), std::string::npos);
    ::close(head);
    ::close(peer);
  }
}

TEST(bridge_auth, a_peer_in_another_process_proves_the_token) {
  auto [head, peer] = tcp_pair();
  ASSERT_GE(head, 0);
  pid_t child = ::fork();  // (the child starts no thread: fine under ThreadSanitizer)
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(head);
    try {
      authenticate_to_head(peer, token);
      ::_exit(0);
    } catch (...) {
      ::_exit(1);
    }
  }
  ::close(peer);
  EXPECT_NO_THROW(authenticate_peer(head, token));
  int status = 0;
  ASSERT_TRUE(manta::testing::eventually([&] { return ::waitpid(child, &status, WNOHANG) == child; }));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ::close(head);
}

}  // namespace

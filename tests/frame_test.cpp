// frame_test: framing over a real pipe: batching, alignment, partial reads, bad frames.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "ipc/channel.hpp"
#include "ipc/frame.hpp"
#include "ipc/messages.hpp"

namespace {
using namespace manta::ipc;

struct pipe_pair {
  int fds[2];
  pipe_pair() {
    make_pipe(fds, 1 << 20);
    set_nonblocking(fds[0], true);
  }
  ~pipe_pair() {
    ::close(fds[0]);
    if (fds[1] >= 0) ::close(fds[1]);
  }
};

TEST(frames, many_frames_in_one_write_arrive_whole_and_aligned) {
  pipe_pair p;
  std::atomic<std::uint32_t> bell{0};
  outbox out(p.fds[1], {&bell});
  for (std::uint32_t i = 0; i < 100; ++i) {
    frame_writer w(out.buffer(), 7);
    w.put(i);
    std::string payload(i % 13, 'x');
    write_location(w, {99, payload.size(), no_offset, reinterpret_cast<const std::byte*>(payload.data())});
    w.finish();
  }
  ASSERT_TRUE(out.flush());
  EXPECT_GE(bell.load(), 1u);
  inbox in(p.fds[0]);
  ASSERT_EQ(in.read_some(), inbox::status::data);
  frame f;
  for (std::uint32_t i = 0; i < 100; ++i) {
    ASSERT_TRUE(in.next(f));
    EXPECT_EQ(f.type, 7);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(f.body) % 8, 0u);
    auto r = f.reader();
    EXPECT_EQ(r.get<std::uint32_t>(), i);
    auto loc = read_location(r);
    EXPECT_EQ(loc.size, i % 13);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(loc.inline_data) % 8, 0u);
  }
  EXPECT_FALSE(in.next(f));
}

TEST(frames, a_frame_split_across_reads_is_reassembled) {
  pipe_pair p;
  std::string buf;
  {
    frame_writer w(buf, 3);
    std::string big(200000, 'q');  // larger than the inbox's first buffer
    w.string(big);
    w.finish();
  }
  inbox in(p.fds[0]);
  frame f;
  std::size_t sent = 0;
  while (sent < buf.size()) {
    std::size_t n = std::min<std::size_t>(4096, buf.size() - sent);
    ASSERT_EQ(::write(p.fds[1], buf.data() + sent, n), static_cast<ssize_t>(n));
    sent += n;
    in.read_some();
    if (sent < buf.size()) {
      EXPECT_FALSE(in.next(f));
    }
  }
  while (!in.next(f)) ASSERT_NE(in.read_some(), inbox::status::closed);
  auto r = f.reader();
  EXPECT_EQ(r.string(), std::string(200000, 'q'));
}

TEST(frames, truncated_and_oversized_frames_are_protocol_errors) {
  std::string buf;
  {
    frame_writer w(buf, 1);
    w.put(std::uint32_t{5});
    w.finish();
  }
  frame f{1, reinterpret_cast<const std::byte*>(buf.data() + 8), 4};
  auto r = f.reader();
  EXPECT_EQ(r.get<std::uint32_t>(), 5u);
  EXPECT_THROW(r.get<std::uint64_t>(), protocol_error);
  auto r2 = f.reader();
  EXPECT_THROW(r2.string(), protocol_error);  // claims 5 bytes, has 0

  pipe_pair p;
  frame_header h{max_frame_bytes + 1, 1, 0};
  ASSERT_EQ(::write(p.fds[1], &h, sizeof h), static_cast<ssize_t>(sizeof h));
  inbox in(p.fds[0]);
  in.read_some();
  EXPECT_THROW(in.next(f), protocol_error);
}

// Found by tests/fuzz/frame_fuzz: a header claiming a large (but legal) frame must
// not make the inbox allocate it before its bytes arrive.
TEST(frames, a_large_claimed_frame_grows_the_buffer_only_as_bytes_arrive) {
  pipe_pair p;
  frame_header h{max_frame_bytes - 8, 1, 0};
  ASSERT_EQ(::write(p.fds[1], &h, sizeof h), static_cast<ssize_t>(sizeof h));
  ::close(p.fds[1]);
  p.fds[1] = -1;
  inbox in(p.fds[0]);
  frame f;
  EXPECT_NE(in.read_some(), inbox::status::closed);
  EXPECT_FALSE(in.next(f));
  EXPECT_LT(in.capacity(), std::size_t{1} << 20);
  EXPECT_EQ(in.read_some(), inbox::status::closed);
}

TEST(frames, eof_is_reported_after_the_last_frame) {
  pipe_pair p;
  std::string buf;
  {
    frame_writer w(buf, 2);
    w.finish();
  }
  ASSERT_EQ(::write(p.fds[1], buf.data(), buf.size()), static_cast<ssize_t>(buf.size()));
  ::close(p.fds[1]);
  p.fds[1] = -1;
  inbox in(p.fds[0]);
  EXPECT_EQ(in.read_some(), inbox::status::data);
  frame f;
  EXPECT_TRUE(in.next(f));
  EXPECT_EQ(in.read_some(), inbox::status::closed);
}

TEST(frames, errors_round_trip) {
  std::string buf;
  error_info e{error_kind::worker_crashed, "T", "msg", "fn", "a <- b", 12, 9};
  {
    frame_writer w(buf, 1);
    write_error(w, e);
    w.finish();
  }
  frame f{1, reinterpret_cast<const std::byte*>(buf.data() + 8), buf.size() - 8};
  auto r = f.reader();
  auto back = read_error(r);
  EXPECT_EQ(back.kind, error_kind::worker_crashed);
  EXPECT_EQ(back.message, "msg");
  EXPECT_EQ(back.chain, "a <- b");
  EXPECT_EQ(back.signal, 9);
}

}  // namespace

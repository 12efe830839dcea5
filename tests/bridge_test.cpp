// bridge_test.cpp: the bridge's parts alone: frames, the token file and the
// handshake that proves the token, over real loopback TCP connections (and a
// forked peer process), with every wait bounded.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "bridge/auth.hpp"
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
  pid_t child = ::fork();
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

// bridge_head_test.cpp: the head's sessions (Boost.Asio) over loopback TCP:
// connections hold no thread of the head, and the limits that protect it
// (the handshake's deadline, the first frame's, what a stranger may send
// before proving the token) still hold.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "bridge/auth.hpp"
#include "bridge/head.hpp"
#include "bridge/node_link.hpp"
#include "bridge/socket_io.hpp"
#include "bridge/tls.hpp"
#include "bridge/wire.hpp"
#include "bridge_support.hpp"
#include "support.hpp"

namespace {

using namespace manta::bridge;
using namespace std::chrono_literals;

const std::string token = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

std::string at(const head& h) { return "127.0.0.1:" + std::to_string(h.port()); }

node_info a_node() { return {"localhost", static_cast<int>(::getpid()), {{"CPU", 1}}, {"f"}}; }

/// Threads of this process whose name starts with `prefix` (what the head names its own).
std::size_t threads_named(const std::string& prefix) {
  std::size_t n = 0;
  DIR* tasks = ::opendir("/proc/self/task");
  if (!tasks) return 0;
  while (const dirent* e = ::readdir(tasks)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string name;
    std::getline(comm, name);
    n += name.rfind(prefix, 0) == 0;
  }
  ::closedir(tasks);
  return n;
}

/// Whether the head closes `fd` within `limit` (reading and dropping what it sends first).
bool closed_by_head(int fd, std::chrono::milliseconds limit) {
  const auto until = io_clock::now() + limit;
  char buffer[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(until - io_clock::now()).count());
    if (left <= 0 || ::poll(&p, 1, left) <= 0) return false;
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n <= 0) return true;
  }
}

// Issue 31: the head ran a reading and a writing thread for every connection.
TEST(bridge_head, connections_hold_no_thread_of_the_head) {
  head h({.token = token});
  // (a few, as many as the machine has cores, from 2 to 4: each names itself once started)
  const std::size_t before = std::clamp(std::thread::hardware_concurrency(), 2u, 4u);
  ASSERT_TRUE(manta::testing::eventually([&] { return threads_named("manta-head") == before; }, 10s))
      << threads_named("manta-head");
  std::vector<std::unique_ptr<node_link>> members;
  for (int i = 0; i < 16; ++i) members.push_back(std::make_unique<node_link>(at(h), token, a_node(), nullptr));
  std::vector<int> idle;
  for (int i = 0; i < 6; ++i) idle.push_back(connect_to("127.0.0.1", h.port(), 5s));
  EXPECT_TRUE(manta::testing::eventually([&] { return h.connections() == 22; }, 10s)) << h.connections();
  EXPECT_EQ(h.nodes().size(), 16u);
  EXPECT_EQ(threads_named("manta-head"), before) << "22 connections started threads in the head";
  for (int fd : idle) ::close(fd);
}

// A connection that says nothing is closed once its handshake's time is up;
// one that proved the token and then says nothing, once its first frame's is.
TEST(bridge_head, a_silent_connection_is_closed_at_its_deadline_and_the_head_serves_on) {
  head h({.token = token});
  const int mute = connect_to("127.0.0.1", h.port(), 5s);
  const int proved = connect_to("127.0.0.1", h.port(), 5s);
  authenticate_to_head(proved, token);
  EXPECT_TRUE(closed_by_head(mute, handshake_timeout + 10s)) << "a connection that never proved the token stays open";
  EXPECT_TRUE(closed_by_head(proved, 15s)) << "a proved connection that never says what it is stays open";
  ::close(mute);
  ::close(proved);
  EXPECT_TRUE(manta::testing::eventually([&] { return h.connections() == 0; }, 10s)) << h.connections();
  node_link node(at(h), token, a_node(), nullptr);
  EXPECT_EQ(node.node_id(), "node-1");
}

// Before the token is proved the head reads one short frame: garbage, an
// oversized frame or a wrong proof ends that connection alone.
TEST(bridge_head, what_a_stranger_sends_before_the_token_ends_its_connection_alone) {
  head h({.token = token});
  node_link member(at(h), token, a_node(), nullptr);
  const int garbage = connect_to("127.0.0.1", h.port(), 5s);
  send_all(garbage, std::string(64, '\xff'), io_clock::now() + 5s);
  const int oversized = connect_to("127.0.0.1", h.port(), 5s);
  send_all(oversized, encode(frame_type::proof, std::string(4096, 'x')), io_clock::now() + 5s);
  EXPECT_TRUE(closed_by_head(garbage, 10s));
  EXPECT_TRUE(closed_by_head(oversized, 10s));
  ::close(garbage);
  ::close(oversized);
  const int wrong = connect_to("127.0.0.1", h.port(), 5s);
  EXPECT_THROW(authenticate_to_head(wrong, std::string(64, '0')), auth_error);
  ::close(wrong);
  EXPECT_NE(ask_head(at(h), token, "status").find("node-1"), std::string::npos);
  ASSERT_EQ(h.nodes().size(), 1u);
  EXPECT_TRUE(h.nodes()[0].alive);
}

// Found in review of the Asio head: a receiver's writer woke every sender
// paused behind it, and one that found the queue full again (another sender
// had refilled it) was registered nowhere: it waited for its own 69 s limit.
TEST(bridge_head, senders_paused_behind_one_receiver_all_resume_when_it_reads_again) {
  manta::testing::silence_limit_of patient("30");  // (the node's stuck reader must not lose it)
  head h({.token = token, .lost_after = 30s});
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> stuck{false};
  std::atomic<std::size_t> got{0};
  node_link node(at(h), token, a_node(), nullptr, [&](std::vector<frame>&& frames) {
    got += frames.size();
    if (!stuck.exchange(true)) released.wait_for(60s);  // the first frame: its reader stops a while
  });
  node_info as_driver = a_node();
  as_driver.role = "driver";
  node_link first(at(h), token, as_driver, nullptr), second(at(h), token, as_driver, nullptr);
  manta::testing::long_task(1000, 1).send_by(first);
  ASSERT_TRUE(manta::testing::eventually([&] { return stuck.load(); }, 20s));
  // Past 128 MiB queued for the node, the head stops reading both drivers.
  const manta::testing::long_task a(160u << 20, 2), b(160u << 20, 3);
  auto sent_a = std::async(std::launch::async, [&] { a.send_by(first); });
  auto sent_b = std::async(std::launch::async, [&] { b.send_by(second); });
  EXPECT_EQ(sent_a.wait_for(3s), std::future_status::timeout) << "the head read on while the node read nothing";
  release.set_value();
  EXPECT_EQ(sent_a.wait_for(40s), std::future_status::ready) << "a paused sender was never resumed";
  EXPECT_EQ(sent_b.wait_for(40s), std::future_status::ready) << "a paused sender was never resumed";
  EXPECT_TRUE(manta::testing::eventually([&] { return got.load() == 3; }, 40s)) << got.load();
}

// Found in review of the Asio head: Asio's accept does not set close-on-exec
// (the hand-written head's accept4 did), so a program the head's process
// starts (the head may live in rank 0's own process) kept its peers' sockets.
TEST(bridge_head, the_heads_sockets_are_not_inherited_by_programs_it_starts) {
  head h({.token = token});
  node_link member(at(h), token, a_node(), nullptr);
  const int idle = connect_to("127.0.0.1", h.port(), 5s);
  ASSERT_TRUE(manta::testing::eventually([&] { return h.connections() == 2; }, 10s)) << h.connections();
  std::size_t seen = 0;  // the listener and the two accepted: every socket of the head's port
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    const int fd = std::stoi(e.path().filename());
    sockaddr_storage local{};
    socklen_t size = sizeof local;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &size) != 0 || local.ss_family != AF_INET) continue;
    if (ntohs(reinterpret_cast<const sockaddr_in&>(local).sin_port) != h.port()) continue;
    ++seen;
    EXPECT_TRUE(::fcntl(fd, F_GETFD) & FD_CLOEXEC) << "socket " << fd << " of the head's port is inherited by exec";
  }
  EXPECT_EQ(seen, 3u);
  ::close(idle);
}

// Found in review of the Asio head: a failed handshake was no longer logged,
// so a member refused for a wrong token left no trace in the head's log.
TEST(bridge_head, a_handshake_that_fails_is_said_in_the_heads_log) {
  head h({.token = token});
  ::testing::internal::CaptureStderr();
  const int wrong = connect_to("127.0.0.1", h.port(), 5s);
  EXPECT_THROW(authenticate_to_head(wrong, std::string(64, '0')), auth_error);
  const bool closed = closed_by_head(wrong, 10s);
  ::close(wrong);
  const bool gone = manta::testing::eventually([&] { return h.connections() == 0; }, 10s);
  const std::string said = ::testing::internal::GetCapturedStderr();  // (before any assertion returns)
  EXPECT_TRUE(gone) << h.connections();
  EXPECT_TRUE(closed);
  EXPECT_NE(said.find("manta head: dropped a peer (127.0.0.1"), std::string::npos) << said;
  EXPECT_NE(said.find("wrong cluster token"), std::string::npos) << said;
}

// Issue 31 (review): TLS sessions lived in a process-wide map keyed by
// descriptor number, and a send through a number the map did not know (a
// duplicate of the socket, or a number closed and reused) went out in plain
// text. A session is now held by its connection's owner and named with the
// socket at every send and receive.
TEST(bridge_tls, a_tls_connection_is_encrypted_whatever_descriptor_carries_it) {
  const std::string dir = manta::testing::temp_path("tls-session");
  std::filesystem::create_directories(dir);
  manta::testing::shell_output("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -addext subjectAltName=IP:127.0.0.1 "
                               "-subj /CN=head -keyout " + dir + "/key.pem -out " + dir + "/cert.pem 2>&1");
  if (!std::filesystem::exists(dir + "/cert.pem")) GTEST_SKIP() << "no openssl command (tools/setup.sh installs it)";
  const auto head_tls = tls_context::for_head(dir + "/cert.pem", dir + "/key.pem");
  const auto member_tls = tls_context::for_member(dir + "/cert.pem");
  unsigned short port = 0;
  const int listener = listen_on("127.0.0.1", port);
  const int member = connect_to("127.0.0.1", port, 5s);
  pollfd p{listener, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1);
  const int accepted = ::accept(listener, nullptr, nullptr);
  ASSERT_GE(accepted, 0);
  std::unique_ptr<tls_session> head_session;
  std::thread head_side([&] { head_session = start_tls(accepted, *head_tls, true, {}, io_clock::now() + 10s); });
  auto member_session = start_tls(member, *member_tls, false, "127.0.0.1", io_clock::now() + 10s);
  head_side.join();
  ASSERT_TRUE(head_session && member_session);

  const int duplicate = ::dup(member);  // (another number for the same connection)
  const std::string secret = "a secret that never crosses in plain text";
  send_all(socket_ref{duplicate, member_session.get()}, encode(frame_type::output, secret), io_clock::now() + 5s);
  std::string raw(4096, '\0');
  ASSERT_EQ(::poll(&(p = {accepted, POLLIN, 0}), 1, 5000), 1);
  const ssize_t n = ::recv(accepted, raw.data(), raw.size(), MSG_PEEK);  // (left for the session to read)
  ASSERT_GT(n, 0);
  raw.resize(static_cast<std::size_t>(n));
  EXPECT_EQ(raw.find("a secret"), std::string::npos) << "the bytes on the wire hold the text in plain";
  frame_decoder in;
  frame f;
  ASSERT_EQ(receive(socket_ref{accepted, head_session.get()}, in, io_clock::now() + 5s, f), receive_status::frame);
  EXPECT_EQ(f.body, secret);
  EXPECT_EQ(tls_binding(socket_ref{accepted, head_session.get()}),
            tls_binding(socket_ref{duplicate, member_session.get()}))
      << "both ends of one session export the same keying material";
  ::close(duplicate);
  ::close(member);
  ::close(accepted);
  ::close(listener);
  std::filesystem::remove_all(dir);
}

}  // namespace

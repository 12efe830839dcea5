// debug_tools_test.cpp: the tools for a process that looks hung or wrong, as
// `ray stack` and `ray logs`: `manta stack` shows where each of its threads
// is, `manta logs` what it printed.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include <manta/manta.hpp>

#include "support.hpp"

namespace {

using namespace std::chrono_literals;

/// Sleeps in a frame of its own, where the stack must show it.
__attribute__((noinline)) int held_in_a_known_place(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}

struct Sleeper {
  int sleep(int ms) { return held_in_a_known_place(ms); }
  int pid() { return static_cast<int>(::getpid()); }
  int say(int n) {
    std::printf("line %d from the actor\n", n);
    std::fflush(stdout);
    return n;
  }
};
MANTA_ACTOR(Sleeper, &Sleeper::sleep, &Sleeper::pid, &Sleeper::say);

class debug_tools : public manta::testing::runtime_fixture {
 protected:
  void SetUp() override {
    dir_ = manta::testing::temp_path("stack");
    start(1, {.log_dir = dir_});
  }
  void TearDown() override {
    runtime_fixture::TearDown();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);  // (the runtime is down: nothing writes there any more)
  }
  std::string cli(const std::string& args) {
    return manta::testing::shell_output(std::string(MANTA_CLI_PATH) + " " + args + " --log-dir " + dir_ +
                                            " 2>&1; echo rc=$?",
                                        30, false);
  }
  std::string dir_;
};

TEST_F(debug_tools, stack_shows_where_a_busy_actor_is) {
  // Two threads: the busy call stays busy (60 s, far past every ask, even
  // under a sanitizer), and the other answers while it is.
  auto s = manta::actor<Sleeper>().name("sleepy").max_concurrency(2).remote();
  const int pid = manta::get(s.task(&Sleeper::pid).remote(), 30s);
  auto busy = s.task(&Sleeper::sleep).remote(60000);
  std::string out;
  EXPECT_TRUE(manta::testing::eventually([&] {  // once the call runs
    out = cli("stack --actor sleepy");
    return out.find("held_in_a_known_place") != std::string::npos;
  }, 30s)) << out;
  EXPECT_NE(out.find("rc=0"), std::string::npos) << out;
  out = cli("stack --pid " + std::to_string(pid));
  EXPECT_NE(out.find("held_in_a_known_place"), std::string::npos) << out;
  EXPECT_EQ(manta::get(s.task(&Sleeper::pid).remote(), 30s), pid) << "the actor goes on after it";
  manta::kill(s);
  EXPECT_THROW(manta::get(busy, 30s), manta::actor_died_error);
}

TEST_F(debug_tools, stack_refuses_a_process_of_no_runtime_and_an_unknown_actor) {
  std::string out = cli("stack --pid " + std::to_string(::getpid()));
  EXPECT_NE(out.find("is not a worker or actor host of this runtime"), std::string::npos) << out;
  EXPECT_NE(out.find("rc=1"), std::string::npos) << out;
  out = cli("stack --actor nobody");
  EXPECT_NE(out.find("no actor is named 'nobody'"), std::string::npos) << out;
  out = cli("stack");
  EXPECT_NE(out.find("give --pid PID or --actor NAME"), std::string::npos) << out;
}

TEST_F(debug_tools, logs_lists_prints_and_follows_a_process_output) {
  auto s = manta::actor<Sleeper>().name("talker").remote();
  const int pid = manta::get(s.task(&Sleeper::pid).remote(), 30s);
  EXPECT_EQ(manta::get(s.task(&Sleeper::say).remote(1), 30s), 1);
  std::string out;
  EXPECT_TRUE(manta::testing::eventually([&] {  // (the forwarder writes the log as lines come)
    out = cli("logs --actor talker");
    return out.find("line 1 from the actor") != std::string::npos;
  })) << out;
  out = cli("logs");
  EXPECT_NE(out.find(std::to_string(pid)), std::string::npos) << out;
  EXPECT_NE(out.find("running"), std::string::npos) << out;

  // --follow prints what comes later, and ends once the process has.
  std::string followed;
  std::thread follower([&] { followed = cli("logs --follow --pid " + std::to_string(pid)); });
  EXPECT_EQ(manta::get(s.task(&Sleeper::say).remote(2), 30s), 2);
  EXPECT_TRUE(manta::testing::eventually([&] {
    return manta::testing::file_text(dir_ + "/worker-" + std::to_string(pid) + ".log").find("line 2") != std::string::npos;
  }));
  manta::kill(s);
  follower.join();
  EXPECT_NE(followed.find("line 1 from the actor"), std::string::npos) << followed;
  EXPECT_NE(followed.find("line 2 from the actor"), std::string::npos) << followed;
  EXPECT_NE(followed.find("rc=0"), std::string::npos) << followed;
  EXPECT_NE(cli("logs --pid 1").find("no log of pid 1"), std::string::npos);
}

}  // namespace

// progress_test.cpp: options.progress draws a bar in a terminal (a tmux pane,
// captured) and nothing when stderr is not a terminal.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "support.hpp"

namespace {

/// Runs a shell command (bounded by timeout(1)); its stdout and stderr.
std::string sh(const std::string& cmd) { return manta::testing::shell_output(cmd); }

class progress : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (std::system("command -v tmux > /dev/null 2>&1") != 0) GTEST_SKIP() << "tmux is not installed";
    dir_ = manta::testing::temp_path("progress");
    std::filesystem::create_directories(dir_);
    tmux_ = "tmux -L manta-progress-" + std::to_string(::getpid()) + " ";
  }
  void TearDown() override {
    if (!tmux_.empty()) sh(tmux_ + "kill-server");
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string dir_, tmux_;
};

TEST_P(progress, a_terminal_shows_done_total_rate_and_eta_to_the_end) {
  const std::string mode = GetParam();
  // The pane stays after the program ends (remain-on-exit) so its last screen can be read.
  sh(tmux_ + "new-session -d -x 120 -y 10 -s p '" PROGRESS_PROGRAM " " + mode + " " + dir_ +
     "; echo EXIT=$?; sleep 60'");
  std::string pane;
  bool ended = manta::testing::eventually(
      [&] {
        pane = sh(tmux_ + "capture-pane -p -t p");
        return pane.find("EXIT=") != std::string::npos;
      },
      std::chrono::seconds(40));
  ASSERT_TRUE(ended) << pane;
  EXPECT_NE(pane.find("EXIT=0"), std::string::npos) << pane;
  EXPECT_NE(pane.find("sum 328350"), std::string::npos) << pane;
  // The last line the bar drew: everything done, and its rate and times.
  std::string expect = mode == "wait" ? "wait [" : mode + " [";
  EXPECT_NE(pane.find(expect), std::string::npos) << pane;
  EXPECT_NE(pane.find("100/100 100%"), std::string::npos) << pane;
  EXPECT_NE(pane.find("/s elapsed 0:0"), std::string::npos) << pane;
  EXPECT_NE(pane.find("eta 0:00"), std::string::npos) << pane;
}

INSTANTIATE_TEST_SUITE_P(waits, progress, ::testing::Values("map", "imap", "get", "wait"));

// Worker lines forwarded while the bar is drawn clear its line first and the
// bar is drawn again below them (as tqdm's write): no line holds both, and
// no stale bar is left behind each.
TEST_F(progress, worker_output_goes_above_the_bar) {
  sh(tmux_ + "new-session -d -x 120 -y 10 -s p '" PROGRESS_PROGRAM " chatty " + dir_ +
     "; echo EXIT=$?; sleep 60'");
  std::string pane;
  ASSERT_TRUE(manta::testing::eventually(
      [&] {
        pane = sh(tmux_ + "capture-pane -p -S - -t p");  // (the scrolled-off lines too)
        return pane.find("EXIT=") != std::string::npos;
      },
      std::chrono::seconds(40)))
      << pane;
  EXPECT_NE(pane.find("EXIT=0"), std::string::npos) << pane;
  std::istringstream lines(pane);
  int spoken = 0, bars = 0;
  for (std::string line; std::getline(lines, line);) {
    const bool worker = line.find("worker says") != std::string::npos;
    const bool bar = line.find("get [") != std::string::npos;
    spoken += worker;
    bars += bar;
    EXPECT_FALSE(worker && bar) << "a worker line on the bar's line: " << line << "\n" << pane;
    if (worker) {
      EXPECT_EQ(line.rfind("(pid=", 0), 0u) << line;
    }
  }
  EXPECT_EQ(spoken, 100) << pane;
  EXPECT_EQ(bars, 1) << "one bar at the end, none left behind: " << pane;
}

TEST(progress_off_a_terminal, stderr_in_a_file_gets_no_bar) {
  std::string dir = manta::testing::temp_path("progress-file");
  std::filesystem::create_directories(dir);
  std::string out = sh(std::string(PROGRESS_PROGRAM) + " map " + dir + " 2> " + dir + "/err.txt");
  EXPECT_NE(out.find("sum 328350"), std::string::npos) << out;
  std::ifstream in(dir + "/err.txt");
  std::stringstream err;
  err << in.rdbuf();
  EXPECT_EQ(err.str().find("100/100"), std::string::npos) << err.str();
  EXPECT_EQ(err.str().find('\r'), std::string::npos) << err.str();
  std::filesystem::remove_all(dir);
}

}  // namespace

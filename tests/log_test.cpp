// log_test.cpp: what MANTA_LOG makes the runtime say. The level is read once
// per process, so each case runs a child (this binary, a helper test) with it.
#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include <manta/manta.hpp>

#include "support.hpp"

namespace {

int add_one(int x) { return x + 1; }
MANTA_REMOTE(add_one);

std::string run_log_child(const std::string& level, const std::string& env = "") {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  return manta::testing::shell_output("env MANTA_OBSERVE_LOG_CHILD=1 MANTA_LOG=" + level + " " + env + " " + self +
                                          " --gtest_filter=observe_helper.log_child",
                                      60, true);
}

}  // namespace

TEST(observe_helper, log_child) {
  if (!std::getenv("MANTA_OBSERVE_LOG_CHILD")) GTEST_SKIP() << "runs only as a child of observe_log's tests";
  manta::init({.num_workers = 1});
  EXPECT_EQ(manta::get(manta::task(add_one).remote(1)), 2);
  manta::shutdown();
}

// MANTA_LOG=debug said almost nothing; it tells the lifecycle a person
// debugging needs (processes, dispatch, retries, spills, the cluster).
TEST(observe_log, debug_tells_the_runtimes_lifecycle) {
  const std::string out = run_log_child("debug");
  for (const char* expected : {"debug] runtime up: 1 workers", "debug] pool worker pid", "debug] dispatch 'add_one' to pid",
                               "debug] runtime stopping", "debug] runtime stopped"})
    EXPECT_NE(out.find(expected), std::string::npos) << expected << " missing from:\n" << out;
}

TEST(observe_log, an_unknown_level_is_refused_with_the_levels) {
  const std::string out = run_log_child("bogus");
  EXPECT_NE(out.find("MANTA_LOG=bogus is not a log level: use error, warn (the default), info, debug or trace"),
            std::string::npos)
      << out;
}

// MANTA_LOG_DIR was read nowhere: a runtime without options.log_dir always
// used /tmp/manta for worker logs, the spill file and its socket, and the
// tools looked there. It now sets the default of both (and `manta start
// --log-dir D -- ./app` passes D to the node's runtime through it).
TEST(observe_log, manta_log_dir_sets_the_default_log_dir_of_runtimes_and_tools) {
  const std::string dir = manta::testing::temp_path("log-dir-env");
  std::filesystem::remove_all(dir);
  const std::string out = run_log_child("debug", "MANTA_LOG_DIR=" + dir);
  EXPECT_NE(out.find("log_dir " + dir + ", socket " + dir + "/runtime-"), std::string::npos) << out;
  const std::string status =
      manta::testing::shell_output("env MANTA_LOG_DIR=" + dir + " " + MANTA_CLI_PATH + " status", 30, true);
  EXPECT_NE(status.find(dir), std::string::npos) << status;  // it looked there (and found none running)
  std::filesystem::remove_all(dir);
}


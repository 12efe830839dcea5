// dashboard_test.cpp: `manta dashboard` in front of a real runtime, loaded in
// headless Chromium (Debian's package) as a user would: the numbers on the page
// match `manta status --json`, the chart has points, the token is required,
// /metrics speaks Prometheus, and a screenshot is taken.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include <manta/version.hpp>

#include "support.hpp"

namespace {

using nlohmann::json;

int triple(int x) { return 3 * x; }
MANTA_REMOTE(triple);

struct Tally {
  int n = 0;
  int add(int k) { return n += k; }
};
MANTA_ACTOR(Tally, &Tally::add);

/// Runs a shell command, bounded by timeout(1); its stdout.
std::string run(const std::string& cmd) { return manta::testing::shell_output(cmd, 90, false); }

/// Chromium's --dump-dom escapes text: &quot; &amp; &lt; &gt; back to characters.
std::string decode_entities(std::string s) {
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"&quot;", "\""}, {"&lt;", "<"}, {"&gt;", ">"},
                                 {"&amp;", "&"}})
    for (std::size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size()) s.replace(at, from.size(), to);
  return s;
}

/// Bytes as the page shows them (IEC units, one decimal).
std::string iec(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  for (; b >= 1024 && u < 4; ++u) b /= 1024;
  char out[32];
  std::snprintf(out, sizeof out, u ? "%.1f %s" : "%.0f %s", b, units[u]);
  return out;
}

/// The text of the element with id `id` in a dumped DOM.
std::string element(const std::string& dom, const std::string& id) {
  std::smatch m;
  if (std::regex_search(dom, m, std::regex("id=\"" + id + "\"[^>]*>([^<]*)<"))) return m[1];
  return "<missing " + id + ">";
}

class dashboard : public manta::testing::runtime_fixture {
 protected:
  void SetUp() override {
    if (::system("command -v chromium > /dev/null 2>&1") != 0)
      GTEST_SKIP() << "chromium is not installed (tools/setup.sh installs it)";
    dir_ = manta::testing::temp_path("dashboard");
    start(2, {.log_dir = dir_});
  }
  void TearDown() override {
    if (board_ > 0) {
      ::kill(board_, SIGTERM);
      EXPECT_TRUE(manta::testing::eventually([&] { return ::waitpid(board_, nullptr, WNOHANG) == board_; }));
    }
    runtime_fixture::TearDown();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  /// Prometheus's own checker accepts a dumped /metrics page (tools/setup.sh
  /// --tests installs promtool).
  void expect_promtool_accepts(const std::string& dumped) {
    const auto from = dumped.find("# HELP"), to = dumped.find("</pre>");
    ASSERT_NE(from, std::string::npos) << dumped;
    const std::string body = decode_entities(dumped.substr(from, to - from));
    const std::string file = dir_ + "/metrics.txt";
    std::ofstream(file) << body;
    const std::string promtool = manta::testing::shell_output("sh -c 'command -v promtool'", 10, false);
    ASSERT_FALSE(promtool.empty()) << "promtool is missing: run tools/setup.sh --tests";
    const std::string checked =
        manta::testing::shell_output("promtool check metrics < " + file + " 2>&1; echo rc=$?", 30, false);
    EXPECT_NE(checked.find("rc=0"), std::string::npos) << checked << "\n" << body;
  }
  /// Starts `manta dashboard` and returns the URL it prints.
  std::string start_board() {
    int out[2];
    if (::pipe(out) != 0) return {};
    board_ = ::fork();
    if (board_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::close(out[0]);
      ::close(out[1]);
      ::execl(MANTA_CLI_PATH, MANTA_CLI_PATH, "dashboard", "--log-dir", dir_.c_str(), "--port", "0", nullptr);
      ::_exit(127);
    }
    ::close(out[1]);
    std::string line;
    char c;
    pollfd p{out[0], POLLIN, 0};
    while (line.find('\n') == std::string::npos && ::poll(&p, 1, 20000) > 0 && ::read(out[0], &c, 1) == 1) line += c;
    ::close(out[0]);
    auto at = line.find("http://");
    return at == std::string::npos ? std::string() : line.substr(at, line.find('\n') - at);
  }
  std::string chromium(const std::string& args) {
    return run("chromium --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage --user-data-dir=" + dir_ +
               "/chromium " + args + " 2>/dev/null");
  }
  std::string dir_;
  pid_t board_ = -1;
};

TEST_F(dashboard, the_page_shows_the_numbers_of_manta_status_and_a_chart_with_points) {
  std::vector<manta::object_ref<int>> refs;
  for (int i = 0; i < 25; ++i) refs.push_back(manta::task(triple).remote(i));
  for (auto& r : refs) manta::get(r);
  auto big = manta::put(std::vector<double>(1 << 18, 1.0));
  auto tally = manta::actor<Tally>().name("the-tally").remote();
  ASSERT_EQ(manta::get(tally.task(&Tally::add).remote(2)), 2);
  std::string url = start_board();
  ASSERT_FALSE(url.empty()) << "manta dashboard printed no URL";

  // Four seconds of the page's own time: it polls every second.
  std::string dom = chromium("--virtual-time-budget=4000 --dump-dom '" + url + "'");
  json status = json::parse(run(std::string(MANTA_CLI_PATH) + " status --json --log-dir " + dir_));
  EXPECT_EQ(element(dom, "tasks-finished"), std::to_string(status["tasks"]["finished"].get<long>())) << dom;
  EXPECT_EQ(element(dom, "tasks-failed"), "0");
  EXPECT_EQ(element(dom, "objects-count"), std::to_string(status["objects"]["count"].get<long>()));
  EXPECT_EQ(element(dom, "arena-used"), iec(status["objects"]["arena_used_bytes"].get<double>()));
  EXPECT_NE(dom.find("<td>2.0 MiB</td>"), std::string::npos) << "the big object's size, in IEC units";
  EXPECT_EQ(element(dom, "driver-pid"), "(driver pid " + std::to_string(::getpid()) + ")");
  EXPECT_EQ(element(dom, "error"), "");
  EXPECT_GE(std::stoi(element(dom, "chart-points")), 2) << "the chart has no points";
  EXPECT_NE(dom.find("<td>worker</td>"), std::string::npos) << "the processes table is empty";
  EXPECT_NE(dom.find("<td>the-tally</td><td>alive</td>"), std::string::npos) << "the actors table: " << dom;
  EXPECT_NE(dom.find("<td>triple</td><td>25</td><td>0</td><td>0</td>"), std::string::npos) << "the functions table: " << dom;
  EXPECT_NE(dom.find("<td>Tally</td><td>1</td><td>0</td><td>0</td>"), std::string::npos) << "its constructor: " << dom;

  std::string shot = dir_ + "/dashboard.png";
  chromium("--virtual-time-budget=3000 --window-size=1200,1000 --screenshot=" + shot + " '" + url + "'");
  std::ifstream png(shot, std::ios::binary);
  ASSERT_TRUE(png.good()) << "no screenshot";
  std::string head(8, '\0');
  png.read(head.data(), 8);
  EXPECT_EQ(head, "\x89PNG\r\n\x1a\n");
  EXPECT_GT(std::filesystem::file_size(shot), 10000u);
  if (const char* keep = std::getenv("MANTA_KEEP_SCREENSHOT")) std::filesystem::copy_file(shot, keep,
      std::filesystem::copy_options::overwrite_existing);
}

TEST_F(dashboard, every_url_needs_the_token_and_metrics_speak_prometheus) {
  for (int i = 0; i < 5; ++i) manta::get(manta::task(triple).remote(i));
  std::vector<manta::object_ref<int>> kept;
  for (int i = 0; i < 3; ++i) kept.push_back(manta::put(i));
  std::string url = start_board();
  ASSERT_FALSE(url.empty());
  std::string base = url.substr(0, url.find('?'));
  std::string token = url.substr(url.find("token=") + 6);
  EXPECT_NE(chromium("--dump-dom '" + base + "'").find("a token is needed"), std::string::npos);
  EXPECT_NE(chromium("--dump-dom '" + base + "?token=" + std::string(token.size(), '0') + "'").find("a token is needed"),
            std::string::npos);
  std::string metrics = chromium("--dump-dom '" + base + "metrics?token=" + token + "'");
  EXPECT_NE(metrics.find("# TYPE manta_tasks_finished_total counter"), std::string::npos) << metrics;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(metrics, m, std::regex("manta_tasks_finished_total (\\d+)"))) << metrics;
  EXPECT_EQ(std::stoul(m[1]), manta::detail::counters().tasks_finished);
  EXPECT_NE(metrics.find("manta_resource_capacity{resource=\"CPU\"} 2"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("manta_function_tasks_finished_total{function=\"triple\"} 5"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("manta_task_duration_seconds_count{function=\"triple\"} 5"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("manta_task_duration_seconds_bucket{function=\"triple\",le=\"+Inf\"} 5"),
            std::string::npos) << metrics;
  expect_promtool_accepts(metrics);
  std::string api = chromium("--dump-dom '" + base + "api/memory?token=" + token + "'");
  EXPECT_NE(api.find("\"summary\""), std::string::npos) << api;
  // What the page asks for: the largest few, not every object.
  std::string few = chromium("--dump-dom '" + base + "api/memory?limit=2&sort=size&token=" + token + "'");
  std::smatch listed;
  ASSERT_TRUE(std::regex_search(few, listed, std::regex("\"listed\":(\\d+)"))) << few;
  EXPECT_EQ(listed[1], "2") << few;
  EXPECT_NE(chromium("--dump-dom '" + base + "api/memory?limit=x&token=" + token + "'").find("is not limit=N"),
            std::string::npos);
}

// Scraped for the program's whole life without a dashboard started by hand.
TEST_F(dashboard, the_runtime_serves_its_own_metrics_under_MANTA_METRICS_ADDRESS) {
  manta::shutdown();
  ::setenv("MANTA_METRICS_ADDRESS", "127.0.0.1:0", 1);
  manta::init({.num_workers = 2, .log_dir = dir_});
  ::unsetenv("MANTA_METRICS_ADDRESS");
  pids_ = manta::detail::runtime_process_ids();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(manta::get(manta::task(triple).remote(i)), 3 * i);
  json status = json::parse(run(std::string(MANTA_CLI_PATH) + " status --json --log-dir " + dir_));
  const std::string at = status["runtime"]["metrics_address"].get<std::string>();
  ASSERT_EQ(at.rfind("127.0.0.1:", 0), 0u) << status.dump();
  std::string metrics = chromium("--dump-dom 'http://" + at + "/metrics'");
  EXPECT_NE(metrics.find("manta_tasks_finished_total 4"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("manta_function_tasks_finished_total{function=\"triple\"} 4"), std::string::npos) << metrics;
  expect_promtool_accepts(metrics);
  EXPECT_NE(chromium("--dump-dom 'http://" + at + "/other'").find("only /metrics"), std::string::npos);

  // An address it cannot use: a warning, and the runtime works on.
  manta::shutdown();
  ::setenv("MANTA_METRICS_ADDRESS", "not-an-address", 1);
  manta::init({.num_workers = 2, .log_dir = dir_});
  ::unsetenv("MANTA_METRICS_ADDRESS");
  pids_ = manta::detail::runtime_process_ids();
  EXPECT_EQ(manta::get(manta::task(triple).remote(5)), 15);
}

// Each mistake gets one clear line and a non-zero exit: no URL printed for a
// runtime that is not there, no Boost source location for a taken port.
TEST_F(dashboard, its_mistakes_say_what_is_wrong_and_exit_non_zero) {
  const std::string cli = MANTA_CLI_PATH;
  std::string out = run(cli + " dashboard --address " + dir_ + "/no-such.sock --port 0 2>&1; echo rc=$?");
  EXPECT_EQ(out.find("dashboard: http"), std::string::npos) << out;
  EXPECT_NE(out.find("no runtime answers at"), std::string::npos) << out;
  EXPECT_NE(out.find("rc=1"), std::string::npos) << out;
  out = run(cli + " dashboard --address 127.0.0.1:1 2>&1; echo rc=$?");
  EXPECT_NE(out.find("is a cluster's head"), std::string::npos) << out;
  EXPECT_NE(out.find("rc=1"), std::string::npos) << out;

  int taken = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(taken, reinterpret_cast<sockaddr*>(&at), sizeof at), 0);
  ASSERT_EQ(::listen(taken, 1), 0);
  socklen_t len = sizeof at;
  ::getsockname(taken, reinterpret_cast<sockaddr*>(&at), &len);
  const std::string port = std::to_string(ntohs(at.sin_port));
  out = run(cli + " dashboard --log-dir " + dir_ + " --port " + port + " 2>&1; echo rc=$?");
  ::close(taken);
  EXPECT_NE(out.find("cannot serve on 127.0.0.1:" + port + ": Address already in use"), std::string::npos) << out;
  EXPECT_EQ(out.find(".hpp"), std::string::npos) << "a source location: " << out;
  EXPECT_NE(out.find("rc=1"), std::string::npos) << out;

  out = run(cli + " --version 2>&1; echo rc=$?");
  EXPECT_NE(out.find(std::string("manta ") + MANTA_VERSION + "\nrc=0"), std::string::npos) << out;
  out = run(cli + " 2>&1; echo rc=$?");  // alone: the help
  EXPECT_NE(out.find("Usage:"), std::string::npos) << out;
  EXPECT_NE(out.find("dashboard"), std::string::npos) << out;
  EXPECT_NE(out.find("rc=0"), std::string::npos) << out;
}

TEST_F(dashboard, the_dashboard_ends_with_its_runtime) {
  std::string url = start_board();
  ASSERT_FALSE(url.empty());
  manta::shutdown();  // its socket goes
  EXPECT_TRUE(manta::testing::eventually([&] { return ::waitpid(board_, nullptr, WNOHANG) == board_; }));
  board_ = -1;
  manta::init({.num_workers = 2, .log_dir = dir_});
  pids_ = manta::detail::runtime_process_ids();
}

}  // namespace

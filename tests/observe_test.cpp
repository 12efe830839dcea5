// observe_test.cpp: the runtime's control socket and the manta command line
// (status, memory, timeline), run as a user runs them, against real runtimes.
#include <signal.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "observe/control_socket.hpp"
#include "support.hpp"

namespace {

using nlohmann::json;
using manta::testing::eventually;

std::vector<double> make_big(int n) { return std::vector<double>(static_cast<std::size_t>(n), 2.0); }
MANTA_REMOTE(make_big);
int add_one(int x) { return x + 1; }
MANTA_REMOTE(add_one);
manta::object_ref<int> put_in_worker(int x) { return manta::put(x); }
MANTA_REMOTE(put_in_worker);
int fail_always(int) { throw std::runtime_error("no"); }
MANTA_REMOTE(fail_always);
int sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
MANTA_REMOTE(sleep_ms);
/// Leaves `path` once it runs (the test then knows it started), then sleeps.
int mark_and_sleep(std::string path, int ms) {
  std::ofstream(path) << "started";
  return sleep_ms(ms);
}
MANTA_REMOTE(mark_and_sleep);

int chatty(int x) {
  std::printf("out line %d from %d\n", x, ::getpid());
  std::fprintf(stderr, "err line %d\n", x);
  return ::getpid();
}
MANTA_REMOTE(chatty);

/// Prints `lines` numbered lines of 100 bytes each.
int print_lines(int lines) {
  for (int i = 0; i < lines; ++i) std::printf("line %08d %s\n", i, std::string(85, 'x').c_str());
  std::fflush(stdout);
  return ::getpid();
}
MANTA_REMOTE(print_lines);

using manta::testing::file_text;

/// A runtime with its own log_dir (returned), started with environment
/// variable `name` set to `value` (the log limits are read at init).
std::string start_with(const std::string& stem, const char* name, const char* value, int workers) {
  std::string dir = manta::testing::temp_path(stem);
  std::filesystem::create_directories(dir);
  ::setenv(name, value, 1);
  manta::init({.num_workers = workers, .log_dir = dir});
  ::unsetenv(name);
  return dir;
}

// A real fault (UBSan would stop a null store first: not checked here).
__attribute__((noinline, no_sanitize("undefined"))) int crash_in_task(int depth) {
  if (depth > 0) return crash_in_task(depth - 1) + 1;
  *static_cast<volatile int*>(nullptr) = 1;  // SIGSEGV
  return 0;
}
MANTA_REMOTE(crash_in_task);

int never_registered(int x) { return x; }  // no MANTA_REMOTE: on purpose

__attribute__((noinline)) void deep_thrower(int x) {
  if (x > 0) throw std::invalid_argument("deep " + std::to_string(x));
}
int throws_deep(int x) {
  try {
    throw std::runtime_error("caught inside the task");  // not the one that escapes
  } catch (const std::runtime_error&) {
  }
  deep_thrower(x);
  return 0;
}
MANTA_REMOTE(throws_deep);
int throws_in_library(int x) { return std::vector<int>{}.at(static_cast<std::size_t>(x)); }
MANTA_REMOTE(throws_in_library);

struct tally {
  int n = 0;
  int add(int k) { return n += k; }
  int forgotten(int k) { return k; }  // not in MANTA_ACTOR: on purpose
  int nap(int ms) { return sleep_ms(ms); }
};
MANTA_ACTOR(tally, &tally::add, &tally::nap);

}  // namespace

/// Outside the anonymous namespace, as most programs' actors are (its frames'
/// names are the ones GCC's demangler failed on).
struct refuser {
  int refuse(int k) {
    if (k > 0) throw std::invalid_argument("refused " + std::to_string(k));
    return k;
  }
};
MANTA_ACTOR(refuser, &refuser::refuse);

namespace {

struct cli_result {
  int rc = -1;
  std::string out;
};

/// Runs the manta command line (bounded by timeout(1) besides its own limits).
cli_result run_cli(const std::string& args) {
  std::string cmd = "timeout 30 " MANTA_CLI_PATH " " + args + " 2>&1";
  cli_result r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int status = ::pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

json cli_json(const std::string& args) {
  cli_result r = run_cli(args);
  EXPECT_EQ(r.rc, 0) << r.out;
  return json::parse(r.out);
}

std::string hex(const manta::object_id& id) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(id.hi),
                static_cast<unsigned long long>(id.lo));
  return buf;
}

class observe : public manta::testing::runtime_fixture {
 protected:
  void SetUp() override {
    dir_ = manta::testing::temp_path("observe");
    start(2, {.log_dir = dir_});
  }
  void TearDown() override {
    runtime_fixture::TearDown();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string at() const { return "--log-dir " + dir_; }
  std::string dir_;
};

TEST_F(observe, the_runtime_answers_on_a_socket_only_its_user_can_open) {
  auto found = manta::observe::find_runtimes(dir_);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].pid, ::getpid());
  struct stat st {};
  ASSERT_EQ(::stat(found[0].socket.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  json bad = json::parse(manta::observe::ask(found[0].socket, "frob\"\\nicate"));
  EXPECT_NE(bad["error"].get<std::string>().find("unknown request 'frob\"\\nicate'"), std::string::npos);
  json too_long = json::parse(manta::observe::ask(found[0].socket, std::string(10000, 'x')));
  EXPECT_NE(too_long["error"].get<std::string>().find("request longer than"), std::string::npos);
}

TEST_F(observe, status_matches_what_the_program_made) {
  auto actor = manta::actor<tally>().name("counts").remote();
  ASSERT_EQ(manta::get(actor.task(&tally::add).remote(3)), 3);
  std::vector<manta::object_ref<int>> refs;
  for (int i = 0; i < 10; ++i) refs.push_back(manta::task(add_one).remote(i));
  for (auto& r : refs) manta::get(r);
  auto failed = manta::task(fail_always).max_retries(0).remote(1);
  EXPECT_THROW(manta::get(failed), manta::task_error);
  auto big = manta::put(make_big(1 << 18));  // 2 MB: in the arena

  json s = cli_json("status --json " + at());
  EXPECT_EQ(s["runtime"]["pid"].get<int>(), ::getpid());
  EXPECT_EQ(s["pool_workers"].get<int>(), 2);
  int workers = 0, actors = 0;
  for (const auto& p : s["processes"]) {
    if (p["kind"] == "worker") ++workers;
    if (p["kind"] == "actor") {
      ++actors;
      EXPECT_EQ(p["actor"].get<std::string>(), "tally 'counts'");
    }
  }
  EXPECT_EQ(workers, 2);
  EXPECT_EQ(actors, 1);
  ASSERT_EQ(s["actors"].size(), 1u);
  EXPECT_EQ(s["actors"][0]["name"], "counts");
  EXPECT_EQ(s["actors"][0]["state"], "alive");
  auto counters = manta::detail::counters();
  EXPECT_EQ(s["tasks"]["finished"].get<std::uint64_t>(), counters.tasks_finished);
  EXPECT_GE(s["tasks"]["finished"].get<std::uint64_t>(), 11u);
  EXPECT_EQ(s["tasks"]["failed"].get<std::uint64_t>(), 1u);
  EXPECT_EQ(s["tasks"]["running"].get<int>(), 0);
  EXPECT_EQ(s["tasks"]["queued"].get<int>(), 0);
  EXPECT_EQ(s["objects"]["count"].get<std::size_t>(), manta::detail::object_count());
  EXPECT_EQ(s["objects"]["arena_used_bytes"].get<std::size_t>(), manta::detail::arena_used_bytes());
  EXPECT_EQ(s["resources"]["total"]["CPU"].get<double>(), 2.0);

  cli_result text = run_cli("status " + at());
  EXPECT_EQ(text.rc, 0);
  EXPECT_NE(text.out.find("tally 'counts'"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("1 failed"), std::string::npos) << text.out;
}

TEST_F(observe, status_shows_running_and_queued_tasks) {
  // Two workers each run one sleeper; the rest queue, or wait for an argument.
  std::vector<manta::object_ref<int>> refs;
  for (int i = 0; i < 6; ++i) refs.push_back(manta::task(sleep_ms).remote(1500));
  auto after = manta::task(add_one).remote(refs.back());
  ASSERT_TRUE(eventually([&] {
    json s = cli_json("status --json " + at());
    return s["tasks"]["running"].get<int>() == 2 && s["busy_workers"].get<int>() == 2;
  }));
  json s = cli_json("status --json " + at());
  EXPECT_EQ(s["tasks"]["running"].get<int>() + s["tasks"]["queued"].get<int>(), 6) << s.dump();
  EXPECT_EQ(s["tasks"]["waiting_for_arguments"].get<int>(), 1);
  for (const auto& p : s["processes"]) {
    if (p["kind"] != "worker") continue;
    EXPECT_EQ(p["state"], "busy");
    EXPECT_EQ(p["current"][0], "sleep_ms");
  }
  for (auto& r : refs) manta::cancel(r);
}

/// The object of `ref` in a memory report, or null.
const json* find_object(const json& m, const manta::object_id& id) {
  for (const auto& o : m["objects"])
    if (o["id"] == hex(id)) return &o;
  return nullptr;
}

TEST_F(observe, memory_lists_every_object_with_its_owner_and_maker) {
  auto put = manta::put(make_big(1 << 18));                          // 2 MB, put by the driver
  auto made = manta::task(make_big).remote(1 << 17);                 // 1 MB, made by a worker
  auto small = manta::put(7);                                        // inline: in the driver's heap
  auto nested = manta::task(put_in_worker).remote(11);               // a ref a worker made
  auto pending = manta::task(sleep_ms).remote(3000);                 // not made yet
  ASSERT_EQ(manta::get(made).size(), std::size_t{1} << 17);
  auto inner = manta::get(nested);
  ASSERT_EQ(manta::get(inner), 11);
  json m = cli_json("memory --json --limit 0 " + at());
  const json* from_put = find_object(m, put.id());
  const json* from_task = find_object(m, made.id());
  ASSERT_TRUE(from_put) << m.dump();
  ASSERT_TRUE(from_task) << m.dump();
  const json* small_one = find_object(m, small.id());
  ASSERT_TRUE(small_one) << m.dump();
  EXPECT_EQ((*small_one)["where"], "driver heap");
  EXPECT_GT((*small_one)["size"].get<int>(), 0);
  EXPECT_EQ((*small_one)["made_by"], "put");
  EXPECT_EQ((*small_one)["owner_pid"].get<int>(), ::getpid());
  const json* from_worker = find_object(m, inner.id());
  ASSERT_TRUE(from_worker) << "an id a worker made is listed: " << m.dump();
  EXPECT_EQ((*from_worker)["where"], "driver heap");
  const json* waiting = find_object(m, pending.id());
  ASSERT_TRUE(waiting) << m.dump();
  EXPECT_EQ((*waiting)["where"], "not made yet");
  EXPECT_EQ((*waiting)["made_by"].get<std::string>().rfind("task sleep_ms (", 0), 0u) << *waiting;
  // Every object of the directory, no more, no fewer: twice (the second scan starts where the first found life).
  for (int scan = 0; scan < 2; ++scan) {
    json again = cli_json("memory --json --limit 0 " + at());
    EXPECT_EQ(again["summary"]["listed"].get<std::size_t>(), manta::detail::object_count()) << again.dump();
  }
  // Read before the cancel: it kills the worker running sleep_ms, which may be the one that made make_big's result.
  auto pids = manta::detail::runtime_process_ids();
  manta::cancel(pending);
  EXPECT_GE((*from_put)["size"].get<std::size_t>(), std::size_t{8} << 18);
  EXPECT_EQ((*from_put)["made_by"], "put");
  EXPECT_EQ((*from_put)["owner_pid"].get<int>(), ::getpid());
  EXPECT_EQ((*from_put)["where"], "arena");
  EXPECT_GE((*from_put)["references"].get<int>(), 1);
  EXPECT_EQ((*from_task)["made_by"], "task make_big");
  EXPECT_NE(std::find(pids.begin(), pids.end(), (*from_task)["owner_pid"].get<int>()), pids.end());
  EXPECT_EQ(m["summary"]["listed"].get<std::size_t>(), m["objects"].size());
  cli_result text = run_cli("memory " + at());
  EXPECT_NE(text.out.find(hex(put.id())), std::string::npos) << text.out;
}

TEST_F(observe, memory_scans_stay_exact_while_objects_come_and_go) {
  std::vector<manta::object_ref<int>> kept;  // one early object of every round lives on
  for (int round = 0; round < 5; ++round) {
    std::vector<manta::object_ref<int>> refs;
    for (int i = 0; i < 2000; ++i) refs.push_back(manta::task(add_one).remote(i));
    auto nested = manta::task(put_in_worker).remote(round);
    manta::get(refs);
    kept.push_back(refs[static_cast<std::size_t>(round) * 7]);
    kept.push_back(manta::get(nested));  // made by a worker
    refs.clear();
    json m = cli_json("memory --json --limit 0 " + at());
    EXPECT_EQ(m["summary"]["listed"].get<std::size_t>(), manta::detail::object_count()) << "round " << round;
    for (auto& r : kept) EXPECT_TRUE(find_object(m, r.id())) << "round " << round;
  }
}

// 100k objects made the default listing 100k lines: it shows the largest few
// and the totals, and narrows or groups on request.
TEST_F(observe, memory_lists_the_largest_first_and_groups_on_request) {
  std::vector<manta::object_ref<int>> small;
  for (int i = 0; i < 3000; ++i) small.push_back(manta::put(i));
  auto big = manta::put(make_big(1 << 18));
  auto made = manta::task(make_big).remote(1 << 16);
  ASSERT_EQ(manta::get(made).size(), std::size_t{1} << 16);
  const std::size_t count = manta::detail::object_count();

  json m = cli_json("memory --json --limit 5 " + at());
  ASSERT_EQ(m["objects"].size(), 5u) << m.dump();
  EXPECT_EQ(m["summary"]["listed"].get<std::size_t>(), 5u);
  EXPECT_EQ(m["summary"]["total"].get<std::size_t>(), count);
  EXPECT_EQ(m["objects"][0]["id"], hex(big.id())) << "the largest first";
  EXPECT_EQ(m["objects"][1]["id"], hex(made.id()));
  for (std::size_t i = 1; i < m["objects"].size(); ++i)
    EXPECT_GE(m["objects"][i - 1]["size"].get<std::uint64_t>(), m["objects"][i]["size"].get<std::uint64_t>());

  json by_maker = cli_json("memory --json --group-by made-by " + at());
  std::map<std::string, std::size_t> groups;
  for (const auto& g : by_maker["groups"]) groups[g["key"].get<std::string>()] = g["count"].get<std::size_t>();
  EXPECT_GE(groups["put"], 3001u) << by_maker["groups"].dump();
  EXPECT_EQ(groups["task make_big"], 1u) << by_maker["groups"].dump();
  EXPECT_EQ(by_maker["groups"][0]["key"], "put") << "the group holding the most bytes first";

  json oldest = cli_json("memory --json --sort age --limit 3 " + at());
  EXPECT_EQ(oldest["objects"][0]["id"], hex(small[0].id())) << oldest.dump();

  cli_result text = run_cli("memory " + at());  // the default: 20 rows and the totals
  EXPECT_EQ(text.rc, 0) << text.out;
  EXPECT_NE(text.out.find("(20 of " + std::to_string(count) + " objects, the largest"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("2.0 MiB"), std::string::npos) << "sizes in IEC units: " << text.out;
  cli_result summary = run_cli("memory --summary --group-by where " + at());
  EXPECT_EQ(summary.out.find(hex(big.id())), std::string::npos) << summary.out;
  EXPECT_NE(summary.out.find("BY where"), std::string::npos) << summary.out;
  EXPECT_NE(summary.out.find(std::to_string(count) + " objects:"), std::string::npos) << summary.out;
  EXPECT_NE(run_cli("memory --sort bogus " + at()).rc, 0);
}

// As `ray summary tasks`: per function, what finished, failed and runs, and
// how long runs took.
TEST_F(observe, summary_counts_each_functions_tasks_and_run_times) {
  std::vector<manta::object_ref<int>> ok;
  for (int i = 0; i < 30; ++i) ok.push_back(manta::task(add_one).remote(i));
  for (auto& r : ok) manta::get(r);
  std::vector<manta::object_ref<int>> bad;
  for (int i = 0; i < 3; ++i) bad.push_back(manta::task(fail_always).remote(i));
  for (auto& r : bad) EXPECT_THROW(manta::get(r), manta::task_error);
  auto slow = manta::task(sleep_ms).remote(5000);
  json j;
  std::map<std::string, json> by_name;
  ASSERT_TRUE(manta::testing::eventually([&] {  // once sleep_ms is on a worker
    j = cli_json("summary --json " + at());
    by_name.clear();
    for (const auto& f : j["functions"]) by_name[f["name"].get<std::string>()] = f;
    return by_name.count("sleep_ms") && by_name["sleep_ms"]["running"] == 1;
  })) << j.dump();
  ASSERT_TRUE(by_name.count("add_one")) << j.dump();
  EXPECT_EQ(by_name["add_one"]["finished"], 30);
  EXPECT_EQ(by_name["add_one"]["failed"], 0);
  EXPECT_EQ(by_name["add_one"]["runs"], 30);
  std::uint64_t in_buckets = 0;
  for (const auto& b : by_name["add_one"]["buckets"]) in_buckets += b.get<std::uint64_t>();
  EXPECT_EQ(in_buckets, 30u);
  EXPECT_GE(by_name["add_one"]["p95_s"].get<double>(), 0.0);
  EXPECT_EQ(by_name["fail_always"]["failed"], 3) << j.dump();
  EXPECT_EQ(by_name["fail_always"]["finished"], 0);
  EXPECT_EQ(by_name["sleep_ms"]["running"], 1) << j.dump();
  EXPECT_EQ(j["functions"][0]["name"], "add_one") << "the busiest first";

  cli_result text = run_cli("summary " + at());
  EXPECT_EQ(text.rc, 0) << text.out;
  EXPECT_NE(text.out.find("FUNCTION"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("add_one"), std::string::npos) << text.out;
  manta::cancel(slow);
}

TEST_F(observe, memory_shows_spilled_objects_where_they_are) {
  manta::shutdown();
  manta::init({.num_workers = 1, .object_store_bytes = 8 << 20, .log_dir = dir_});
  pids_ = manta::detail::runtime_process_ids();
  std::vector<manta::object_ref<std::vector<double>>> refs;
  for (int i = 0; i < 4; ++i) refs.push_back(manta::put(make_big(3 << 17)));  // 3 MB each in 8 MB
  ASSERT_GE(manta::detail::spilling().spilled_now, 1u);
  json m = cli_json("memory --json --limit 0 " + at());
  int spilled = 0;
  for (const auto& o : m["objects"]) spilled += o["where"] == "spill file";
  EXPECT_EQ(static_cast<std::uint64_t>(spilled), manta::detail::spilling().spilled_now);
  EXPECT_EQ(m["objects"].size(), 4u);
}

TEST_F(observe, each_worker_keeps_its_output_in_a_log_file) {
  int pid = manta::get(manta::task(chatty).remote(42));
  std::string path = dir_ + "/worker-" + std::to_string(pid) + ".log";
  std::string text;
  EXPECT_TRUE(eventually([&] {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
    return text.find("out line 42 from " + std::to_string(pid)) != std::string::npos &&
           text.find("err line 42") != std::string::npos;
  })) << path << ": " << text;
  EXPECT_EQ(text.find("(pid="), std::string::npos) << "the log keeps the output as written";
}

TEST(observe_alone, a_workers_log_turns_old_at_MANTA_LOG_FILE_MB_so_a_process_keeps_at_most_twice_that) {
  const std::string dir = start_with("observe-rotate", "MANTA_LOG_FILE_MB", "1", 1);
  const int lines = 30000;  // 3 MB
  int pid = manta::get(manta::task(print_lines).remote(lines));
  const std::string log = dir + "/worker-" + std::to_string(pid) + ".log";
  char last[32];
  std::snprintf(last, sizeof last, "line %08d ", lines - 1);
  EXPECT_TRUE(eventually([&] { return file_text(log).find(last) != std::string::npos; })) << log;
  EXPECT_LE(std::filesystem::file_size(log), 1u << 20);
  EXPECT_LE(std::filesystem::file_size(log + ".old"), 1u << 20);
  // The two files hold the newest lines, without a gap between them.
  std::string old_text = file_text(log + ".old"), text = file_text(log);
  ASSERT_GE(old_text.size(), 100u);
  int last_old = std::atoi(old_text.c_str() + old_text.size() - 100 + 5);
  char next[32];
  std::snprintf(next, sizeof next, "line %08d ", last_old + 1);
  EXPECT_EQ(text.rfind(next, 0), 0u) << text.substr(0, 100);
  EXPECT_EQ(manta::get(manta::task(add_one).remote(1)), 2) << "the runtime goes on";
  manta::shutdown();
  std::filesystem::remove_all(dir);
}

TEST(observe_alone, logs_nobody_writes_are_removed_oldest_first_while_the_directory_holds_more_than_MANTA_LOG_DIR_MB) {
  std::string dir = manta::testing::temp_path("observe-prune");
  std::filesystem::create_directories(dir);
  auto make = [&](const std::string& name, int age_s) {
    std::ofstream(dir + "/" + name) << std::string(400 << 10, 'x');
    std::filesystem::last_write_time(dir + "/" + name,
                                     std::filesystem::file_time_type::clock::now() - std::chrono::seconds(age_s));
  };
  make("worker-100000.log", 400);  // the oldest, but another runtime still writes it
  make("worker-100001.log", 300);
  make("worker-100002.log.old", 200);
  make("worker-100003.log", 100);
  make("notes.txt", 500);  // not a worker log: never touched
  int held = ::open((dir + "/worker-100000.log").c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(held, 0);
  ASSERT_EQ(::flock(held, LOCK_SH), 0);
  ::setenv("MANTA_LOG_DIR_MB", "1", 1);
  manta::init({.num_workers = 1, .log_dir = dir});
  ::unsetenv("MANTA_LOG_DIR_MB");
  auto there = [&](const char* name) { return std::filesystem::exists(dir + "/" + name); };
  EXPECT_TRUE(eventually([&] { return !there("worker-100001.log") && !there("worker-100002.log.old"); }));
  EXPECT_TRUE(there("worker-100000.log")) << "a log somebody writes stays";
  EXPECT_TRUE(there("worker-100003.log")) << "the newest stays: 800 KB are within 1 MB";
  EXPECT_TRUE(there("notes.txt"));
  // The runtime's own logs are held while their processes live.
  int pid = manta::get(manta::task(chatty).remote(7));
  const std::string own = dir + "/worker-" + std::to_string(pid) + ".log";
  EXPECT_TRUE(eventually([&] { return file_text(own).find("out line 7") != std::string::npos; }));
  int probe = ::open(own.c_str(), O_RDONLY);
  ASSERT_GE(probe, 0);
  EXPECT_NE(::flock(probe, LOCK_EX | LOCK_NB), 0) << "a live process's log is locked against pruning";
  ::close(probe);
  manta::shutdown();
  ::close(held);
  std::filesystem::remove_all(dir);
}

TEST(observe_alone, a_runtime_that_stops_leaves_its_logs_within_MANTA_LOG_DIR_MB) {
  const std::string dir = start_with("observe-prune-at-stop", "MANTA_LOG_DIR_MB", "1", 2);
  // The workers print 1.6 MB in all: logs held while they live.
  std::vector<manta::object_ref<int>> refs;
  for (int i = 0; i < 8; ++i) refs.push_back(manta::task(print_lines).remote(2000));
  std::set<int> pids;
  for (int pid : manta::get(refs)) pids.insert(pid);
  manta::shutdown();
  std::uintmax_t total = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir))
    if (f.path().filename().string().rfind("worker-", 0) == 0) total += f.file_size();
  EXPECT_LE(total, 1u << 20) << pids.size() << " workers printed";
  std::filesystem::remove_all(dir);
}

TEST_F(observe, a_worker_crash_carries_the_crashing_threads_stack) {
  try {
    manta::get(manta::task(crash_in_task).max_retries(0).remote(3));
    FAIL() << "the task did not crash";
  } catch (const manta::worker_crashed_error& e) {
    EXPECT_EQ(e.signal(), SIGSEGV);
    EXPECT_NE(e.stack().find("crash_in_task"), std::string::npos) << e.stack();
    if (std::getenv("MANTA_SHOW_STACK")) std::fprintf(stderr, "%s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("stack of the crashing thread:"), std::string::npos) << e.what();
  }
  // The dump was read and removed; the runtime goes on.
  for (const auto& f : std::filesystem::directory_iterator(dir_)) EXPECT_NE(f.path().extension(), ".stack");
  EXPECT_EQ(manta::get(manta::task(add_one).remote(1)), 2);
}

TEST_F(observe, a_worker_killed_from_outside_has_no_stack_to_report) {
  auto slow = manta::task(sleep_ms).max_retries(0).remote(20000);
  auto pids = manta::detail::runtime_process_ids();
  ASSERT_TRUE(eventually([&] { return cli_json("status --json " + at())["tasks"]["running"] == 1; }));
  for (std::size_t i = 1; i < pids.size(); ++i) ::kill(pids[i], SIGKILL);
  try {
    manta::get(slow, std::chrono::seconds(20));
    FAIL();
  } catch (const manta::worker_crashed_error& e) {
    EXPECT_EQ(e.signal(), SIGKILL);
    EXPECT_TRUE(e.stack().empty()) << e.stack();
  }
}

TEST_F(observe, a_task_error_carries_the_stack_where_its_exception_was_thrown) {
  try {
    manta::get(manta::task(throws_deep).remote(3));
    FAIL();
  } catch (const manta::task_error& e) {
    EXPECT_EQ(e.remote_type(), "std::invalid_argument");
    const std::string& stack = e.stack();
    ASSERT_NE(stack.find("deep_thrower(int)"), std::string::npos) << stack;
    EXPECT_LT(stack.find("deep_thrower(int)"), stack.find("throws_deep(int)")) << stack;
    EXPECT_EQ(stack.find("run_task_body"), std::string::npos) << "the runtime's frames are cut: " << stack;
    EXPECT_NE(std::string(e.what()).find("thrown at:"), std::string::npos) << e.what();
    if (std::getenv("MANTA_SHOW_STACK")) std::fprintf(stderr, "%s\n", e.what());
  }
  // A failure that travels through a dependent keeps the root's stack.
  auto dependent = manta::task(add_one).remote(manta::task(throws_deep).remote(1));
  try {
    manta::get(dependent);
    FAIL();
  } catch (const manta::task_error& e) {
    EXPECT_NE(e.stack().find("deep_thrower(int)"), std::string::npos) << e.stack();
  }
  // An actor's method: every frame named (a generic lambda of the runtime's
  // left one mangled, which GCC's demangler cannot read).
  try {
    auto r = manta::actor<refuser>().remote();
    manta::get(r.task(&refuser::refuse).remote(2));
    FAIL();
  } catch (const manta::task_error& e) {
    EXPECT_NE(e.stack().find("refuser::refuse(int)"), std::string::npos) << e.stack();
    EXPECT_EQ(e.stack().find(" _Z"), std::string::npos) << "a mangled frame: " << e.stack();
  }
  // Thrown inside libstdc++ (vector::at, through its PLT): the task's frames are there.
  try {
    manta::get(manta::task(throws_in_library).remote(2));
    FAIL();
  } catch (const manta::task_error& e) {
    EXPECT_EQ(e.remote_type(), "std::out_of_range");
    EXPECT_NE(e.stack().find("throws_in_library(int)"), std::string::npos) << e.stack();
  }
}

TEST_F(observe, unregistered_functions_and_methods_are_named_in_the_error) {
  try {
    manta::task(never_registered).remote(1);
    FAIL();
  } catch (const manta::usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("'(anonymous namespace)::never_registered(int)' is not registered"),
              std::string::npos)
        << e.what();
  }
  auto t = manta::actor<tally>().remote();
  try {
    t.task(&tally::forgotten).remote(1);
    FAIL();
  } catch (const manta::usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("tally::forgotten(int)"), std::string::npos) << e.what();
  }
}

TEST_F(observe, the_tools_choose_among_several_runtimes_only_when_told) {
  // A second runtime answering in the same log_dir (a listener with this pid and another epoch).
  manta::observe::control_server other(manta::observe::socket_path(dir_, ::getpid(), 0x1234),
                                       [](const std::string&) { return std::string("{\"other\": true}"); });
  cli_result r = run_cli("status " + at());
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("several manta runtimes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(other.path()), std::string::npos) << r.out;
  json s = cli_json("status --json " + at() + " --address " + manta::observe::find_runtimes(dir_)[0].socket);
  (void)s;
  // A socket whose driver is gone is removed, not listed.
  std::string stale = manta::observe::socket_path(dir_, 999999, 1);
  {
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", stale.c_str());
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ::close(fd);  // the file stays, nobody listens: as a SIGKILLed driver's would
  }
  auto found = manta::observe::find_runtimes(dir_);
  EXPECT_EQ(found.size(), 2u);
  EXPECT_FALSE(std::filesystem::exists(stale));
}

TEST(observe_alone, a_driver_killed_leaves_no_socket_and_no_runtime_is_found) {
  std::string dir = manta::testing::temp_path("observe-kill");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    manta::init({.num_workers = 1, .log_dir = dir});
    char c = 1;
    if (::write(ready[1], &c, 1) != 1) ::_exit(2);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(manta::observe::find_runtimes(dir).size(), 1u);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  // Its zygote sees it go and removes the socket.
  EXPECT_TRUE(eventually([&] {
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().extension() == ".sock") return false;
    return true;
  }));
  cli_result r = run_cli("status --log-dir " + dir);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("no manta runtime answers"), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
}

TEST(observe_alone, a_log_dir_others_may_write_gets_no_socket_stacks_or_logs_and_the_runtime_works) {
  std::string dir = manta::testing::temp_path("observe-shared");
  std::filesystem::create_directories(dir);
  std::filesystem::permissions(dir, std::filesystem::perms::all);  // 0777: anyone could plant links there
  manta::init({.num_workers = 1, .log_dir = dir});
  EXPECT_EQ(manta::get(manta::task(chatty).remote(1)) > 0, true);
  EXPECT_TRUE(manta::observe::find_runtimes(dir).empty());
  manta::shutdown();
  for (const auto& f : std::filesystem::directory_iterator(dir))
    EXPECT_NE(f.path().filename().string().rfind("worker-", 0), 0u) << f.path();
  std::filesystem::remove_all(dir);
}

TEST(observe_alone, MANTA_TIMELINE_writes_one_event_per_task_and_call) {
  std::string dir = manta::testing::temp_path("observe-timeline");
  std::string path = dir + "/trace.json";
  std::filesystem::create_directories(dir);
  ::setenv("MANTA_TIMELINE", path.c_str(), 1);
  manta::init({.num_workers = 2, .log_dir = dir});
  ::unsetenv("MANTA_TIMELINE");
  auto pids = manta::detail::runtime_process_ids();
  std::vector<manta::object_ref<int>> refs;
  for (int i = 0; i < 20; ++i) refs.push_back(manta::task(add_one).remote(i));
  auto actor = manta::actor<tally>().remote();
  for (int i = 0; i < 5; ++i) refs.push_back(actor.task(&tally::add).remote(1));
  auto big = manta::task(make_big).remote(1 << 17);
  for (auto& r : refs) manta::get(r);
  manta::get(big);
  manta::shutdown();

  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path;
  json trace = json::parse(in);
  int tasks = 0, calls = 0, named = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M") ++named;
    if (e["ph"] != "X") continue;
    EXPECT_GE(e["ts"].get<double>(), 0.0);
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    EXPECT_TRUE(e["args"].contains("queued_us")) << e.dump();
    if (e["name"] == "add_one") {
      ++tasks;
      EXPECT_EQ(e["cat"], "task");
      EXPECT_NE(std::find(pids.begin(), pids.end(), e["pid"].get<int>()), pids.end());
    }
    if (e["cat"] == "actor") ++calls;
    if (e["name"] == "make_big") {
      EXPECT_GE(e["args"]["result_bytes"].get<std::uint64_t>(), 8u << 17);
    }
  }
  EXPECT_EQ(tasks, 20);
  EXPECT_GE(calls, 5);  // and the constructor
  EXPECT_GE(named, 3);  // the driver and the two workers
  std::filesystem::remove_all(dir);
}

TEST_F(observe, a_timeline_capture_holds_up_no_other_request) {
  std::string socket = manta::observe::find_runtimes(dir_).at(0).socket;
  std::thread capture([&] { manta::observe::ask(socket, "timeline 4", 20000); });
  // Answered while the capture runs (a server serving one client at a time
  // would make these wait the 4 s out and fail their 3 s bound).
  ASSERT_TRUE(eventually([&] { return json::parse(manta::observe::ask(socket, "status"))["runtime"]["timeline_recording"] == true; }));
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(json::parse(manta::observe::ask(socket, "status", 3000))["runtime"]["pid"].get<int>(), ::getpid());
  capture.join();
}

TEST(observe_alone, concurrent_calls_of_one_actor_get_a_track_per_thread) {
  std::string dir = manta::testing::temp_path("observe-threads");
  std::string path = dir + "/trace.json";
  std::filesystem::create_directories(dir);
  ::setenv("MANTA_TIMELINE", path.c_str(), 1);
  manta::init({.num_workers = 1, .log_dir = dir});
  ::unsetenv("MANTA_TIMELINE");
  auto a = manta::actor<tally>().max_concurrency(2).remote();
  auto first = a.task(&tally::nap).remote(300);
  auto second = a.task(&tally::nap).remote(300);  // runs beside the first
  manta::get(first);
  manta::get(second);
  manta::shutdown();
  std::ifstream in(path);
  json trace = json::parse(in);
  std::set<int> pids, tids;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X" && e["name"].get<std::string>().find("nap") != std::string::npos) {
      pids.insert(e["pid"].get<int>());
      tids.insert(e["tid"].get<int>());
    }
  EXPECT_EQ(pids.size(), 1u);
  EXPECT_EQ(tids.size(), 2u) << trace.dump();
  std::filesystem::remove_all(dir);
}

TEST(observe_alone, the_timeline_marks_spills_and_process_deaths) {
  std::string dir = manta::testing::temp_path("observe-instants");
  std::string path = dir + "/trace.json";
  std::filesystem::create_directories(dir);
  ::setenv("MANTA_TIMELINE", path.c_str(), 1);
  manta::init({.num_workers = 1, .object_store_bytes = 8 << 20, .log_dir = dir});
  ::unsetenv("MANTA_TIMELINE");
  std::vector<manta::object_ref<std::vector<double>>> refs;
  for (int i = 0; i < 4; ++i) refs.push_back(manta::put(make_big(3 << 17)));  // 3 MB each in 8 MB: spills
  auto slow = manta::task(mark_and_sleep).max_retries(0).remote(dir + "/started", 20000);
  // Started, not only sent: a worker killed before it starts a task runs it again, uncharged.
  ASSERT_TRUE(eventually([&] { return std::filesystem::exists(dir + "/started"); }));
  auto pids = manta::detail::runtime_process_ids();
  ASSERT_EQ(pids.size(), 2u);
  ::kill(pids[1], SIGKILL);
  EXPECT_THROW(manta::get(slow, std::chrono::seconds(20)), manta::worker_crashed_error);
  manta::shutdown();
  std::ifstream in(path);
  json trace = json::parse(in);
  int spills = 0, deaths = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "i") continue;
    if (e["name"] == "spill") ++spills;
    if (e["name"] == "process died") {
      ++deaths;
      EXPECT_EQ(e["pid"].get<int>(), pids[1]);
      EXPECT_NE(e["args"]["detail"].get<std::string>().find("SIGKILL"), std::string::npos) << e.dump();
    }
  }
  EXPECT_GE(spills, 1);
  EXPECT_EQ(deaths, 1);
  std::filesystem::remove_all(dir);
}

// What the tools call things: a queue as "queue" (not its detail class), an
// actor's constructor by its class (not by the actor's name).
TEST_F(observe, tools_name_queues_and_constructors_as_users_wrote_them) {
  manta::queue<int> q(4);
  q.put(1);
  auto named = manta::actor<tally>().name("the-tally").remote();
  EXPECT_EQ(manta::get(named.task(&tally::add).remote(1)), 1);
  json s = cli_json("status --json " + at());
  std::set<std::string> classes;
  for (const auto& a : s["actors"]) classes.insert(a["class"].get<std::string>());
  EXPECT_TRUE(classes.count("queue")) << s["actors"].dump();
  EXPECT_TRUE(classes.count("tally 'the-tally'")) << s["actors"].dump();
  json sum = cli_json("summary --json " + at());
  std::set<std::string> names;
  for (const auto& f : sum["functions"]) names.insert(f["name"].get<std::string>());
  EXPECT_TRUE(names.count("tally")) << "the constructor, by its class: " << sum.dump();
  EXPECT_TRUE(names.count("queue")) << "the queue's home, by what it is: " << sum.dump();
  EXPECT_FALSE(names.count("the-tally")) << sum.dump();
  for (const auto& c : classes) EXPECT_EQ(c.find("detail::"), std::string::npos) << c;
}

TEST_F(observe, manta_timeline_records_a_running_program_for_a_while) {
  std::atomic<bool> stop{false};
  std::thread submitter([&] {
    while (!stop) manta::get(manta::task(sleep_ms).remote(5));
  });
  std::string path = dir_ + "/live.json";
  cli_result r = run_cli("timeline --seconds 1 --output " + path + " " + at());
  stop = true;
  submitter.join();
  ASSERT_EQ(r.rc, 0) << r.out;
  std::ifstream in(path);
  json trace = json::parse(in);
  int sleeps = 0;
  for (const auto& e : trace["traceEvents"]) sleeps += e["ph"] == "X" && e["name"] == "sleep_ms";
  EXPECT_GT(sleeps, 10);  // about 1 s of 5 ms tasks, one at a time
  EXPECT_NE(r.out.find("events to " + path), std::string::npos);
}

}  // namespace


#ifdef MANTA_TEST_NO_BRIDGE
TEST(observe_without_bridge, the_cluster_verbs_say_the_build_has_no_cluster) {
  for (const char* verb : {"start --head", "stop", "status --address 127.0.0.1:1"}) {
    cli_result r = run_cli(verb);
    EXPECT_EQ(r.rc, 2) << verb << ": " << r.out;
    EXPECT_NE(r.out.find("built without the cluster (MANTA_ENABLE_BRIDGE=OFF)"), std::string::npos) << verb << ": " << r.out;
  }
}
#endif

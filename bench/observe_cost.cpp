// manta_observe_cost: what seeing what runs costs (issue 11), each case beside
// its twin with the feature off, alternating the two sides in one run (the
// order swaps every round) and printing medians and their ratio.
//
//   build/bench/manta_observe_cost [rounds=9] [tasks=20000] [progress_tasks=400000] [items=20000000]
//
// - tasks in bulk (submit `tasks` empty tasks, then get them), MANTA_TIMELINE
//   off and on: the difference per task is the recording cost per event;
// - one timeline event recorded directly (the recorder alone);
// - get of `progress_tasks` refs and pool.map over `items` trivial items (each
//   long enough for the bar to show), with options.progress off and on,
//   stderr a pseudo-terminal (so the bar draws).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <manta/manta.hpp>

#include "observe/timeline.hpp"

namespace {

int identity(int x) { return x; }
int twice(int x) { return 2 * x; }
MANTA_REMOTE(identity, twice);

using clock_type = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

/// Seconds for `tasks` empty tasks submitted one by one, then gathered.
double bulk(int tasks) {
  std::vector<manta::object_ref<int>> refs;
  refs.reserve(static_cast<std::size_t>(tasks));
  auto t0 = clock_type::now();
  for (int i = 0; i < tasks; ++i) refs.push_back(manta::task(identity).remote(i));
  long s = 0;
  for (auto& r : manta::get(refs)) s += r;
  auto t1 = clock_type::now();
  if (s < 0) std::puts("");
  return std::chrono::duration<double>(t1 - t0).count();
}

double pool_map(int items) {
  std::vector<int> xs(static_cast<std::size_t>(items), 1);
  manta::pool p;
  auto t0 = clock_type::now();
  auto out = p.map(twice, xs);
  auto t1 = clock_type::now();
  if (out.size() != xs.size()) std::abort();
  return std::chrono::duration<double>(t1 - t0).count();
}

/// stderr becomes a pseudo-terminal whose output a thread reads and drops.
struct pty_stderr {
  int master = -1, saved = -1;
  std::atomic<bool> stop{false};
  std::thread reader;
  pty_stderr() {
    master = ::posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || ::grantpt(master) != 0 || ::unlockpt(master) != 0) std::abort();
    int slave = ::open(::ptsname(master), O_RDWR | O_NOCTTY);
    saved = ::dup(STDERR_FILENO);
    ::dup2(slave, STDERR_FILENO);
    ::close(slave);
    reader = std::thread([this] {
      char buf[4096];
      while (!stop && ::read(master, buf, sizeof buf) > 0) {
      }
    });
  }
  ~pty_stderr() {
    ::dup2(saved, STDERR_FILENO);
    ::close(saved);
    stop = true;
    ::close(master);  // ends the reader's read
    reader.join();
  }
};

void report(const char* what, const std::vector<double>& off, const std::vector<double>& on, double per,
            const char* unit) {
  double a = median(off), b = median(on);
  std::printf("%-34s off %9.3f ms  on %9.3f ms  on/off %.3f  difference %+.3f %s\n", what, a * 1e3, b * 1e3, b / a,
              (b - a) / per * 1e9, unit);
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 9;
  const int tasks = argc > 2 ? std::atoi(argv[2]) : 20000;
  const int progress_tasks = argc > 3 ? std::atoi(argv[3]) : 400000;
  const int items = argc > 4 ? std::atoi(argv[4]) : 20000000;

  // The recorder alone: one event, as the scheduler records a finished task.
  {
    manta::observe::timeline t;
    t.start();
    manta::observe::timeline::task_event e;
    e.name = "identity";
    e.pid = 1234;
    const int n = 500000;
    auto t0 = clock_type::now();
    for (int i = 0; i < n; ++i) {
      e.started_ns = static_cast<std::uint64_t>(i);
      t.task(e);
    }
    double s = std::chrono::duration<double>(clock_type::now() - t0).count();
    std::printf("%-34s %.1f ns per event (%d events)\n", "timeline: record one event", s / n * 1e9, n);
  }

  std::vector<double> bulk_off, bulk_on, get_off, get_on, map_off, map_on;
  for (int r = 0; r < rounds; ++r) {
    for (int side = 0; side < 2; ++side) {
      const bool on = (side + r) % 2 == 1;  // the order swaps every round
      if (on) ::setenv("MANTA_TIMELINE", "/dev/null", 1);
      else ::unsetenv("MANTA_TIMELINE");
      manta::init({.num_workers = 2});
      bulk(2000);  // warm
      (on ? bulk_on : bulk_off).push_back(bulk(tasks));
      manta::shutdown();
    }
  }
  ::unsetenv("MANTA_TIMELINE");
  for (int r = 0; r < rounds; ++r) {
    for (int side = 0; side < 2; ++side) {
      const bool on = (side + r) % 2 == 1;
      pty_stderr tty;
      manta::init({.num_workers = 2, .progress = on});
      bulk(2000);
      (on ? get_on : get_off).push_back(bulk(progress_tasks));
      (on ? map_on : map_off).push_back(pool_map(items));
      manta::shutdown();
    }
  }
  std::printf("medians of %d rounds, 2 workers, sides alternating\n", rounds);
  report("timeline: tasks in bulk", bulk_off, bulk_on, tasks, "ns per task");
  report("progress: tasks in bulk (get all)", get_off, get_on, progress_tasks, "ns per task");
  report("progress: pool.map", map_off, map_on, items, "ns per item");
}

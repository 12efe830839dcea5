// memory: the memory row of the performance targets.
//
//   resident memory per idle worker   VmRSS of each pool worker after a warm-up,
//                                      split into anonymous, file and shared pages,
//                                      and its proportional share (Pss)
//   runtime memory per pending task    the driver's resident memory grown by N
//                                      tasks that wait on an unfinished argument,
//                                      divided by N (the caller's vector of refs is
//                                      reserved first and does not count); and the
//                                      part of it in malloc's heap (tasks and
//                                      directory entries come from TBB's scalable
//                                      allocator, which only the resident figure sees)
//
//   manta_memory [workers=2] [pending=1000000]
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <manta/manta.hpp>

namespace {

int pid_after(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return static_cast<int>(::getpid());
}
MANTA_REMOTE(pid_after);

int hold(int seconds) {
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  return 0;
}
MANTA_REMOTE(hold);

int add_one(int x) { return x + 1; }
MANTA_REMOTE(add_one);

/// The "Name:  N kB" fields of /proc/<pid>/<file>, in kB.
std::map<std::string, long> kb_fields(int pid, const char* file) {
  std::map<std::string, long> out;
  std::ifstream f("/proc/" + std::to_string(pid) + "/" + file);
  std::string name;
  long value;
  std::string unit;
  std::string line;
  while (std::getline(f, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    char* end = nullptr;
    value = std::strtol(line.c_str() + colon + 1, &end, 10);
    if (end && std::string(end).find("kB") != std::string::npos) out[line.substr(0, colon)] = value;
  }
  return out;
}

std::size_t heap_in_use() { return mallinfo2().uordblks; }

}  // namespace

int main(int argc, char** argv) {
  const int workers = argc > 1 ? std::atoi(argv[1]) : 2;
  const int pending = argc > 2 ? std::atoi(argv[2]) : 1000000;
  manta::init({.num_workers = workers});

  // Warm-up: every worker has run tasks; then learn their pids (each call sleeps,
  // so the calls spread over the workers).
  for (int i = 0; i < 1000; ++i) manta::get(manta::task(add_one).remote(i));
  std::set<int> pids;
  for (int attempt = 0; attempt < 10 && static_cast<int>(pids.size()) < workers; ++attempt) {
    std::vector<manta::object_ref<int>> refs;
    for (int w = 0; w < workers; ++w) refs.push_back(manta::task(pid_after).remote(50));
    for (auto& r : refs) pids.insert(manta::get(r));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // idle, as a measurement condition
  std::printf("idle workers (kB): pid, VmRSS, RssAnon, RssFile, RssShmem, Pss\n");
  std::vector<long> rss;
  for (int pid : pids) {
    auto st = kb_fields(pid, "status");
    auto sm = kb_fields(pid, "smaps_rollup");
    std::printf("  %d: %ld, %ld, %ld, %ld, %ld\n", pid, st["VmRSS"], st["RssAnon"], st["RssFile"], st["RssShmem"],
                sm["Pss"]);
    rss.push_back(st["VmRSS"]);
  }
  std::sort(rss.begin(), rss.end());
  std::printf("resident per idle worker: median %.2f MB\n", rss[rss.size() / 2] / 1024.0);

  // Pending tasks: they wait on `gate`, which holds a worker for a minute
  // (cancelled once measured).
  auto gate = manta::task(hold).remote(60);
  std::vector<manta::object_ref<int>> refs;
  refs.reserve(static_cast<std::size_t>(pending));
  manta::task(add_one).remote(manta::get(manta::task(add_one).remote(1)));  // code paths warm
  malloc_trim(0);
  const std::size_t heap0 = heap_in_use();
  const long rss0 = kb_fields(::getpid(), "status")["VmRSS"];
  for (int i = 0; i < pending; ++i) refs.push_back(manta::task(add_one).remote(gate));
  const std::size_t heap1 = heap_in_use();
  const long rss1 = kb_fields(::getpid(), "status")["VmRSS"];
  std::printf("%d pending tasks: driver resident +%.1f MB (%.0f B per task), of it malloc's heap %.0f B per task\n",
              pending, (rss1 - rss0) / 1024.0, (rss1 - rss0) * 1024.0 / pending, double(heap1 - heap0) / pending);
  manta::cancel(gate);
  int cancelled = 0;
  for (auto& r : refs) {
    try {
      manta::get(r);
    } catch (const manta::task_cancelled_error&) {
      ++cancelled;
    }
  }
  std::printf("cancelled with the gate: %d of %d\n", cancelled, pending);
  refs.clear();
  manta::shutdown();
  return cancelled == pending ? 0 : 1;
}

// manta_cluster: the bridge's figures on loopback, each against the single
// node measured in the same run.
//   - empty tasks through the cluster (tasks asking for a resource only the
//     nodes have), with one node and then two, against the same tasks run by
//     the driver's own workers; one at a time, with the node idle and beside
//     a running task;
//   - bytes through the cluster: a task whose argument is a stored object of
//     1 MiB / 16 MiB / 60 MiB / 1 GiB (it travels to the node, in parts past
//     8 MiB) and one that returns as much (beside the same task run by the
//     driver's own workers: making the value is part of the whole task), a
//     value made on the node beforehand returned by reference (the transfer
//     alone), and what loopback TCP carries alone;
//   - one stored object read by 40 tasks on two nodes (it travels once per node);
//   - 1 MiB and 1 GiB made on one node and read by a task on the other;
//   - time from `manta start -- ./app` to a node the head lists;
//   - time to see a node lost: SIGKILLed, and SIGSTOPped.
// It starts the head and the nodes itself (the nodes are this program, run
// with MANTA_NODE by `manta start`), drives, and stops them all.
//
//   manta_cluster [rounds=5] [tasks=3000] [bytes|tasks]   (only the transfers on 1 node, or the task rates)
// MANTA_CLUSTER_WORKERS sets the workers of the driver and of each node (2 by default).
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <manta/manta.hpp>

#include "bridge/socket_io.hpp"

namespace {

int nothing() { return 0; }
int nap(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
std::size_t size_of(std::span<const char> bytes) { return bytes.size(); }
std::vector<char> bytes_of(std::size_t n) { return std::vector<char>(n, 'x'); }

/// Keeps a value made on its node; hands it back by reference (it travels with the result).
struct Keeper {
  std::vector<manta::object_ref<std::vector<char>>> kept;
  int make(std::size_t n) {
    kept = {manta::put(std::vector<char>(n, 'k'))};
    return 0;
  }
  std::vector<manta::object_ref<std::vector<char>>> give() { return std::exchange(kept, {}); }
};

}  // namespace

MANTA_REMOTE(nothing, nap, size_of, bytes_of);
MANTA_ACTOR(Keeper, &Keeper::make, &Keeper::give);

namespace {

using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::string dir;
std::string cli() { return MANTA_CLI_PATH; }
// Workers of the driver and of each node: 2 on a 2-core machine; more where there are cores for them.
const int workers = std::getenv("MANTA_CLUSTER_WORKERS") ? std::atoi(std::getenv("MANTA_CLUSTER_WORKERS")) : 2;

/// Starts this program as a node; returns its pid and how long until the head listed it.
std::pair<int, double> start_node(const std::string& self) {
  auto t0 = clock_type::now();
  std::string cmd = cli() + " start --log-dir " + dir + " --num-workers " + std::to_string(workers) + " -- " + self + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[512];
  while (p && std::fgets(buf, sizeof buf, p)) out += buf;
  if (p) ::pclose(p);
  double took = seconds_since(t0);
  auto at = out.find(": pid ");
  if (at == std::string::npos) {
    std::fprintf(stderr, "node did not start: %s\n", out.c_str());
    std::exit(1);
  }
  return {std::atoi(out.c_str() + at + 6), took};
}

std::size_t alive_nodes() {
  std::size_t n = 0;
  for (const auto& node : manta::nodes()) n += node.alive;
  return n - 1;
}

/// Empty tasks per second: `remote` ones ask for a resource only the nodes have.
double task_rate(int tasks, bool remote) {
  std::vector<manta::object_ref<int>> refs;
  refs.reserve(static_cast<std::size_t>(tasks));
  auto t0 = clock_type::now();
  for (int i = 0; i < tasks; ++i)
    refs.push_back(remote ? manta::task(nothing).resources({{"remote", 1}}).remote() : manta::task(nothing).remote());
  manta::get(refs);
  return tasks / seconds_since(t0);
}

void rates(const char* label, int rounds, int tasks) {
  std::vector<double> local, remote;
  for (int r = 0; r < rounds; ++r) {  // alternating, so drift hits both sides
    local.push_back(task_rate(tasks, false));
    remote.push_back(task_rate(tasks, true));
  }
  std::printf("%-34s local %9.0f tasks/s   through the cluster %8.0f tasks/s   (%.3f of local)\n", label,
              median(local), median(remote), median(remote) / median(local));
}

/// The median round trip of an empty task through the cluster, one at a time;
/// `beside_long` while a long task runs on the same (only) node.
double round_trip_us(bool beside_long) {
  std::optional<manta::object_ref<int>> long_task;
  if (beside_long) long_task = manta::task(nap).resources({{"remote", 1}}).remote(5000);
  std::vector<double> us;
  for (int i = 0; i < 200; ++i) {
    auto t0 = clock_type::now();
    manta::get(manta::task(nothing).resources({{"remote", 1}}).remote());
    us.push_back(seconds_since(t0) * 1e6);
  }
  if (long_task) manta::cancel(*long_task);  // (its worker is killed; the node goes on)
  return median(us);
}

/// What loopback TCP carries alone on this machine: `bytes` from one thread
/// to another through one connection, in the bridge's 256 KiB reads.
double loopback_gbps(std::size_t bytes) {
  unsigned short port = 0;
  int listener = manta::bridge::listen_on("127.0.0.1", port);  // the bridge's own sockets
  int out = manta::bridge::connect_to("127.0.0.1", port, std::chrono::seconds(5));
  int in = ::accept(listener, nullptr, nullptr);
  int blocking = 0;  // (the bridge's sockets are non-blocking; this plain loop blocks)
  ::ioctl(out, FIONBIO, &blocking);
  ::ioctl(in, FIONBIO, &blocking);
  std::thread reader([&] {
    std::vector<char> buf(256 << 10);
    std::size_t got = 0;
    while (got < bytes) {
      ssize_t n = ::recv(in, buf.data(), buf.size(), 0);
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
  });
  std::vector<char> data(8 << 20, 'x');
  auto t0 = clock_type::now();
  for (std::size_t sent = 0; sent < bytes;) {
    ssize_t n = ::send(out, data.data(), std::min(data.size(), bytes - sent), 0);
    if (n <= 0) break;
    sent += static_cast<std::size_t>(n);
  }
  reader.join();
  double gbps = static_cast<double>(bytes) / seconds_since(t0) / 1e9;
  ::close(out);
  ::close(in);
  ::close(listener);
  return gbps;
}

/// Bytes through the cluster: arguments to a node, results from it.
void transfers(int rounds) {
  std::printf("loopback TCP alone, 1 GiB through one connection: %.3f GB/s\n", loopback_gbps(std::size_t{1} << 30));
  for (std::size_t bytes : {std::size_t{1} << 20, std::size_t{16} << 20, std::size_t{60} << 20, std::size_t{1} << 30}) {
    std::vector<double> out, back, made;  // seconds
    for (int r = 0; r < (bytes >= (std::size_t{1} << 30) ? std::min(rounds, 3) : rounds); ++r) {
      // A fresh object each round: a node keeps what it fetched, so the same one would not travel again.
      auto big = manta::put(std::vector<char>(bytes, 'x'));
      auto t0 = clock_type::now();
      manta::get(manta::task(size_of).resources({{"remote", 1}}).remote(big));
      out.push_back(seconds_since(t0));
      // Results until they are in the driver's arena (wait, not get: get's copy out is no transfer).
      t0 = clock_type::now();
      manta::wait(std::vector{manta::task(bytes_of).resources({{"remote", 1}}).remote(bytes)}, 1);
      back.push_back(seconds_since(t0));
      t0 = clock_type::now();  // the same result made by the driver's own workers: what is not transfer
      manta::wait(std::vector{manta::task(bytes_of).remote(bytes)}, 1);
      made.push_back(seconds_since(t0));
    }
    const double gb = static_cast<double>(bytes) / 1e9, moved = median(back) - median(made);
    std::printf("%4zu MiB argument to a node: %.3f GB/s   result from a node: %.3f GB/s (whole task; made locally: "
                "%.3f GB/s; so the transfer alone: %.3f GB/s)\n",
                bytes >> 20, gb / median(out), gb / median(back), gb / median(made), moved > 0 ? gb / moved : 0.0);
    // The transfer alone, measured: a value made on the node before the clock starts comes back by reference.
    auto keeper = manta::actor<Keeper>().resources({{"remote", 1}}).remote();
    std::vector<double> given;
    for (int r = 0; r < (bytes >= (std::size_t{1} << 30) ? std::min(rounds, 3) : rounds); ++r) {
      manta::get(keeper.task(&Keeper::make).remote(bytes));
      auto t0 = clock_type::now();
      auto refs = manta::get(keeper.task(&Keeper::give).remote());
      given.push_back(seconds_since(t0));
    }
    std::printf("%4zu MiB made on a node before, returned by reference (the transfer alone): %.3f GB/s\n", bytes >> 20,
                gb / median(given));
  }

}

}  // namespace

int main(int argc, char** argv) {
  // Loss by silence as measured before it was configurable (30 s by default now).
  ::setenv("MANTA_SILENCE_LIMIT_S", "2.5", 0);
  if (std::getenv("MANTA_NODE")) {
    // "node<pid>": a resource of this node alone, to aim tasks at it.
    manta::init({.resources = {{"remote", 1000}, {"node" + std::to_string(::getpid()), 1000}}});  // serves; never returns
    return 1;
  }
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  const int tasks = argc > 2 ? std::atoi(argv[2]) : 3000;
  const std::string_view only = argc > 3 ? argv[3] : "";
  const std::string self = std::filesystem::canonical("/proc/self/exe").string();
  dir = std::filesystem::temp_directory_path() / ("manta-cluster-bench-" + std::to_string(::getpid()));
  if (std::system((cli() + " start --head --log-dir " + dir + " > /dev/null").c_str()) != 0) return 1;
  std::string address;
  {
    std::ifstream in(dir + "/head.address");
    in >> address;
  }
  std::vector<double> starts;
  auto [first, took] = start_node(self);
  starts.push_back(took);

  ::setenv("MANTA_ADDRESS", address.c_str(), 1);
  ::setenv("MANTA_TOKEN_FILE", (dir + "/cluster.token").c_str(), 1);
  manta::init({.num_workers = workers});
  std::printf("manta_cluster: %d rounds, medians; head and nodes on loopback, %d workers each\n", rounds, workers);
  auto finish = [&] {
    manta::shutdown();
    std::system((cli() + " stop --log-dir " + dir + " > /dev/null").c_str());
    std::filesystem::remove_all(dir);
    return 0;
  };
  if (only == "bytes") {
    transfers(rounds);
    return finish();
  }
  rates("empty tasks, 1 node:", rounds, tasks);
  std::printf("an empty task's round trip through the cluster, one at a time: %.0f us; beside a running task: %.0f us\n",
              round_trip_us(false), round_trip_us(true));
  auto [second, took2] = start_node(self);
  starts.push_back(took2);
  while (alive_nodes() < 2) usleep(1000);
  rates("empty tasks, 2 nodes:", rounds, tasks);
  if (only == "tasks") return finish();

  transfers(rounds);

  {
    // One stored object named by many tasks: it goes to each node once.
    constexpr std::size_t bytes = std::size_t{64} << 20;
    constexpr int readers = 40;
    std::vector<double> first, later;
    for (int r = 0; r < rounds; ++r) {
      auto shared = manta::put(std::vector<char>(bytes, 'y'));
      auto t0 = clock_type::now();
      std::vector<manta::object_ref<std::size_t>> refs;
      for (int i = 0; i < readers; ++i) refs.push_back(manta::task(size_of).resources({{"remote", 1}}).remote(shared));
      manta::get(refs);
      first.push_back(seconds_since(t0) * 1e3);
      refs.clear();
      t0 = clock_type::now();
      for (int i = 0; i < readers; ++i) refs.push_back(manta::task(size_of).resources({{"remote", 1}}).remote(shared));
      manta::get(refs);
      later.push_back(seconds_since(t0) * 1e3);
    }
    std::printf("one 64 MiB stored object read by %d tasks on 2 nodes: %.0f ms (fetched once per node), "
                "%.0f ms again (kept there); %d copies would be %.1f GB\n",
                readers, median(first), median(later), readers, static_cast<double>(bytes) * readers / 1e9);
  }

  {
    // Made on one node, read by a task on the other: it goes back to the
    // driver with the result that names it, and out again to the reader.
    const std::string at_first = "node" + std::to_string(first), at_second = "node" + std::to_string(second);
    auto keeper = manta::actor<Keeper>().resources({{at_first, 1}}).remote();
    for (std::size_t bytes : {std::size_t{1} << 20, std::size_t{1} << 30}) {
      std::vector<double> took;
      for (int r = 0; r < (bytes >= (std::size_t{1} << 30) ? std::min(rounds, 3) : rounds); ++r) {
        manta::get(keeper.task(&Keeper::make).remote(bytes));
        auto t0 = clock_type::now();
        auto refs = manta::get(keeper.task(&Keeper::give).remote());
        manta::get(manta::task(size_of).resources({{at_second, 1}}).remote(refs.at(0)));
        took.push_back(seconds_since(t0));
      }
      std::printf("%4zu MiB made on one node, read by a task on the other (through the driver): %.3f GB/s\n",
                  bytes >> 20, static_cast<double>(bytes) / 1e9 / median(took));
    }
  }

  auto [third, took3] = start_node(self);
  starts.push_back(took3);
  std::printf("manta start -- ./app until the head lists it: %.0f ms (median of %zu)\n", median(starts) * 1e3,
              starts.size());
  while (alive_nodes() < 3) usleep(1000);
  auto t0 = clock_type::now();
  ::kill(third, SIGKILL);
  while (alive_nodes() > 2) usleep(1000);
  std::printf("a SIGKILLed node seen lost after %.1f ms\n", seconds_since(t0) * 1e3);
  t0 = clock_type::now();
  ::kill(second, SIGSTOP);
  while (alive_nodes() > 1) usleep(1000);
  std::printf("a SIGSTOPped node seen lost after %.0f ms\n", seconds_since(t0) * 1e3);
  ::kill(second, SIGKILL);
  return finish();
}

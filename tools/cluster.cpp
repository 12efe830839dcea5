// tools/cluster.cpp: starting, stopping and listing a cluster's head.
#include "tools/cluster.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>

#include "bridge/membership.hpp"
#include "bridge/token.hpp"

namespace manta::tools {
namespace {

std::string token_path(const cluster_options& o) {
  if (!o.token_file.empty()) return o.token_file;
  if (const char* env = std::getenv("MANTA_TOKEN_FILE"); env && *env) return env;
  return o.log_dir + "/cluster.token";
}

std::string address_file(const cluster_options& o) { return o.log_dir + "/head.address"; }

/// The head's address and pid, from --address or the address file `manta start --head` wrote.
std::pair<std::string, pid_t> head_of(const cluster_options& o) {
  std::ifstream in(address_file(o));
  std::string address;
  pid_t pid = 0;
  if (in) in >> address >> pid;
  if (!o.address.empty()) return {o.address, address == o.address ? pid : 0};
  if (address.empty())
    throw std::runtime_error("no head address: give --address HOST:PORT (none started from " + o.log_dir + ")");
  return {address, pid};
}

}  // namespace

bool is_head_address(const std::string& address) {
  auto colon = address.rfind(':');
  return colon != std::string::npos && colon + 1 < address.size() &&
         address.find_first_not_of("0123456789", colon + 1) == std::string::npos && address.find('/') == std::string::npos;
}

int start_head(const cluster_options& o) {
  std::error_code ec;
  std::filesystem::create_directories(o.log_dir, ec);
  const std::string token = bridge::make_token_file(token_path(o));
  int ready[2];
  if (::pipe(ready) != 0) throw std::runtime_error("pipe failed");
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    // The head, in the background: its own session, its output in head.log.
    ::close(ready[0]);
    ::setsid();
    int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    int log = ::open((o.log_dir + "/head.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (null >= 0) ::dup2(null, STDIN_FILENO);
    if (log >= 0) {
      ::dup2(log, STDOUT_FILENO);
      ::dup2(log, STDERR_FILENO);
    }
    // SIGTERM and SIGINT are waited for below, not delivered (every thread inherits the mask).
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    ::pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    std::atomic<bool> stop{false};
    int code = 0;
    try {
      bridge::head h({.bind = o.bind, .port = o.port, .token = token, .on_stop_request = [&] { stop = true; }});
      std::string address = (o.bind == "0.0.0.0" || o.bind == "::" ? "127.0.0.1" : o.bind) + ":" + std::to_string(h.port());
      std::ofstream(address_file(o)) << address << " " << ::getpid() << "\n";
      std::string line = address + "\n";
      if (::write(ready[1], line.data(), line.size()) < 0) ::_exit(3);
      ::close(ready[1]);
      std::printf("head listening on %s:%u\n", o.bind.c_str(), h.port());
      std::fflush(stdout);
      timespec tick{0, 100'000'000};
      while (!stop) {
        int sig = ::sigtimedwait(&stop_signals, nullptr, &tick);
        if (sig == SIGTERM || sig == SIGINT) break;
      }
      std::printf("head stopping: every node is told to stop\n");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "manta head: %s\n", e.what());
      std::string line = std::string("error: ") + e.what() + "\n";
      [[maybe_unused]] auto n = ::write(ready[1], line.data(), line.size());
      code = 1;
    }
    // (the head is gone: its nodes were told to stop)
    std::filesystem::remove(address_file(o), ec);
    std::filesystem::remove(token_path(o), ec);
    std::fflush(nullptr);
    ::_exit(code);
  }
  ::close(ready[1]);
  std::string line;
  char c;
  while (::read(ready[0], &c, 1) == 1 && c != '\n') line += c;
  ::close(ready[0]);
  if (line.empty() || line.rfind("error: ", 0) == 0) {
    ::waitpid(pid, nullptr, 0);
    throw std::runtime_error("the head did not start" + (line.empty() ? std::string() : ": " + line.substr(7)));
  }
  std::printf("address: %s\ntoken file: %s\nhead pid: %d (log: %s/head.log)\n", line.c_str(), token_path(o).c_str(),
              static_cast<int>(pid), o.log_dir.c_str());
  return 0;
}

int stop_cluster(const cluster_options& o) {
  auto [address, pid] = head_of(o);
  std::string token = bridge::read_token_file(token_path(o));
  bridge::ask_head(address, token, "stop");
  // The head exits once its nodes were told; wait for it when we know its pid.
  if (pid > 0) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (::kill(pid, 0) == 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (::kill(pid, 0) == 0) throw std::runtime_error("the head (pid " + std::to_string(pid) + ") did not exit");
  }
  std::printf("stopped the cluster at %s\n", address.c_str());
  return 0;
}

int cluster_status(const cluster_options& o) {
  auto [address, pid] = head_of(o);
  std::string token = bridge::read_token_file(token_path(o));
  nlohmann::json table = nlohmann::json::parse(bridge::ask_head(address, token, "status"));
  if (o.json) {
    std::printf("%s\n", table.dump(2).c_str());
    return 0;
  }
  std::size_t alive = 0;
  for (const auto& n : table["nodes"]) alive += n["alive"].get<bool>();
  std::printf("cluster at %s: %zu node%s alive, %zu lost\n\n", address.c_str(), alive, alive == 1 ? "" : "s",
              table["nodes"].size() - alive);
  std::printf("%-8s %-22s %-16s %-8s %-6s %s\n", "NODE", "ADDRESS", "HOST", "PID", "ALIVE", "RESOURCES");
  for (const auto& n : table["nodes"]) {
    std::string resources;
    for (const auto& [name, amount] : n["resources"].items()) {
      char value[32];
      std::snprintf(value, sizeof value, "%g", amount.get<double>());
      resources += (resources.empty() ? "" : ", ") + name + " " + value;
    }
    if (!n["alive"].get<bool>()) resources = "lost: " + n["lost_why"].get<std::string>();
    std::printf("%-8s %-22s %-16s %-8d %-6s %s\n", n["id"].get<std::string>().c_str(),
                n["address"].get<std::string>().c_str(), n["host"].get<std::string>().c_str(), n["pid"].get<int>(),
                n["alive"].get<bool>() ? "yes" : "no", resources.c_str());
  }
  return 0;
}

}  // namespace manta::tools

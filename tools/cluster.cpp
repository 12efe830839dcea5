// tools/cluster.cpp: starting, stopping and listing a cluster's head.
#include "tools/cluster.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string_view>
#include <system_error>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/optional.hpp>      // (Boost.Process 1.81 uses these two
#include <boost/type_traits.hpp>  // without including them)
#include <boost/process/v2/environment.hpp>
#include <boost/process/v2/process.hpp>
#include <boost/process/v2/stdio.hpp>
#include <nlohmann/json.hpp>

#include "bridge/head.hpp"
#include "bridge/node_link.hpp"
#include "bridge/socket_io.hpp"
#include "observe/control_socket.hpp"
#include "bridge/token.hpp"

namespace manta::tools {

namespace {
/// A Boost.Process initializer: the child starts a session of its own, with SIGPIPE at its default.
struct new_session {
  template <class Launcher>
  boost::system::error_code on_exec_setup(Launcher&, const std::filesystem::path&, const char* const*&) {
    if (::setsid() < 0) return {errno, boost::system::system_category()};
    ::signal(SIGPIPE, SIG_DFL);  // (this command ignores it; the program starts as from a shell)
    return {};
  }
};
}  // namespace
namespace {

std::string token_path(const cluster_options& o) {
  return o.token_file.empty() ? bridge::default_token_file(o.log_dir) : o.token_file;
}

std::string address_file(const cluster_options& o) { return o.log_dir + "/head.address"; }

/// Alive and not a zombie (a head nobody reaped yet has exited all the same).
bool running(pid_t pid) {
  if (pid <= 0 || ::kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  auto close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'Z';
}

/// The head's address and pid as `manta start --head` recorded them ("", 0 if
/// none), and whether it speaks TLS.
std::pair<std::string, pid_t> recorded_head(const cluster_options& o, bool* tls = nullptr) {
  std::ifstream in(address_file(o));
  std::string address, flag;
  pid_t pid = 0;
  if (in) in >> address >> pid >> flag;
  if (tls) *tls = flag == "tls";
  return {address, pid};
}

/// The head's address and pid, from --address or the address file. A head
/// recorded with TLS is spoken to with TLS (MANTA_TLS=1, unless MANTA_TLS_CA
/// says more), by this tool and by the nodes it starts.
std::pair<std::string, pid_t> head_of(const cluster_options& o) {
  bool tls = false;
  auto [address, pid] = recorded_head(o, &tls);
  if (tls && (o.address.empty() || o.address == address) && !std::getenv("MANTA_TLS_CA"))
    ::setenv("MANTA_TLS", "1", 0);
  if (!o.address.empty()) return {o.address, address == o.address ? pid : 0};
  if (address.empty())
    throw std::runtime_error("no head address: give --address HOST:PORT (none started from " + o.log_dir + ")");
  return {address, pid};
}

/// Writes `text` to `path` through a fresh file renamed over it: never through a link.
void write_file(const std::string& path, const std::string& text) {
  const std::string fresh = path + ".new";
  ::unlink(fresh.c_str());
  int fd = ::open(fresh.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ok = ::close(fd) == 0 && ok;
  if (!ok || ::rename(fresh.c_str(), path.c_str()) != 0) {
    ::unlink(fresh.c_str());
    throw std::runtime_error("cannot write " + path);
  }
}

/// The last `n` lines of the file at `path` that are not empty, or "".
std::string last_lines(const std::string& path, std::size_t n) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  std::string out;
  for (std::size_t i = lines.size() > n ? lines.size() - n : 0; i < lines.size(); ++i) out += "  " + lines[i] + "\n";
  if (!out.empty()) out.pop_back();
  return out;
}

/// Removes `path` only if it still holds `text` (a later head may have written its own).
void remove_if_ours(const std::string& path, const std::string& text) {
  std::ifstream in(path);
  std::stringstream held;
  held << in.rdbuf();
  if (held.str() == text) ::unlink(path.c_str());
}

}  // namespace

bool head_runs_in(const std::string& log_dir) {
  cluster_options o;
  o.log_dir = log_dir;
  return running(recorded_head(o).second);
}

int start_head(const cluster_options& o) {
  std::error_code ec;
  if (std::filesystem::create_directories(o.log_dir, ec))
    std::filesystem::permissions(o.log_dir, std::filesystem::perms::owner_all, ec);
  observe::check_private_dir(o.log_dir);  // its files are made by name: nobody else may put links there
  if (auto [address, pid] = recorded_head(o); running(pid))
    throw std::runtime_error("a head already runs from " + o.log_dir + " (pid " + std::to_string(pid) + ", " +
                             address + "); stop it first (manta stop)");
  const std::string token = bridge::new_token();
  // The head runs from "/": its files are named whole.
  const std::string tls_cert = o.tls_cert.empty() ? "" : std::filesystem::absolute(o.tls_cert).string();
  const std::string tls_key = o.tls_key.empty() ? "" : std::filesystem::absolute(o.tls_key).string();
  if (tls_cert.empty())
    if (const std::string warning = bridge::plain_tcp_warning(o.bind); !warning.empty())
      std::fprintf(stderr, "%s\n", warning.c_str());
  int ready[2];
  if (::pipe(ready) != 0) throw std::runtime_error("pipe failed");
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    // The head, in the background: its own session, its output in head.log,
    // nothing of the caller's kept open but the pipe that says it listens.
    ::close(ready[0]);
    ::setsid();
    [[maybe_unused]] int at_root = ::chdir("/");
    ::signal(SIGPIPE, SIG_IGN);
    int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    int log = ::open((o.log_dir + "/head.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    ::dup2(null, STDIN_FILENO);
    ::dup2(log >= 0 ? log : null, STDOUT_FILENO);
    ::dup2(log >= 0 ? log : null, STDERR_FILENO);
    for (int fd = 3; fd < 1024; ++fd)
      if (fd != ready[1]) ::close(fd);
    // SIGTERM and SIGINT are waited for below, not delivered (every thread inherits the mask).
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    ::pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    std::atomic<bool> stop{false};
    int code = 0;
    std::string recorded;
    try {
      std::shared_ptr<bridge::tls_context> tls;
      if (!tls_cert.empty()) tls = bridge::tls_context::for_head(tls_cert, tls_key);
      bridge::head h({.bind = o.bind,
                      .port = o.port,
                      .token = token,
                      .tls = tls,
                      .node_wait = std::chrono::milliseconds(static_cast<long long>(o.node_wait_s * 1000)),
                      .on_stop_request = [&] { stop = true; }});
      // Listening: now the token and the address are written.
      bridge::write_token_file(token_path(o), token);
      std::string address =
          (o.bind == "0.0.0.0" || o.bind == "::" ? "127.0.0.1" : o.bind) + ":" + std::to_string(h.port());
      recorded = address + " " + std::to_string(::getpid()) + (tls ? " tls" : "") + "\n";
      write_file(address_file(o), recorded);
      std::string line = address + "\n";
      if (::write(ready[1], line.data(), line.size()) < 0) code = 3;  // (the caller went: serve anyway)
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
    // (the head is gone: its nodes were told to stop) Its files go, unless a later head's.
    if (!recorded.empty()) {
      remove_if_ours(address_file(o), recorded);
      remove_if_ours(token_path(o), token + "\n");
    }
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

int start_node(const cluster_options& o, const std::vector<std::string>& command, int num_workers) {
  if (command.empty()) throw std::runtime_error("give the program to start as a node after --: manta start --address A -- ./app");
  auto [address, head_pid] = head_of(o);
  const std::string token_file = std::filesystem::absolute(token_path(o)).string();
  const std::string token = bridge::read_token_file(token_file);  // checked here, where the error can be read
  std::error_code ec;
  if (std::filesystem::create_directories(o.log_dir, ec))
    std::filesystem::permissions(o.log_dir, std::filesystem::perms::owner_all, ec);
  // Started and watched with Boost.Process: its own session (a terminal's
  // hangup does not end it), stdin from /dev/null, output in its log, and
  // none of this process's other descriptors.
  namespace bp = boost::process::v2;
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string_view kv = *e;
    const std::string_view name = kv.substr(0, kv.find('='));
    if (name != "MANTA_NODE" && name != "MANTA_TOKEN_FILE" && name != "MANTA_LOG_DIR" && name != "MANTA_ADDRESS" &&
        !(num_workers > 0 && name == "MANTA_NUM_WORKERS"))
      env.emplace_back(kv);
  }
  env.push_back("MANTA_NODE=" + address);
  env.push_back("MANTA_TOKEN_FILE=" + token_file);
  env.push_back("MANTA_LOG_DIR=" + o.log_dir);  // its runtime's worker logs, spill file and socket too
  if (num_workers > 0) env.push_back("MANTA_NUM_WORKERS=" + std::to_string(num_workers));
  // The log is named by the node's pid, known once it runs: opened first, renamed after.
  const std::string starting = o.log_dir + "/node-starting-" + std::to_string(::getpid()) + ".log";
  const int log = ::open(starting.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (log < 0) throw std::runtime_error("cannot write " + starting + ": " + std::strerror(errno));
  std::error_code found;
  const std::filesystem::path exe = command[0].find('/') != std::string::npos
                                        ? std::filesystem::path(command[0])
                                        : bp::environment::find_executable(command[0]);
  if (exe.empty() || !std::filesystem::exists(exe, found)) {
    ::close(log);
    std::remove(starting.c_str());
    throw std::runtime_error("cannot run " + command[0] + ": " + std::strerror(ENOENT));
  }
  boost::asio::io_context ctx;
  std::optional<bp::process> node;
  try {
    std::fflush(nullptr);
    node.emplace(ctx, exe, std::vector<std::string>(command.begin() + 1, command.end()),
                 bp::process_stdio{nullptr, log, log}, bp::process_environment(env), new_session{});
  } catch (const std::exception& e) {
    ::close(log);
    std::remove(starting.c_str());
    throw std::runtime_error("cannot run " + command[0] + ": " + e.what());
  }
  ::close(log);
  const pid_t pid = node->id();
  // Running: it is a node once the head lists it.
  const std::string log_path = o.log_dir + "/node-" + std::to_string(pid) + ".log";
  std::rename(starting.c_str(), log_path.c_str());
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    nlohmann::json table = nlohmann::json::parse(bridge::ask_head(address, token, "status"));
    for (const auto& n : table["nodes"])
      if (n["pid"].get<int>() == pid && n["alive"].get<bool>()) {
        std::printf("%s joined %s: pid %d (log: %s)\n", n["id"].get<std::string>().c_str(), address.c_str(),
                    static_cast<int>(pid), log_path.c_str());
        node->detach();  // it outlives this command
        return 0;
      }
    boost::system::error_code gone;
    if (!node->running(gone)) {
      // Why is in its log (the head refused it: another binary; no token...).
      const std::string why = last_lines(log_path, 3);
      throw std::runtime_error(command[0] + " exited before it joined" + (why.empty() ? "" : ":\n" + why) +
                               "\n(log: " + log_path + ")");
    }
    if (std::chrono::steady_clock::now() > until) {
      boost::system::error_code ec;
      node->terminate(ec);  // (SIGKILL, and reaped)
      throw std::runtime_error(command[0] + " did not join within 30 s (does it call manta::init? see " + log_path + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

int stop_cluster(const cluster_options& o) {
  auto [address, pid] = head_of(o);
  if (pid > 0 && !running(pid)) {
    // Recorded here, and gone without `manta stop` (killed, or its machine
    // rebooted): asking it would say only "connection refused". Its files go.
    const auto [recorded, recorded_pid] = recorded_head(o);
    if (recorded_pid == pid) {
      std::remove(address_file(o).c_str());
      if (o.token_file.empty()) std::remove(token_path(o).c_str());
    }
    std::printf("the head recorded in %s (pid %d, %s) is gone: it ended without manta stop; removed its "
                "head.address%s (its nodes end on their own once they miss it)\n",
                o.log_dir.c_str(), static_cast<int>(pid), address.c_str(), o.token_file.empty() ? " and cluster.token" : "");
    return 0;
  }
  std::string token = bridge::read_token_file(token_path(o));
  bridge::ask_head(address, token, "stop");
  // The head exits once its nodes were told; wait for it when we know its pid.
  if (pid > 0) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (running(pid) && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (running(pid)) throw std::runtime_error("the head (pid " + std::to_string(pid) + ") did not exit");
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
  std::printf("%-8s %-22s %-16s %-8s %-6s %-6s %-6s %-7s %s\n", "NODE", "ADDRESS", "HOST", "PID", "ALIVE", "TASKS",
              "ACTORS", "OBJECTS", "RESOURCES");
  for (const auto& n : table["nodes"]) {
    std::string resources;
    for (const auto& [name, amount] : n["resources"].items()) {
      char value[32];
      if (name == "memory") std::snprintf(value, sizeof value, "%.1f GiB", amount.get<double>() / (1 << 30));
      else std::snprintf(value, sizeof value, "%g", amount.get<double>());
      resources += (resources.empty() ? "" : ", ") + name + " " + value;
    }
    if (!n["alive"].get<bool>()) resources = "lost: " + n["lost_why"].get<std::string>();
    std::printf("%-8s %-22s %-16s %-8d %-6s %-6d %-6d %-7d %s\n", n["id"].get<std::string>().c_str(),
                n["address"].get<std::string>().c_str(), n["host"].get<std::string>().c_str(), n["pid"].get<int>(),
                n["alive"].get<bool>() ? "yes" : "no", n.value("tasks_running", 0), n.value("actors", 0),
                n.value("objects", 0), resources.c_str());
  }
  const auto drivers = table.value("drivers", nlohmann::json::array());
  if (drivers.empty()) return 0;
  std::printf("\n%-9s %-9s %-22s %-16s %s\n", "DRIVER", "NODE ID", "ADDRESS", "HOST", "PID");
  for (const auto& d : drivers)
    std::printf("%-9s %-9s %-22s %-16s %d\n", d.value("id", std::string()).c_str(),
                d.value("node_id", std::string()).c_str(), d.value("address", std::string()).c_str(),
                d.value("host", std::string()).c_str(), d.value("pid", 0));
  return 0;
}

}  // namespace manta::tools

// tools/logs.cpp: printing and following the workers' logs.
#include "tools/logs.hpp"

#include <signal.h>
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <thread>

namespace manta::tools {
namespace {

namespace fs = std::filesystem;

bool process_alive(int pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

/// Copies `path` from byte `from` to stdout. @returns the offset reached
std::uintmax_t print_from(const std::string& path, std::uintmax_t from) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return from;
  in.seekg(static_cast<std::streamoff>(from));
  char buf[1 << 16];
  std::uintmax_t at = from;
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    std::fwrite(buf, 1, static_cast<std::size_t>(in.gcount()), stdout);
    at += static_cast<std::uintmax_t>(in.gcount());
  }
  std::fflush(stdout);
  return at;
}

int list_logs(const std::string& dir) {
  std::map<int, std::uintmax_t> sizes;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    int pid = 0;
    if (std::sscanf(name.c_str(), "worker-%d.log", &pid) == 1 && pid > 0) sizes[pid] += e.file_size(ec);
  }
  if (ec) throw std::runtime_error("cannot read " + dir + ": " + ec.message());
  if (sizes.empty()) {
    std::printf("no worker logs in %s\n", dir.c_str());
    return 0;
  }
  std::printf("%-8s %12s %-8s %s\n", "PID", "BYTES", "PROCESS", "LOG");
  for (const auto& [pid, bytes] : sizes)
    std::printf("%-8d %12ju %-8s %s/worker-%d.log\n", pid, bytes, process_alive(pid) ? "running" : "ended",
                dir.c_str(), pid);
  std::printf("(manta logs --pid PID prints one; --follow keeps printing what it writes)\n");
  return 0;
}

}  // namespace

int show_logs(const logs_options& o) {
  if (o.pid <= 0) return list_logs(o.log_dir);
  const std::string path = o.log_dir + "/worker-" + std::to_string(o.pid) + ".log";
  std::error_code ec;
  if (!fs::exists(path, ec) && !fs::exists(path + ".old", ec))
    throw std::runtime_error("no log of pid " + std::to_string(o.pid) + " in " + o.log_dir +
                             " (manta logs lists them)");
  print_from(path + ".old", 0);  // what it wrote before its log rotated
  auto inode = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 ? st.st_ino : ino_t{0};
  };
  ino_t followed = inode(path);
  std::uintmax_t at = print_from(path, 0);
  if (!o.follow) return 0;
  // Until the process ends (then what it wrote last), or Ctrl-C.
  for (bool last_look = false;; ) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (const ino_t now = inode(path); now != followed) {  // it rotated: the old file's tail, then the new one
      if (followed && inode(path + ".old") == followed) print_from(path + ".old", at);
      followed = now;
      at = 0;
    }
    at = print_from(path, at);
    if (last_look) return 0;
    last_look = !process_alive(o.pid);
  }
}

}  // namespace manta::tools

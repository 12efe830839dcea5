// bridge/token.cpp: making and reading the token file.
#include "bridge/token.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <openssl/rand.h>

namespace manta::bridge {
namespace {

constexpr std::size_t token_bytes = 32;

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw token_error("manta: cluster token file " + path + ": " + why);
}

}  // namespace

std::string new_token() {
  unsigned char raw[token_bytes];
  if (RAND_bytes(raw, sizeof raw) != 1) throw token_error("manta: no random bytes for a cluster token");
  std::string token;
  for (unsigned char b : raw) {
    char two[3];
    std::snprintf(two, sizeof two, "%02x", b);
    token += two;
  }
  return token;
}

std::string make_token_file(const std::string& path) {
  std::string token = new_token();
  write_token_file(path, token);
  return token;
}

void write_token_file(const std::string& path, const std::string& token) {
  // A fresh file beside the old one, then renamed over it: never written through a link.
  const std::string fresh = path + ".new";
  ::unlink(fresh.c_str());
  int fd = ::open(fresh.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) fail(path, std::strerror(errno));
  std::string line = token + "\n";
  bool written = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  bool closed = ::close(fd) == 0;
  if (!written || !closed || ::rename(fresh.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(fresh.c_str());
    fail(path, std::strerror(e));
  }
}

std::string read_token_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) fail(path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, "not a regular file");
  }
  if (st.st_uid != ::geteuid() || (st.st_mode & (S_IRWXG | S_IRWXO))) {
    ::close(fd);
    fail(path, "others may read or write it (it must be this user's, mode 0600)");
  }
  char buf[256];
  ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  std::string token(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (token.size() < 16) fail(path, "holds no token (at least 16 characters)");
  return token;
}

std::string default_token_file(const std::string& log_dir) {
  if (const char* env = std::getenv("MANTA_TOKEN_FILE"); env && *env) return env;
  return log_dir + "/cluster.token";
}

}  // namespace manta::bridge

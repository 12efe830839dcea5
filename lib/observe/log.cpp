// observe/log.cpp: level from MANTA_LOG, lines written whole to stderr.
#include "observe/log.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace manta::log {
namespace {

level level_from_env() {
  const char* v = std::getenv("MANTA_LOG");
  if (!v) return level::warn;
  const char* names[] = {"error", "warn", "info", "debug", "trace"};
  for (int i = 0; i < 5; ++i)
    if (std::strcmp(v, names[i]) == 0) return static_cast<level>(i);
  return level::warn;
}

}  // namespace

std::string check_env_level() {
  const char* v = std::getenv("MANTA_LOG");
  if (!v) return {};
  for (const char* name : {"error", "warn", "info", "debug", "trace"})
    if (std::strcmp(v, name) == 0) return {};
  return std::string("MANTA_LOG=") + v + " is not a log level: use error, warn (the default), info, debug or trace";
}

bool enabled(level l) noexcept {
  static const level threshold = level_from_env();
  return l <= threshold;
}

line::~line() {
  static const char* names[] = {"error", "warn", "info", "debug", "trace"};
  std::string text = "[manta " + std::to_string(::getpid()) + " " +
                     names[static_cast<int>(level_)] + "] " + out_.str() + "\n";
  // One write per line so lines from several processes do not interleave.
  [[maybe_unused]] auto n = ::write(STDERR_FILENO, text.data(), text.size());
}

}  // namespace manta::log

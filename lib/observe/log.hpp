// observe/log.hpp: a small leveled logger. MANTA_LOG=error|warn|info|debug|trace sets
// the level at run time (default warn); trace lines compile out of release builds.
#pragma once

#include <sstream>
#include <string>

namespace manta::log {

enum class level { error = 0, warn = 1, info = 2, debug = 3, trace = 4 };

bool enabled(level l) noexcept;

/// Why MANTA_LOG's value is not a level ("" when it is, or is unset): init
/// refuses to start with it rather than log at a level nobody asked for.
std::string check_env_level();

/// One log line; written to stderr with the pid when destroyed.
class line {
 public:
  explicit line(level l) : level_(l) {}
  ~line();
  line(const line&) = delete;
  line& operator=(const line&) = delete;
  std::ostream& stream() { return out_; }

 private:
  level level_;
  std::ostringstream out_;
};

}  // namespace manta::log

// A for statement (not if/else) so the macro nests safely under an unbraced if.
#define MANTA_LOG_AT(lvl)                                                          \
  for (bool manta_log_on_ = ::manta::log::enabled(lvl); manta_log_on_; manta_log_on_ = false) \
  ::manta::log::line(lvl).stream()
#define MANTA_ERROR MANTA_LOG_AT(::manta::log::level::error)
#define MANTA_WARN MANTA_LOG_AT(::manta::log::level::warn)
#define MANTA_INFO MANTA_LOG_AT(::manta::log::level::info)
#define MANTA_DEBUG MANTA_LOG_AT(::manta::log::level::debug)
// Trace lines sit on hot paths: they exist in debug builds only.
#ifdef NDEBUG
#define MANTA_TRACE \
  for (bool manta_log_on_ = false; manta_log_on_; manta_log_on_ = false) \
  ::manta::log::line(::manta::log::level::trace).stream()
#else
#define MANTA_TRACE MANTA_LOG_AT(::manta::log::level::trace)
#endif

// observe/progress.cpp: drawing the bar: one line on stderr, redrawn in place.
#include <manta/detail/progress.hpp>

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace manta::detail {
namespace {

std::atomic<bool> progress_option{false};
/// One bar at a time owns the line: a second thread's wait, or a wait nested
/// in one with a bar (get inside map), stays silent. A bar that has not moved
/// for a while (an imap range the program stopped reading but keeps) loses it
/// to the next one.
std::atomic<const progress_bar*> line_owner{nullptr};
std::atomic<std::int64_t> line_touched{0};  ///< steady clock ns of the owner's last advance
/// Held by a bar while it writes, and by output written around it.
std::mutex terminal_mu;
std::string shown;  ///< the bar as last drawn ("\r..."), "" when none is on the line (terminal_mu)
constexpr std::int64_t stale_after_ns = 10'000'000'000;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool take_line(const progress_bar* bar) {
  const progress_bar* owner = nullptr;
  if (!line_owner.compare_exchange_strong(owner, bar) &&
      !(now_ns() - line_touched.load() > stale_after_ns && line_owner.compare_exchange_strong(owner, bar)))
    return false;
  line_touched.store(now_ns());
  if (owner) {  // taken from a stale bar: its last drawing stays where it is, and is drawn no more
    std::lock_guard lock(terminal_mu);
    if (!shown.empty()) {
      [[maybe_unused]] auto n = ::write(STDERR_FILENO, "\n", 1);
      shown.clear();
    }
  }
  return true;
}

/// A bar waits this long before it shows: a quick get draws nothing.
constexpr auto quiet_start = std::chrono::milliseconds(300);
constexpr auto redraw_every = std::chrono::milliseconds(100);

std::string clock_text(double seconds) {
  if (!(seconds >= 0) || seconds > 99 * 3600) return "?";
  auto s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

}  // namespace

bool progress_wanted() noexcept { return progress_option.load(std::memory_order_relaxed) && ::isatty(STDERR_FILENO); }

void set_progress(bool on) noexcept { progress_option.store(on, std::memory_order_relaxed); }

void write_around_progress(void (*write)(void*), void* context) {
  std::lock_guard lock(terminal_mu);
  if (shown.empty()) return write(context);
  static constexpr char clear[] = "\r\x1b[K";
  [[maybe_unused]] auto n = ::write(STDERR_FILENO, clear, sizeof clear - 1);
  write(context);
  n = ::write(STDERR_FILENO, shown.data(), shown.size());
}

progress_bar::progress_bar(std::size_t total, const char* what) noexcept
    : total_(total), what_(what), on_(total != 1 && progress_wanted()) {
  if (on_ && !take_line(this)) on_ = false;
  if (on_) {
    start_ = std::chrono::steady_clock::now();
    next_ = start_ + quiet_start;
  }
}

progress_bar::~progress_bar() {
  if (!on_ || line_owner.load() != this) return;  // (lost the line while idle)
  if (drawn_) draw(true);
  const progress_bar* self = this;
  line_owner.compare_exchange_strong(self, nullptr);
}

void progress_bar::draw(bool last) noexcept {
  auto now = std::chrono::steady_clock::now();
  if (!last && now < next_) return;
  if (line_owner.load() != this) {  // idle too long: another bar has the line now
    on_ = false;
    return;
  }
  line_touched.store(now_ns());
  next_ = now + redraw_every;
  double elapsed = std::chrono::duration<double>(now - start_).count();
  double rate = elapsed > 0 ? static_cast<double>(done_) / elapsed : 0;
  winsize ws{};
  int width = ::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 80;
  char tail[160];
  if (total_) {
    double left = rate > 0 ? static_cast<double>(total_ - std::min(done_, total_)) / rate : -1;
    std::snprintf(tail, sizeof tail, " %zu/%zu %3d%% %.1f/s elapsed %s eta %s", done_, total_,
                  static_cast<int>(100.0 * static_cast<double>(std::min(done_, total_)) / static_cast<double>(total_)),
                  rate, clock_text(elapsed).c_str(), last ? "0:00" : clock_text(left).c_str());
  } else {
    std::snprintf(tail, sizeof tail, " %zu done %.1f/s elapsed %s", done_, rate, clock_text(elapsed).c_str());
  }
  std::string line;
  line.reserve(256);
  line += '\r';
  line.append(what_);
  line += ' ';
  int bar = width - static_cast<int>(std::strlen(tail)) - static_cast<int>(std::strlen(what_)) - 4;
  if (total_ && bar >= 10) {
    bar = std::min(bar, 40);
    int full = static_cast<int>(static_cast<double>(bar) * static_cast<double>(std::min(done_, total_)) /
                                static_cast<double>(total_));
    line += '[';
    line.append(static_cast<std::size_t>(full), '#');
    line.append(static_cast<std::size_t>(bar - full), '.');
    line += ']';
  }
  line += tail;
  line += "\x1b[K";  // clear what a longer line left
  if (last) line += "\n";
  std::lock_guard lock(terminal_mu);
  [[maybe_unused]] auto n = ::write(STDERR_FILENO, line.data(), line.size());
  if (last) shown.clear();
  else shown = std::move(line);
  drawn_ = true;
}

}  // namespace manta::detail

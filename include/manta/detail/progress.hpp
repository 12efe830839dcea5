// detail/progress.hpp: the progress bar of long waits (options.progress, or
// MANTA_PROGRESS=1): get and wait of many refs, pool.map and imap. It draws
// on stderr only while stderr is a terminal, only once a wait has lasted a
// moment, and at most ten times a second; one bar at a time (other threads'
// waits, and waits nested in one, draw none); switched off, advancing it is an add.
#pragma once

#include <chrono>
#include <cstddef>

namespace manta::detail {

/// Whether long waits draw a bar: the option is on and stderr is a terminal.
bool progress_wanted() noexcept;
/// Sets the option (init does, from options.progress or MANTA_PROGRESS).
void set_progress(bool on) noexcept;

/// Runs `write`, which writes forwarded output to the terminal, with the bar's
/// line cleared first and the bar drawn again after it (as tqdm's write), so
/// output lands above the bar, never on its line. With no bar shown, just runs it.
void write_around_progress(void (*write)(void*), void* context);

class progress_bar {
 public:
  /// @param total  items to wait for; 0 if not known (no percentage, no ETA);
  ///               1 draws nothing (a single wait is not a progress)
  /// @param what   what is waited for: "get", "wait", "map", "imap"
  progress_bar(std::size_t total, const char* what) noexcept;
  ~progress_bar();
  progress_bar(const progress_bar&) = delete;
  progress_bar& operator=(const progress_bar&) = delete;

  void advance(std::size_t n = 1) noexcept {
    done_ += n;
    if (on_) draw(false);
  }
  void set(std::size_t done) noexcept {
    done_ = done;
    if (on_) draw(false);
  }
  bool on() const noexcept { return on_; }

 private:
  /// Draws if a tenth of a second passed since the last time (`last`: at the end).
  void draw(bool last) noexcept;

  std::size_t total_, done_ = 0;
  const char* what_;
  bool on_;
  bool drawn_ = false;  ///< something is on the line
  std::chrono::steady_clock::time_point start_, next_;
};

}  // namespace manta::detail

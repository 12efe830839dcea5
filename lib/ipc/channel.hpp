// ipc/channel.hpp: one direction of a pipe between two manta processes, with
// batched writes (outbox) and batched reads (inbox). A shared-memory sequence
// word, bumped after every write, lets the reader spin briefly without syscalls
// before it sleeps on the pipe; the pipe stays the blocking path and carries EOF.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "ipc/frame.hpp"

namespace manta::ipc {

/// What a writer does after each write so its reader notices without a syscall:
/// bump the reader's sequence words, and ring the reader's doorbell pipe if the
/// reader said it sleeps (bit 0 of `idle`; only one writer rings per sleep).
struct write_signal {
  std::atomic<std::uint32_t>* seq = nullptr;         ///< this channel's word
  std::atomic<std::uint32_t>* shared_seq = nullptr;  ///< one word for every channel to the reader
  std::atomic<std::uint32_t>* idle = nullptr;        ///< the reader's sleep word
  int doorbell = -1;
  void after_write() const noexcept;
};

/// Buffered frames waiting to be written to a pipe (non-blocking fd).
class outbox {
 public:
  outbox() = default;
  /// @param wait_when_full  block (in poll) until the reader makes room, instead
  ///                        of leaving the rest for a later flush
  outbox(int fd, write_signal signal, bool wait_when_full = false)
      : fd_(fd), signal_(signal), wait_when_full_(wait_when_full) {}

  std::string& buffer() noexcept { return buf_; }
  bool empty() const noexcept { return sent_ == buf_.size(); }
  std::size_t pending() const noexcept { return buf_.size() - sent_; }
  int fd() const noexcept { return fd_; }

  /// Writes what the pipe takes without blocking (or everything, on a blocking fd).
  /// @returns false if the reader is gone (EPIPE).
  bool flush();

 private:
  int fd_ = -1;
  write_signal signal_;
  bool wait_when_full_ = false;
  std::string buf_;
  std::size_t sent_ = 0;
};

/// Frames read from a pipe; frames are 8-aligned in the buffer.
class inbox {
 public:
  inbox() = default;
  explicit inbox(int fd);
  inbox(inbox&&) noexcept = default;
  inbox& operator=(inbox&&) noexcept = default;

  int fd() const noexcept { return fd_; }
  enum class status { data, empty, closed };
  /// Reads what is available without blocking (the fd is non-blocking).
  /// Invalidates frames returned earlier.
  status read_some();
  /// The next complete frame, if any. @throws protocol_error on a malformed header.
  bool next(frame& f);
  /// Bytes the receive buffer holds room for.
  std::size_t capacity() const noexcept { return cap_; }

 private:
  int fd_ = -1;
  std::unique_ptr<std::byte[]> buf_;
  std::size_t cap_ = 0, begin_ = 0, end_ = 0;
};

/// Spins (pausing, yielding) until `seq` differs from `seen` or `spin_ns` pass.
/// @returns true if it changed.
bool spin_for_change(const std::atomic<std::uint32_t>& seq, std::uint32_t seen,
                     std::int64_t spin_ns) noexcept;

/// How long readers spin before sleeping on their pipe (MANTA_SPIN_US, default 50).
std::int64_t spin_budget_ns() noexcept;

/// A spin that adapts to how long waits turn out to be: it grows back to the full
/// budget when spinning caught the event and halves when it had to sleep anyway,
/// so a process that waits in vain stops taking CPU from the ones doing work.
class adaptive_spin {
 public:
  /// Spins until `seq` differs from `seen`; false if it gave up (the caller sleeps).
  bool wait_for_change(const std::atomic<std::uint32_t>& seq, std::uint32_t seen) noexcept;

 private:
  std::int64_t ns_ = spin_budget_ns();
};

/// Blocks until fd is readable or timeout_ms passes (-1 = forever).
void wait_readable(int fd, int timeout_ms) noexcept;

/// Makes a pipe pair with the given capacity; both ends close-on-exec.
void make_pipe(int fds[2], int capacity);
void set_nonblocking(int fd, bool on);

}  // namespace manta::ipc

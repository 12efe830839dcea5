// ipc/channel.cpp: batched pipe reads and writes, and the bounded spin before sleeping.
#include "ipc/channel.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <system_error>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MANTA_CPU_PAUSE() _mm_pause()
#else
#define MANTA_CPU_PAUSE() ((void)0)
#endif

namespace manta::ipc {

void write_signal::after_write() const noexcept {
  if (seq) seq->fetch_add(1, std::memory_order_release);
  if (shared_seq) shared_seq->fetch_add(1, std::memory_order_seq_cst);
  if (!idle) return;
  // Dekker-style with the reader: it sets idle, then checks the sequence words.
  std::uint32_t v = idle->load(std::memory_order_seq_cst);
  if ((v & 1) && idle->compare_exchange_strong(v, v & ~1u)) {
    char one = 1;
    [[maybe_unused]] auto n = ::write(doorbell, &one, 1);
  }
}

bool outbox::flush() {
  while (sent_ < buf_.size()) {
    ssize_t n = ::write(fd_, buf_.data() + sent_, buf_.size() - sent_);
    if (n > 0) {
      sent_ += static_cast<std::size_t>(n);
      signal_.after_write();
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      if (!wait_when_full_) break;
      pollfd p{fd_, POLLOUT, 0};
      ::poll(&p, 1, -1);
      continue;
    }
    return false;  // EPIPE or another fatal error: the reader is gone
  }
  if (sent_ == buf_.size()) {
    buf_.clear();
    sent_ = 0;
  } else if (sent_ > (1u << 20) && sent_ * 2 > buf_.size()) {
    buf_.erase(0, sent_);  // keep the buffer from growing without bound
    sent_ = 0;
  }
  return true;
}

inbox::inbox(int fd) : fd_(fd), buf_(new std::byte[1 << 16]), cap_(1 << 16) {}

inbox::status inbox::read_some() {
  if (begin_ == end_) {
    begin_ = end_ = 0;
  } else if (begin_ > 0 && (cap_ - end_) < (cap_ / 4)) {
    std::memmove(buf_.get(), buf_.get() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  // Grow when the frame being received does not fit, doubling only as its bytes
  // arrive: a header claiming a huge frame costs nothing until the bytes come.
  if (end_ - begin_ >= sizeof(frame_header) && end_ == cap_) {
    frame_header h;
    std::memcpy(&h, buf_.get() + begin_, sizeof h);
    std::size_t need = sizeof h + pad8(h.size);
    if (h.size <= max_frame_bytes && need > cap_ - begin_) {
      std::size_t cap = std::min(cap_ * 2, std::max(need, cap_));
      std::unique_ptr<std::byte[]> grown(new std::byte[cap]);
      std::memcpy(grown.get(), buf_.get() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
      buf_ = std::move(grown);
      cap_ = cap;
    }
  }
  if (end_ == cap_) return status::data;  // full: let the caller consume first
  for (;;) {
    ssize_t n = ::read(fd_, buf_.get() + end_, cap_ - end_);
    if (n > 0) {
      end_ += static_cast<std::size_t>(n);
      return status::data;
    }
    if (n == 0) return status::closed;
    if (errno == EINTR) continue;
    if (errno == EAGAIN) return status::empty;
    return status::closed;
  }
}

bool inbox::next(frame& f) {
  if (end_ - begin_ < sizeof(frame_header)) return false;
  frame_header h;
  std::memcpy(&h, buf_.get() + begin_, sizeof h);
  if (h.size > max_frame_bytes) throw protocol_error("manta: oversized frame");
  std::size_t total = sizeof h + pad8(h.size);
  if (end_ - begin_ < total) return false;
  f.type = h.type;
  f.body = buf_.get() + begin_ + sizeof h;
  f.size = h.size;
  begin_ += total;
  return true;
}

bool spin_for_change(const std::atomic<std::uint32_t>& seq, std::uint32_t seen,
                     std::int64_t spin_ns) noexcept {
  if (spin_ns <= 0) return false;
  auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(spin_ns);
  for (unsigned i = 1;; ++i) {
    if (seq.load(std::memory_order_acquire) != seen) return true;
    MANTA_CPU_PAUSE();
    if ((i & 63) == 0) {
      // Yield so a spinner never starves the process it waits for on a shared core.
      sched_yield();
      if (std::chrono::steady_clock::now() >= until) return false;
    }
  }
}

std::int64_t spin_budget_ns() noexcept {
  static const std::int64_t ns = [] {
    const char* v = std::getenv("MANTA_SPIN_US");
    return (v ? std::atoll(v) : 50) * 1000;
  }();
  return ns;
}

bool adaptive_spin::wait_for_change(const std::atomic<std::uint32_t>& seq,
                                    std::uint32_t seen) noexcept {
  const std::int64_t budget = spin_budget_ns();
  if (spin_for_change(seq, seen, ns_)) {
    ns_ = std::min(budget, ns_ * 2 + 1000);
    return true;
  }
  ns_ = std::max<std::int64_t>(std::min<std::int64_t>(budget, 1000), ns_ / 2);
  return false;
}

void wait_readable(int fd, int timeout_ms) noexcept {
  pollfd p{fd, POLLIN, 0};
  while (::poll(&p, 1, timeout_ms) < 0 && errno == EINTR) {
  }
}

void make_pipe(int fds[2], int capacity) {
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe2");
  if (capacity > 0) ::fcntl(fds[1], F_SETPIPE_SZ, capacity);  // best effort
}

void set_nonblocking(int fd, bool on) {
  int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

}  // namespace manta::ipc

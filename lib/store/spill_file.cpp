// store/spill_file.cpp: an unlinked, append-only file with ranges punched out.
#include "store/spill_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>

#include "ipc/owned_fds.hpp"

namespace manta::store {
namespace {
/// Ranges start on block boundaries, so punching one frees whole blocks.
constexpr std::uint64_t block = 4096;

std::uint64_t round_up(std::uint64_t n) { return (n + block - 1) / block * block; }
}  // namespace

spill_file::~spill_file() {
  if (fd_ >= 0) {
    ipc::disown_fd(fd_);
    ::close(fd_);
  }
}

void spill_file::open() {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw std::system_error(ec, "cannot create the spill directory " + dir_);
  // An anonymous file where the filesystem allows it; otherwise a named one, unlinked at once.
  fd_ = ::open(dir_.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd_ < 0) {
    std::string path = dir_ + "/spill-" + std::to_string(::getpid()) + "-XXXXXX";
    fd_ = ::mkostemp(path.data(), O_CLOEXEC);
    if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "cannot create a spill file in " + dir_);
    ::unlink(path.c_str());
  }
  ipc::own_fd(fd_);
}

std::uint64_t spill_file::write(const void* data, std::size_t size) {
  if (fd_ < 0) open();
  const std::uint64_t at = end_;
  const auto* p = static_cast<const char*>(data);
  std::size_t done = 0;
  while (done < size) {
    ssize_t n = ::pwrite(fd_, p + done, size - done, static_cast<off_t>(at + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : ENOSPC;
      // Give back what was written; the file ends where it did.
      if (::ftruncate(fd_, static_cast<off_t>(at)) != 0) punch(at, done);
      throw std::system_error(err, std::generic_category(),
                              "cannot spill " + std::to_string(size) + " bytes to " + dir_);
    }
    done += static_cast<std::size_t>(n);
  }
  end_ = round_up(at + size);
  ++ranges_;
  return at;
}

void spill_file::read(std::uint64_t at, void* data, std::size_t size) const {
  auto* p = static_cast<char*>(data);
  std::size_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(fd_, p + done, size - done, static_cast<off_t>(at + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw std::system_error(n < 0 ? errno : EIO, std::generic_category(),
                              "cannot read a spilled object back from " + dir_);
    done += static_cast<std::size_t>(n);
  }
}

void spill_file::release(std::uint64_t at, std::size_t size) noexcept {
  if (fd_ < 0) return;
  if (ranges_ > 0 && --ranges_ == 0) {
    // Nothing left in it: start again from an empty file.
    if (::ftruncate(fd_, 0) == 0) end_ = 0;
    return;
  }
  punch(at, size);
}

void spill_file::punch(std::uint64_t at, std::size_t size) noexcept {
  // Best effort: a filesystem without hole punching frees the space when the
  // file empties instead.
  ::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(at),
              static_cast<off_t>(round_up(size)));
}

std::uint64_t spill_file::disk_bytes() const noexcept {
  struct stat st{};
  if (fd_ < 0 || ::fstat(fd_, &st) != 0) return 0;
  return static_cast<std::uint64_t>(st.st_blocks) * 512;
}

}  // namespace manta::store

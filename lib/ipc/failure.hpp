// ipc/failure.hpp: what a failed task leaves in place of its results, and the one
// mapping between failures and manta's public exceptions (both directions).
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <string>

namespace manta::ipc {

/// Every way a task or object can fail; each maps to one public exception.
enum class error_kind : std::uint8_t {
  task_exception = 0,     ///< the task threw: task_error
  worker_crashed = 1,     ///< its process died past max_retries: worker_crashed_error
  actor_died = 2,         ///< its actor is gone: actor_died_error
  object_store_full = 3,  ///< no room for a value: object_store_full
  usage = 4,              ///< the request itself was wrong: usage_error
  cancelled = 5,          ///< manta::cancel: task_cancelled_error
  node_died = 6,          ///< the node's processes are gone for good: node_died_error
  timeout = 7,            ///< it ran past its .timeout(d): timeout_error
  out_of_memory = 8,      ///< the memory monitor killed it past max_retries: out_of_memory_error
};
inline constexpr std::uint8_t last_error_kind = 8;

/// A failure as it travels between processes.
struct error_info {
  error_kind kind = error_kind::task_exception;
  std::string remote_type, message, function, chain;
  std::int32_t pid = 0;
  std::int32_t signal = 0;
  std::string stack;  ///< where it happened, one frame per line, when known
};

/// Throws the public exception matching `e`.
[[noreturn]] void throw_error(const error_info& e);

/// The failure a task leaves when `current` (an exception caught while it ran,
/// in process `pid`) escaped it; manta's own errors keep their kind and chain.
error_info error_from_exception(std::exception_ptr current, const std::string& function,
                                std::int32_t pid);

/// A failure as the driver stores it in place of an object's value. A task that
/// fails because an argument failed adds one link naming itself, sharing the
/// rest: failing a chain of n tasks costs O(n), not O(n^2).
class failure {
 public:
  /// A root cause.
  explicit failure(error_info root) : root_(std::move(root)) {}
  /// `dependent` failed because `cause` did.
  failure(std::string dependent, std::shared_ptr<const failure> cause)
      : dependent_(std::move(dependent)), cause_(std::move(cause)) {}
  ~failure();
  failure(const failure&) = delete;
  failure& operator=(const failure&) = delete;

  /// The error with its chain spelled out, outermost first ("c <- b <- a"); very
  /// long chains keep their ends and say how many links were left out.
  error_info describe() const;
  error_kind kind() const noexcept { return root().root_.kind; }

 private:
  const failure& root() const noexcept;
  error_info root_;
  std::string dependent_;
  mutable std::shared_ptr<const failure> cause_;  ///< mutable: the destructor unlinks it
};

using failure_ptr = std::shared_ptr<const failure>;

inline failure_ptr make_failure(error_info e) { return std::make_shared<failure>(std::move(e)); }
inline failure_ptr chain_failure(const failure_ptr& cause, std::string dependent) {
  return std::make_shared<failure>(std::move(dependent), cause);
}

}  // namespace manta::ipc

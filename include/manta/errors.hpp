// errors.hpp: the exceptions manta's public API throws, all rooted at manta::error.
#pragma once

#include <stdexcept>
#include <string>

namespace manta {

/// Base of every exception manta throws. Catch this to handle any manta failure.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The API was used wrongly: init twice, a call after shutdown, an unregistered
/// function, a ref from another runtime, a type mismatch. The runtime keeps working.
class usage_error : public error {
 public:
  using error::error;
};

/// `get` or `wait` with a timeout ran out before the object was ready.
class timeout_error : public error {
 public:
  using error::error;
};

/// The object store has no room for a value and nothing can be freed.
class object_store_full : public error {
 public:
  using error::error;
};

/// A task (or a task it depended on) threw. Carries the remote exception's type
/// and message, the function that threw and the pid of the process it ran in.
class task_error : public error {
 public:
  /// @param remote_type demangled type of the exception thrown remotely
  /// @param message     its what()
  /// @param function    name of the task that threw
  /// @param pid         process the task ran in
  /// @param chain       the tasks the failure travelled through, outermost first ("" if none)
  /// @param stack       where it was thrown, one frame per line ("" if not known)
  task_error(std::string remote_type, std::string message, std::string function, int pid,
             std::string chain = {}, std::string stack = {})
      : error("task '" + function + "' (pid " + std::to_string(pid) + ") threw " + remote_type +
              ": " + message + (chain.empty() ? "" : " [failed through: " + chain + "]") +
              (stack.empty() ? "" : "\nthrown at:\n" + stack)),
        remote_type_(std::move(remote_type)),
        message_(std::move(message)),
        function_(std::move(function)),
        chain_(std::move(chain)),
        stack_(std::move(stack)),
        pid_(pid) {}

  const std::string& remote_type() const noexcept { return remote_type_; }
  const std::string& message() const noexcept { return message_; }
  const std::string& function_name() const noexcept { return function_; }
  int pid() const noexcept { return pid_; }
  /// Tasks that failed because this one did, outermost first, separated by " <- ".
  const std::string& chain() const noexcept { return chain_; }
  /// Where the exception was thrown inside the task, one "#n function at
  /// file:line" per line (file and line with debug information), or "" when it
  /// could not be had (thrown inside a compiled library, or rethrown with
  /// std::rethrow_exception; local_mode).
  const std::string& stack() const noexcept { return stack_; }

 private:
  std::string remote_type_, message_, function_, chain_, stack_;
  int pid_;
};

/// The process running a task died (signal or exit) more often than `max_retries` allowed.
class worker_crashed_error : public error {
 public:
  worker_crashed_error(const std::string& what, std::string function, int pid, int signal,
                       std::string stack = {})
      : error(what + (stack.empty() ? "" : "\nstack of the crashing thread:\n" + stack)),
        function_(std::move(function)),
        stack_(std::move(stack)),
        pid_(pid),
        signal_(signal) {}

  const std::string& function_name() const noexcept { return function_; }
  int pid() const noexcept { return pid_; }
  /// The signal that ended the worker, 0 if it exited normally.
  int signal() const noexcept { return signal_; }
  /// The crashing thread's stack, one "#n function at file:line" per line
  /// (file and line when the binary has debug information), or "" if the
  /// worker died without writing it (SIGKILL, or killed by the runtime).
  const std::string& stack() const noexcept { return stack_; }

 private:
  std::string function_, stack_;
  int pid_, signal_;
};

/// The task was cancelled with manta::cancel, or depended on one that was.
class task_cancelled_error : public error {
 public:
  using error::error;
};

/// The actor a call was sent to is gone (killed, crashed past max_restarts, or its constructor threw).
class actor_died_error : public error {
 public:
  using error::error;
};

/// The memory monitor killed the task's process (the machine's memory was above
/// options.memory_threshold) more often than its max_retries allowed. The message
/// says how much memory the machine and the task's process used.
class out_of_memory_error : public error {
 public:
  using error::error;
};

/// The node that held a task, an object or an actor was lost and what it held
/// could not be rebuilt: on one node, the runtime's own processes (its zygote)
/// are gone, so nothing more can run until `shutdown` and a new `init`.
class node_died_error : public error {
 public:
  using error::error;
};

}  // namespace manta

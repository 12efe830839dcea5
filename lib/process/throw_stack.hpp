// process/throw_stack.hpp: where a task's exception was thrown. While a task
// runs, every throw on its thread records the thrower's stack (raw addresses,
// a few microseconds) and the thrown object; when an exception leaves the
// task, the stack recorded for that very object is named and sent with the
// error. Exceptions rethrown with std::rethrow_exception keep the stack of
// their first throw only while no other throw came between.
#pragma once

#include <string>

namespace manta::process {

/// Records throws on this thread while alive; nests (a task run inside a task
/// that waits), each scope restoring what was there before it.
class throw_recording {
 public:
  throw_recording() noexcept;
  ~throw_recording();
  throw_recording(const throw_recording&) = delete;
  throw_recording& operator=(const throw_recording&) = delete;
  /// Stops recording (before naming frames, which may throw inside).
  void stop() noexcept;

 private:
  bool was_armed_;
  bool stopped_ = false;
};

/// The named stack of the exception being handled now, if a throw recorded on
/// this thread threw that very object; else "".
std::string take_throw_stack();

}  // namespace manta::process

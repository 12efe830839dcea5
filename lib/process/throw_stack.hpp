// process/throw_stack.hpp: where a task's exception was thrown. While a task
// runs, every throw on its thread records the thrower's stack (raw addresses,
// a few microseconds); when an exception leaves the task, the stack of the
// throw that made it (matched by type) is named and sent with the error.
// Exceptions rethrown with std::rethrow_exception, or thrown by a library
// that binds __cxa_throw inside itself, have none (libstdc++'s own throws,
// as vector::at's, do go through the hook).
#pragma once

#include <string>
#include <typeinfo>

namespace manta::process {

/// Records throws on this thread from now on, forgetting any earlier one.
void arm_throw_stacks() noexcept;
/// Stops recording on this thread.
void disarm_throw_stacks() noexcept;
/// The named stack of the last throw recorded on this thread if it threw the
/// exception being handled now (of type `escaping`), else "".
std::string take_throw_stack(const std::type_info* escaping);

}  // namespace manta::process

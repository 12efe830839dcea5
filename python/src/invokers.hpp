// python/src/invokers.hpp: the worker side of the Python front (invokers.cpp).
#pragma once

#include "process/zygote.hpp"

namespace manta::python {

/// Makes the runtime's forks respect the interpreter (PyOS_BeforeFork and
/// PyOS_AfterFork_*), and releases the GIL in the processes they start.
void install_fork_hooks();

}  // namespace manta::python

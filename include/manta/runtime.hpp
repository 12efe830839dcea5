// runtime.hpp: starting and stopping the local runtime.
#pragma once

#include <manta/options.hpp>

namespace manta {

/// Start the local runtime: map the object arena, fork the zygote while the
/// process is still single-threaded, start the runtime's threads, fork the workers.
/// Call it from the main thread before starting threads of your own.
/// @throws usage_error if already initialized (unless `ignore_reinit`), or if
///         called inside a task.
void init(const options& opts = {});

/// Stop the runtime: end every worker, release the arena. Objects and refs held
/// afterwards become unusable (usage_error). Also runs at process exit. Idempotent.
void shutdown();

/// True between `init` and `shutdown` in the driver, and always inside a task.
bool is_initialized() noexcept;

}  // namespace manta

// manta.hpp: everything a user needs. Ray's programming model for C++: remote
// functions, futures (object_ref), a shared-memory object store and process pools.
#pragma once

#include <manta/actor.hpp>
#include <manta/actor_pool.hpp>
#include <manta/as_completed.hpp>
#include <manta/buffer.hpp>
#include <manta/errors.hpp>
#include <manta/nodes.hpp>
#include <manta/object_ref.hpp>
#include <manta/options.hpp>
#include <manta/pool.hpp>
#include <manta/queue.hpp>
#include <manta/registry.hpp>
#include <manta/runtime.hpp>
#include <manta/serialization.hpp>
#include <manta/stream.hpp>
#include <manta/task.hpp>
#include <manta/version.hpp>

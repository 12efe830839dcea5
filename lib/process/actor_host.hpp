// process/actor_host.hpp: the role of a process hosting an actor.
#pragma once

namespace manta::process {

class worker_context;

/// Runs the hosted actor's calls until the driver goes away; never returns.
/// Calls run in the order they arrive and never nest (a method waiting in get
/// holds back the ones behind it); with max_concurrency > 1, this thread only
/// reads the pipe while executor threads run the calls: 16 start with the
/// host, more (up to max_concurrency) when every one is busy.
[[noreturn]] void host_actor(worker_context& ctx);

}  // namespace manta::process

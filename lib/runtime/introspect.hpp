// runtime/introspect.hpp: what the node holds right now, for tests and tools.
#pragma once
#include <manta/detail/introspect.hpp>

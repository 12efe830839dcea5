// manta/version.hpp: the version of these headers (CMake's project version is
// read from here), and of the library a program links.
#pragma once

#define MANTA_VERSION_MAJOR 0
#define MANTA_VERSION_MINOR 1
#define MANTA_VERSION_PATCH 0
#define MANTA_VERSION "0.1.0"

namespace manta {

/// The version of the library this program links, "MAJOR.MINOR.PATCH"
/// (MANTA_VERSION is the headers': they differ only when installs are mixed).
const char* version() noexcept;

}  // namespace manta

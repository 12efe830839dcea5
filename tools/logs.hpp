// tools/logs.hpp: `manta logs`, the output each worker and actor host kept in
// log_dir (worker-<pid>.log, and .log.old once it rotated), as `ray logs`.
#pragma once

#include <string>

namespace manta::tools {

struct logs_options {
  std::string log_dir;
  int pid = 0;          ///< the process whose log to print; 0: list the logs
  bool follow = false;  ///< after printing, print what it writes until it ends (or Ctrl-C)
};

/// Prints a log (or the list of them). @returns the exit status
/// @throws std::runtime_error naming what is missing
int show_logs(const logs_options& o);

}  // namespace manta::tools

// tools/dashboard.hpp: `manta dashboard`, a small HTTP server on loopback
// (Boost.Beast) in front of one runtime's control socket. Every URL carries a
// random token the tool prints; without it the answer is 403.
//   /             the page: status, processes, objects, a live throughput chart
//   /chart.js     Chart.js from Debian's libjs-chart.js (the page needs no network)
//   /api/status   the runtime's status JSON (as `manta status --json`)
//   /api/memory   the runtime's memory JSON (as `manta memory --json`)
//   /api/summary  per-function counts and run times (as `manta summary --json`)
//   /metrics      Prometheus text metrics (observe/metrics.hpp)
#pragma once

#include <string>


namespace manta::tools {

struct dashboard_options {
  std::string socket;          ///< the runtime's control socket
  unsigned short port = 0;     ///< 0: any free port
  std::string chart_js = "/usr/share/javascript/chart.js/chart.min.js";
  bool exit_with_runtime = true;  ///< stop serving once the runtime's socket is gone
};

/// Serves until SIGINT or SIGTERM (or the runtime ends); prints the URL first.
/// @returns the process's exit status
int run_dashboard(const dashboard_options& o);

}  // namespace manta::tools

// observe/metrics.hpp: a runtime's numbers in Prometheus's text exposition
// format (version 0.0.4), from the JSON its control socket answers: "status"
// for the node, "summary" for each function. Served by `manta dashboard` at
// /metrics, and by the runtime itself under MANTA_METRICS_ADDRESS.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

namespace manta::observe {

/// The metrics of a status document, and of a summary's functions when
/// `summary` is an object (per-function task counts, a run-time histogram).
std::string prometheus_metrics(const nlohmann::json& status, const nlohmann::json& summary);

}  // namespace manta::observe

// observe/metrics.cpp: Prometheus text metrics of a runtime.
#include "observe/metrics.hpp"

#include <cstdio>

#include <nlohmann/json.hpp>

namespace manta::observe {
namespace {

using nlohmann::json;

std::string number(double v) {
  char s[32];
  std::snprintf(s, sizeof s, "%.17g", v);
  return s;
}

/// A label's value, escaped as the format asks (backslash, quote, newline).
std::string escaped(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, const std::string& labels, double value) {
  out += name + labels + " " + number(value) + "\n";
}

void metric(std::string& out, const std::string& name, const char* type, const char* help, double value) {
  header(out, name, type, help);
  sample(out, name, "", value);
}

void function_metrics(std::string& out, const json& summary) {
  const json& functions = summary.at("functions");
  if (functions.empty()) return;
  auto label = [](const json& f) { return "{function=\"" + escaped(f.at("name").get<std::string>()) + "\""; };
  header(out, "manta_function_tasks_finished_total", "counter", "Tasks and calls that finished, by function.");
  for (const json& f : functions)
    sample(out, "manta_function_tasks_finished_total", label(f) + "}", f.at("finished").get<double>());
  header(out, "manta_function_tasks_failed_total", "counter", "Tasks and calls that failed for good, by function.");
  for (const json& f : functions)
    sample(out, "manta_function_tasks_failed_total", label(f) + "}", f.at("failed").get<double>());
  header(out, "manta_function_tasks_running", "gauge", "Tasks and calls on a worker now, by function.");
  for (const json& f : functions)
    sample(out, "manta_function_tasks_running", label(f) + "}", f.at("running").get<double>());
  const json& bounds = summary.at("bucket_bounds_s");
  header(out, "manta_task_duration_seconds", "histogram", "How long runs of each function took.");
  for (const json& f : functions) {
    const json& buckets = f.at("buckets");
    double cumulative = 0;
    for (std::size_t i = 0; i < buckets.size(); ++i) {
      cumulative += buckets[i].get<double>();
      const std::string le = i < bounds.size() ? number(bounds[i].get<double>()) : "+Inf";
      sample(out, "manta_task_duration_seconds_bucket", label(f) + ",le=\"" + le + "\"}", cumulative);
    }
    sample(out, "manta_task_duration_seconds_sum", label(f) + "}", f.at("total_s").get<double>());
    sample(out, "manta_task_duration_seconds_count", label(f) + "}", f.at("runs").get<double>());
  }
}

}  // namespace

std::string prometheus_metrics(const json& s, const json& summary) {
  std::string out;
  const json& t = s.at("tasks");
  metric(out, "manta_tasks_finished_total", "counter", "Tasks and actor calls that finished.",
         t.at("finished").get<double>());
  metric(out, "manta_tasks_failed_total", "counter", "Tasks and actor calls whose results failed.",
         t.at("failed").get<double>());
  metric(out, "manta_task_retries_total", "counter", "Runs retried after a crash or an exception.",
         t.at("retried").get<double>());
  header(out, "manta_tasks", "gauge", "Tasks not finished, by state.");
  for (const char* state : {"running", "queued", "waiting_for_arguments"})
    sample(out, "manta_tasks", std::string("{state=\"") + state + "\"}", t.at(state).get<double>());
  metric(out, "manta_pool_workers", "gauge", "Worker processes in the pool.", s.at("pool_workers").get<double>());
  metric(out, "manta_busy_workers", "gauge", "Pool workers running a task.", s.at("busy_workers").get<double>());
  if (s.contains("extra_workers"))
    metric(out, "manta_extra_workers", "gauge", "Workers started while pool workers wait in get.",
           s.at("extra_workers").get<double>());
  metric(out, "manta_actors", "gauge", "Actors the runtime knows.", static_cast<double>(s.at("actors").size()));
  const json& o = s.at("objects");
  metric(out, "manta_objects", "gauge", "Objects in the directory.", o.at("count").get<double>());
  metric(out, "manta_arena_used_bytes", "gauge", "Bytes of the shared-memory arena in use.",
         o.at("arena_used_bytes").get<double>());
  metric(out, "manta_arena_capacity_bytes", "gauge", "Size of the shared-memory arena.",
         o.at("arena_capacity_bytes").get<double>());
  metric(out, "manta_spilled_objects", "gauge", "Objects in the spill file.", o.at("spilled_objects").get<double>());
  metric(out, "manta_spilled_bytes", "gauge", "Bytes the spill file occupies.", o.at("spilled_bytes").get<double>());
  metric(out, "manta_processes_lost_total", "counter", "Workers and actor hosts that died unasked.",
         s.at("processes_lost").get<double>());
  // A gauge must not end in _total (promtool): what the node offers is its capacity.
  header(out, "manta_resource_capacity", "gauge", "Resources the node offers.");
  for (const auto& [name, total] : s.at("resources").at("total").items())
    sample(out, "manta_resource_capacity", "{resource=\"" + escaped(name) + "\"}", total.get<double>());
  header(out, "manta_resource_available", "gauge", "Resources not taken.");
  for (const auto& [name, avail] : s.at("resources").at("available").items())
    sample(out, "manta_resource_available", "{resource=\"" + escaped(name) + "\"}", avail.get<double>());
  if (summary.is_object()) function_metrics(out, summary);
  return out;
}

}  // namespace manta::observe

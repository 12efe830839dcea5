// tools/manta.cpp: the manta command line. It talks to a running runtime over
// its control socket (observe/control_socket.hpp): status, summary, memory,
// timeline, dashboard.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <string>

#include <CLI/CLI.hpp>
#include <manta/version.hpp>
#include <nlohmann/json.hpp>

#include "observe/control_socket.hpp"
#include "tools/cluster.hpp"
#include "tools/dashboard.hpp"
#include "tools/logs.hpp"

namespace {

using nlohmann::json;

struct target {
  std::string address;  ///< a socket path, or a driver's pid
  std::string log_dir = manta::observe::default_log_dir();
};

/// The socket to ask: --address (a path or a pid), else the only runtime in log_dir.
/// @throws std::runtime_error naming what to do when there is none, or several.
std::string resolve(const target& t) {
  auto found = manta::observe::find_runtimes(t.log_dir);
  if (!t.address.empty()) {
    if (t.address.find_first_not_of("0123456789") != std::string::npos) return t.address;
    for (const auto& r : found)
      if (std::to_string(r.pid) == t.address) return r.socket;
    throw std::runtime_error("no manta runtime of pid " + t.address + " answers in " + t.log_dir);
  }
  if (found.empty())
    throw std::runtime_error("no manta runtime answers in " + t.log_dir +
                             " (is one running? give --log-dir if it uses another log_dir)");
  if (found.size() > 1) {
    std::string list;
    for (const auto& r : found) list += "\n  pid " + std::to_string(r.pid) + "  " + r.socket;
    throw std::runtime_error("several manta runtimes answer in " + t.log_dir + "; choose one with --address:" + list);
  }
  return found[0].socket;
}

json ask_json(const target& t, const std::string& request, int timeout_ms = 10000) {
  std::string reply = manta::observe::ask(resolve(t), request, timeout_ms);
  json j = json::parse(reply);
  if (j.contains("error")) throw std::runtime_error("the runtime says: " + j["error"].get<std::string>());
  return j;
}

/// A byte count in IEC units (powers of 1024: KiB, MiB, GiB, TiB).
std::string bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", b, units[u]);
  return buf;
}

void print_status(const json& s) {
  const json& rt = s["runtime"];
  std::printf("manta runtime: driver pid %d, up %.1f s, log_dir %s\n", rt["pid"].get<int>(),
              rt["uptime_s"].get<double>(), rt["log_dir"].get<std::string>().c_str());
  std::printf("\n%-5s %-8s %-7s %-8s %s\n", "SLOT", "PID", "KIND", "STATE", "RUNNING");
  for (const auto& p : s["processes"]) {
    std::string current;
    for (const auto& t : p["current"]) current += (current.empty() ? "" : ", ") + t.get<std::string>();
    if (p.contains("actor")) current = p["actor"].get<std::string>() + (current.empty() ? "" : ": " + current);
    std::printf("%-5d %-8d %-7s %-8s %s\n", p["slot"].get<int>(), p["pid"].get<int>(),
                p["kind"].get<std::string>().c_str(), p["state"].get<std::string>().c_str(), current.c_str());
  }
  const json& t = s["tasks"];
  std::printf("\ntasks: %llu running, %llu queued, %llu waiting for arguments; %llu finished, %llu failed, %llu retried\n",
              t["running"].get<unsigned long long>(), t["queued"].get<unsigned long long>(),
              t["waiting_for_arguments"].get<unsigned long long>(), t["finished"].get<unsigned long long>(),
              t["failed"].get<unsigned long long>(), t["retried"].get<unsigned long long>());
  std::string res;
  for (const auto& [name, total] : s["resources"]["total"].items()) {
    double avail = s["resources"]["available"].value(name, 0.0);
    char buf[160];
    double used = total.get<double>() - avail;
    if (name == "memory")
      std::snprintf(buf, sizeof buf, "%s%s %s of %s in use", res.empty() ? "" : ", ", name.c_str(),
                    bytes(used).c_str(), bytes(total.get<double>()).c_str());
    else
      std::snprintf(buf, sizeof buf, "%s%s %g of %g in use", res.empty() ? "" : ", ", name.c_str(), used,
                    total.get<double>());
    res += buf;
  }
  std::printf("resources: %s\n", res.c_str());
  if (const json& actors = s["actors"]; !actors.empty()) {
    std::printf("actors: %zu", actors.size());
    if (actors.size() <= 5) {
      for (const auto& a : actors)
        std::printf("; %s (%s, %zu queued)", a["class"].get<std::string>().c_str(),
                    a["state"].get<std::string>().c_str(), a["queued_calls"].get<std::size_t>());
    } else {  // hundreds of actors: how many in each state (--json lists them)
      std::map<std::string, int> states;
      for (const auto& a : actors) ++states[a["state"].get<std::string>()];
      for (const auto& [state, count] : states) std::printf("; %d %s", count, state.c_str());
    }
    std::printf("\n");
  }
  const json& o = s["objects"];
  std::printf("objects: %llu; arena %s of %s in use; spilled %llu (%s on disk)\n",
              o["count"].get<unsigned long long>(), bytes(o["arena_used_bytes"].get<double>()).c_str(),
              bytes(o["arena_capacity_bytes"].get<double>()).c_str(), o["spilled_objects"].get<unsigned long long>(),
              bytes(o["spilled_bytes"].get<double>()).c_str());
  std::printf("processes lost: %llu, actor restarts: %llu\n", s["processes_lost"].get<unsigned long long>(),
              s["actor_restarts"].get<unsigned long long>());
  // (Absent from a runtime older than the waiting rule.)
  if (s.contains("extra_workers"))
    std::printf("extra workers (started while workers wait in get): %llu now, %llu since start\n",
                s["extra_workers"].get<unsigned long long>(), s["extra_workers_started"].get<unsigned long long>());
}

/// The pid of the host of the actor named `name`, from a status document.
/// @throws std::runtime_error when no live actor has that name
int actor_pid(const json& status, const std::string& name) {
  bool named = false;  // (a dead one may keep its name while referenced, beside a new live one)
  for (const auto& a : status["actors"])
    if (a.value("name", "") == name) {
      named = true;
      if (a.contains("pid")) return a["pid"].get<int>();
    }
  if (named) throw std::runtime_error("the actor '" + name + "' has no live process now");
  throw std::runtime_error("no actor is named '" + name + "' (manta status lists the actors)");
}

/// A duration for people: 850 us, 12.3 ms, 4.56 s.
std::string seconds_text(double s) {
  char buf[32];
  if (s < 1e-3) std::snprintf(buf, sizeof buf, "%.0f us", s * 1e6);
  else if (s < 1) std::snprintf(buf, sizeof buf, "%.1f ms", s * 1e3);
  else std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

void print_summary(const json& j) {
  const json& functions = j["functions"];
  if (functions.empty()) {
    std::printf("no task has run yet\n");
    return;
  }
  std::printf("%-40s %10s %8s %8s %10s %10s %10s\n", "FUNCTION", "FINISHED", "FAILED", "RUNNING", "MEAN", "P95",
              "TOTAL");
  for (const auto& f : functions) {
    const bool ran = f["runs"].get<unsigned long long>() > 0;
    std::printf("%-40s %10llu %8llu %8llu %10s %10s %10s\n", f["name"].get<std::string>().c_str(),
                f["finished"].get<unsigned long long>(), f["failed"].get<unsigned long long>(),
                f["running"].get<unsigned long long>(), ran ? seconds_text(f["mean_s"].get<double>()).c_str() : "-",
                ran ? seconds_text(f["p95_s"].get<double>()).c_str() : "-",
                ran ? seconds_text(f["total_s"].get<double>()).c_str() : "-");
  }
  std::printf("(run times measured in the workers; p95 interpolated within histogram buckets)\n");
}

/// What `manta memory` shows: the request it sends, and whether the list is wanted.
struct memory_view {
  std::size_t limit = 20;
  std::string sort = "size";
  std::string group_by;
  bool summary_only = false;

  std::string request() const {
    std::string r = "memory limit=" + std::to_string(summary_only ? 1 : limit) + " sort=" + sort;
    if (!group_by.empty()) r += " group=" + group_by;
    return r;
  }
};

void print_memory(const json& m, const memory_view& v) {
  const json& s = m["summary"];
  const auto total = s.value("total", s["listed"].get<unsigned long long>());
  if (!v.summary_only && !m["objects"].empty()) {
    std::printf("%-32s %10s %-12s %6s %5s %-8s %-24s %s\n", "ID", "SIZE", "WHERE", "PINNED", "REFS", "OWNER",
                "MADE BY", "HELD BY");
    for (const auto& o : m["objects"]) {
      std::string held;
      if (o.contains("held_by_pids"))
        for (const auto& p : o["held_by_pids"]) held += (held.empty() ? "" : ",") + std::to_string(p.get<int>());
      std::printf("%-32s %10s %-12s %6d %5lld %-8d %-24s %s\n", o["id"].get<std::string>().c_str(),
                  bytes(o["size"].get<double>()).c_str(), o["where"].get<std::string>().c_str(),
                  o["pinned"].get<int>(), o["references"].get<long long>(), o["owner_pid"].get<int>(),
                  o["made_by"].get<std::string>().c_str(), held.c_str());
    }
    const auto listed = s["listed"].get<unsigned long long>();
    if (listed < total)
      std::printf("(%llu of %llu objects, %s; --limit 0 lists all)\n", listed, total,
                  v.sort == "size" ? "the largest" : "the oldest");
  }
  if (m.contains("groups")) {
    std::printf("\n%-48s %10s %12s\n", ("BY " + m["group_by"].get<std::string>()).c_str(), "OBJECTS", "SIZE");
    for (const auto& g : m["groups"])
      std::printf("%-48s %10llu %12s\n", g["key"].get<std::string>().c_str(), g["count"].get<unsigned long long>(),
                  bytes(g["bytes"].get<double>()).c_str());
  }
  std::printf("\n%llu objects: %s in the arena, %s spilled, %s in the driver's heap (values up to %s); "
              "arena %s of %s in use\n",
              total, bytes(s["arena_bytes"].get<double>()).c_str(), bytes(s["spilled_bytes"].get<double>()).c_str(),
              bytes(s["driver_heap_bytes"].get<double>()).c_str(), bytes(s["inline_limit_bytes"].get<double>()).c_str(),
              bytes(s["arena_used_bytes"].get<double>()).c_str(), bytes(s["arena_capacity_bytes"].get<double>()).c_str());
}

void add_target(CLI::App* cmd, target& t) {
  cmd->add_option("--address", t.address,
                  "the runtime's socket, or its driver's pid (default: the only one running); "
                  "for status, a cluster's head as HOST:PORT");
  cmd->add_option("--log-dir", t.log_dir, "where runtimes put their sockets")->capture_default_str();
}

}  // namespace

int main(int argc, char** argv) {
  // A head that goes while this tool writes to it must not end the tool
  // silently (OpenSSL's TLS writes do not ask the kernel to spare it).
  ::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"manta: see what a running manta program does, and start and stop a cluster's head"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", std::string("manta ") + MANTA_VERSION);
  target t;
  bool as_json = false;

  auto* status = app.add_subcommand("status", "processes, tasks, resources and objects of a runtime");
  add_target(status, t);
  status->add_flag("--json", as_json, "print the JSON the runtime sent");

  memory_view view;
  auto* memory = app.add_subcommand("memory", "the objects: a summary and the largest ones (size, place, references)");
  add_target(memory, t);
  memory->add_flag("--json", as_json, "print the JSON the runtime sent");
  memory->add_option("--limit", view.limit, "objects listed at most (0: all)")->capture_default_str();
  memory->add_option("--sort", view.sort, "list the largest first (size) or the oldest (age)")
      ->check(CLI::IsMember({"size", "age"}))
      ->capture_default_str();
  std::string group_by;
  memory->add_option("--group-by", group_by, "totals per maker (made-by), place (where) or holding process (holder)")
      ->check(CLI::IsMember({"made-by", "where", "holder"}));
  memory->add_flag("--summary", view.summary_only, "the totals alone, no list");

  auto* summary = app.add_subcommand("summary", "per function: tasks finished, failed and running, mean and p95 run time");
  add_target(summary, t);
  summary->add_flag("--json", as_json, "print the JSON the runtime sent");

  manta::tools::logs_options logs_opts;
  std::string logs_actor;
  auto* logs = app.add_subcommand("logs", "what a worker or actor host printed (from log_dir); without --pid, the list");
  add_target(logs, t);
  logs->add_option("--pid", logs_opts.pid, "the process whose output to print");
  logs->add_option("--actor", logs_actor, "the named actor whose host's output to print (asks the runtime)");
  logs->add_flag("--follow,-f", logs_opts.follow, "then print what it writes, until it ends or Ctrl-C");

  int stack_pid = 0;
  std::string stack_actor;
  auto* stack = app.add_subcommand("stack", "the stack of every thread of a worker or actor host (one that looks hung)");
  add_target(stack, t);
  stack->add_option("--pid", stack_pid, "the worker's or actor host's pid (manta status lists them)");
  stack->add_option("--actor", stack_actor, "the named actor whose host to show");
  stack->add_flag("--json", as_json, "print the JSON the runtime sent");

  std::string output;
  double seconds = 5;
  auto* timeline = app.add_subcommand("timeline", "write a Chrome trace (open it in Perfetto) of what runs");
  add_target(timeline, t);
  timeline->add_option("--output,-o", output, "where to write the trace")->required();
  timeline->add_option("--seconds", seconds, "how long to record, unless MANTA_TIMELINE records already")
      ->capture_default_str()
      ->check(CLI::Number)
      ->check(CLI::Range(0.0, 60.0));

  manta::tools::dashboard_options board;
  auto* dashboard = app.add_subcommand("dashboard", "serve a live page of a runtime on loopback (token in the URL)");
  add_target(dashboard, t);
  dashboard->add_option("--port", board.port, "the port (0: any free one)")->capture_default_str();
  dashboard->add_option("--chart-js", board.chart_js, "Chart.js to serve")->capture_default_str();

  manta::tools::cluster_options cluster;
  cluster.log_dir = manta::observe::default_log_dir();
  status->add_option("--token-file", cluster.token_file, "a cluster's token (default: MANTA_TOKEN_FILE, or <log-dir>/cluster.token)");
  bool head_role = false;
  int node_workers = 0;
  std::vector<std::string> node_command;
  auto* start = app.add_subcommand(
      "start", "start a cluster's head (--head), or a program as a node of one (--address A -- ./app args)");
  start->add_flag("--head", head_role, "start the head (prints its address and token file)");
  start->add_option("--address", cluster.address, "the head to join, HOST:PORT (default: the one started from --log-dir)");
  start->add_option("--num-workers", node_workers, "the node's worker processes (default: its CPU count)");
  start->add_option("command", node_command, "after --: the program to start as a node, and its arguments");
  start->add_option("--port", cluster.port, "its port (0: any free one)")->capture_default_str();
  start->add_option("--bind", cluster.bind, "the address to listen on (loopback unless told)")->capture_default_str();
  start->add_option("--token-file", cluster.token_file, "where to write the cluster's token (0600)");
  start->add_option("--tls-cert", cluster.tls_cert, "the head's TLS certificate (PEM): every connection uses TLS");
  start->add_option("--tls-key", cluster.tls_key, "the private key of --tls-cert (PEM)");
  start->add_option("--node-wait", cluster.node_wait_s,
                    "the head: how long work lost with its node (actors to restart, tasks to retry) waits for a "
                    "node that can take it, in seconds (0: it fails at once)")
      ->check(CLI::Number)
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  start->add_option("--log-dir", cluster.log_dir, "where the head's log, address and token go")->capture_default_str();
  auto* stop = app.add_subcommand("stop", "stop the cluster: every node is told to stop, then the head exits");
  stop->add_option("--address", cluster.address, "the head, HOST:PORT (default: the one started from --log-dir)");
  stop->add_option("--token-file", cluster.token_file, "the cluster's token");
  stop->add_option("--log-dir", cluster.log_dir, "where `manta start --head` wrote its address")->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  if (app.get_subcommands().empty()) {  // `manta` alone: what it can do
    std::cout << app.help();
    return 0;
  }
  try {
    if (start->parsed() && cluster.tls_cert.empty() != cluster.tls_key.empty())
      throw std::runtime_error("--tls-cert and --tls-key go together");
    if (start->parsed() && !head_role && !cluster.tls_cert.empty())
      throw std::runtime_error("--tls-cert and --tls-key are the head's (with --head); members use MANTA_TLS_CA");
    if (start->parsed() && head_role) {
      if (!node_command.empty()) throw std::runtime_error("manta start --head takes no program");
      return manta::tools::start_head(cluster);
    } else if (start->parsed()) {
      return manta::tools::start_node(cluster, node_command, node_workers);
    } else if (stop->parsed()) {
      return manta::tools::stop_cluster(cluster);
    } else if (status->parsed() && (manta::tools::is_head_address(t.address) ||
                                    (t.address.empty() && manta::tools::head_runs_in(t.log_dir)))) {
      cluster.address = t.address;
      cluster.log_dir = t.log_dir;
      cluster.json = as_json;
      return manta::tools::cluster_status(cluster);
    } else if (status->parsed()) {
      json s = ask_json(t, "status");
      if (as_json) std::cout << s.dump(2) << "\n";
      else print_status(s);
    } else if (logs->parsed()) {
      if (logs_opts.pid > 0 && !logs_actor.empty()) throw std::runtime_error("logs: give --pid or --actor, not both");
      if (!logs_actor.empty()) logs_opts.pid = actor_pid(ask_json(t, "status"), logs_actor);
      logs_opts.log_dir = t.log_dir;
      return manta::tools::show_logs(logs_opts);
    } else if (stack->parsed()) {
      if ((stack_pid > 0) == !stack_actor.empty())
        throw std::runtime_error("stack: give --pid PID or --actor NAME (manta status lists both)");
      if (!stack_actor.empty()) stack_pid = actor_pid(ask_json(t, "status"), stack_actor);
      json j = ask_json(t, "stack " + std::to_string(stack_pid), 15000);
      if (as_json) {
        std::cout << j.dump(2) << "\n";
      } else {
        for (const auto& th : j["threads"])
          std::printf("thread %d (%s):\n%s\n", th["tid"].get<int>(), th["name"].get<std::string>().c_str(),
                      th["frames"].get<std::string>().c_str());
      }
    } else if (summary->parsed()) {
      json j = ask_json(t, "summary");
      if (as_json) std::cout << j.dump(2) << "\n";
      else print_summary(j);
    } else if (memory->parsed()) {
      view.group_by = group_by == "made-by" ? "made_by" : group_by;
      json m = ask_json(t, view.request());
      if (as_json) std::cout << m.dump(2) << "\n";
      else print_memory(m, view);
    } else if (dashboard->parsed()) {
      if (manta::tools::is_head_address(t.address))
        throw std::runtime_error("dashboard shows one program's runtime, and " + t.address +
                                 " is a cluster's head (manta status --address " + t.address +
                                 " shows the cluster); give a driver's socket or pid");
      board.socket = resolve(t);
      manta::observe::ask(board.socket, "status", 5000);  // it answers, or this says why (and exits 1)
      return manta::tools::run_dashboard(board);
    } else if (timeline->parsed()) {
      std::string socket = resolve(t);
      std::string trace = manta::observe::ask(socket, "timeline " + std::to_string(seconds),
                                              static_cast<int>(seconds * 1000) + 10000);
      json j = json::parse(trace);
      if (j.contains("error")) throw std::runtime_error("the runtime says: " + j["error"].get<std::string>());
      std::ofstream out(output, std::ios::binary | std::ios::trunc);
      out << trace;
      out.close();
      if (!out) throw std::runtime_error("cannot write " + output);
      std::size_t events = j["traceEvents"].size();
      std::printf("wrote %zu events to %s (open it in https://ui.perfetto.dev or chrome://tracing)\n", events,
                  output.c_str());
    }
  } catch (const std::exception& e) {
    std::string why = e.what();
    if (why.rfind("manta: ", 0) == 0) why.erase(0, 7);
    std::fprintf(stderr, "manta: %s\n", why.c_str());
    return 1;
  }
  return 0;
}

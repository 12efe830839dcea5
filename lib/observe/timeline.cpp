// observe/timeline.cpp: recording events, and writing them as Chrome's trace format.
#include "observe/timeline.hpp"

#include <chrono>

#include <nlohmann/json.hpp>

namespace manta::observe {

std::uint64_t now_ns() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

std::uint32_t timeline::intern(std::string_view s) {
  auto it = string_index_.find(s);
  if (it != string_index_.end()) return it->second;
  auto index = static_cast<std::uint32_t>(strings_.size());
  strings_.emplace_back(s);
  string_index_.emplace(strings_.back(), index);
  return index;
}

bool timeline::full() {
  if (events_.size() < max_events) return false;
  ++dropped_;
  return true;
}

void timeline::task(const task_event& e) {
  std::lock_guard lock(mu_);
  if (full()) return;
  events_.push_back({'X', e.actor_call, e.ok, e.pid, e.thread ? e.thread : e.pid, intern(e.name), 0,
                     e.submitted_ns, e.started_ns, e.duration_ns, e.arg_bytes, e.result_bytes});
}

void timeline::instant(std::string_view name, pid_t pid, std::string_view detail) {
  std::uint64_t at = now_ns();
  std::lock_guard lock(mu_);
  if (full()) return;
  events_.push_back({'i', false, true, pid, pid, intern(name), intern(detail), 0, at, 0, 0, 0});
}

void timeline::name_process(pid_t pid, std::string name) {
  std::lock_guard lock(mu_);
  for (auto& [p, n] : names_)
    if (p == pid) {
      n = std::move(name);
      return;
    }
  names_.emplace_back(pid, std::move(name));
}

std::string timeline::json() const {
  std::vector<event> events;
  std::vector<std::string> strings;
  std::vector<std::pair<pid_t, std::string>> names;
  std::uint64_t dropped;
  {
    std::lock_guard lock(mu_);
    events = events_;
    strings = strings_;
    names = names_;
    dropped = dropped_;
  }
  // Microseconds since the timeline began, as the format wants them.
  auto us = [&](std::uint64_t ns) { return ns >= origin_ns_ ? double(ns - origin_ns_) / 1e3 : 0.0; };
  auto text = [](const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); };
  // One event at a time into the output: no document of a million events in memory.
  std::string out = "{\"displayTimeUnit\":\"ms\",";
  if (dropped) out += "\"otherData\":{\"dropped_events\":" + std::to_string(dropped) + "},";
  out += "\"traceEvents\":[";
  bool first = true;
  auto add = [&](const nlohmann::json& j) {
    if (!first) out += ',';
    first = false;
    out += text(j);
  };
  for (const auto& [pid, name] : names)
    add({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", pid}, {"args", {{"name", name}}}});
  for (const event& e : events) {
    if (e.phase == 'i') {
      add({{"ph", "i"}, {"s", "p"}, {"name", strings[e.name]}, {"cat", "runtime"}, {"pid", e.pid}, {"tid", e.pid},
           {"ts", us(e.started_ns)}, {"args", {{"detail", strings[e.detail]}}}});
      continue;
    }
    nlohmann::json args = {{"arg_bytes", e.arg_bytes}, {"result_bytes", e.result_bytes}, {"ok", e.ok}};
    if (e.submitted_ns) {
      args["submitted_us"] = us(e.submitted_ns);
      args["queued_us"] = e.started_ns > e.submitted_ns ? double(e.started_ns - e.submitted_ns) / 1e3 : 0.0;
    }
    add({{"ph", "X"}, {"name", strings[e.name]}, {"cat", e.actor_call ? "actor" : "task"}, {"pid", e.pid},
         {"tid", e.thread}, {"ts", us(e.started_ns)}, {"dur", double(e.duration_ns) / 1e3}, {"args", std::move(args)}});
  }
  out += "]}";
  return out;
}

void timeline::clear() {
  std::lock_guard lock(mu_);
  events_.clear();
  strings_.clear();
  string_index_.clear();
  names_.clear();
  dropped_ = 0;
}

std::size_t timeline::size() const {
  std::lock_guard lock(mu_);
  return events_.size();
}

}  // namespace manta::observe

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

void timeline::task(task_event&& e) {
  std::lock_guard lock(mu_);
  if (tasks_.size() + instants_.size() >= max_events) {
    ++dropped_;
    return;
  }
  tasks_.push_back(std::move(e));
}

void timeline::instant(std::string name, pid_t pid, std::string detail) {
  std::uint64_t at = now_ns();
  std::lock_guard lock(mu_);
  if (tasks_.size() + instants_.size() >= max_events) {
    ++dropped_;
    return;
  }
  instants_.push_back({std::move(name), std::move(detail), pid, at});
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
  std::lock_guard lock(mu_);
  // Microseconds since the timeline began, as the format wants them.
  auto us = [&](std::uint64_t ns) { return ns >= origin_ns_ ? double(ns - origin_ns_) / 1e3 : 0.0; };
  nlohmann::json events = nlohmann::json::array();
  for (const auto& [pid, name] : names_)
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", pid}, {"args", {{"name", name}}}});
  for (const auto& t : tasks_) {
    nlohmann::json args = {{"submitted_us", us(t.submitted_ns)},
                           {"queued_us", t.submitted_ns && t.started_ns > t.submitted_ns
                                             ? double(t.started_ns - t.submitted_ns) / 1e3
                                             : 0.0},
                           {"arg_bytes", t.arg_bytes},
                           {"result_bytes", t.result_bytes},
                           {"ok", t.ok}};
    events.push_back({{"ph", "X"},
                      {"name", t.name},
                      {"cat", t.actor_call ? "actor" : "task"},
                      {"pid", t.pid},
                      {"tid", t.pid},
                      {"ts", us(t.started_ns)},
                      {"dur", double(t.duration_ns) / 1e3},
                      {"args", std::move(args)}});
  }
  for (const auto& i : instants_)
    events.push_back({{"ph", "i"},
                      {"s", "p"},
                      {"name", i.name},
                      {"cat", "runtime"},
                      {"pid", i.pid},
                      {"tid", i.pid},
                      {"ts", us(i.at_ns)},
                      {"args", {{"detail", i.detail}}}});
  nlohmann::json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  if (dropped_) doc["otherData"] = {{"dropped_events", dropped_}};
  return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void timeline::clear() {
  std::lock_guard lock(mu_);
  tasks_.clear();
  instants_.clear();
  dropped_ = 0;
}

std::size_t timeline::size() const {
  std::lock_guard lock(mu_);
  return tasks_.size() + instants_.size();
}

}  // namespace manta::observe

// runtime/report.cpp: what the tools ask on the control socket (manta status,
// manta memory, manta timeline), answered as JSON from the scheduler, the
// directory and the object store, each read under its own lock.
#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <thread>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "observe/crash_stack.hpp"
#include "runtime/node_runtime.hpp"
#include "runtime/task_spec.hpp"

namespace manta::runtime {
namespace {

using nlohmann::json;

const char* actor_state(actor_record::state s) {
  switch (s) {
    case actor_record::state::waiting: return "waiting for resources";
    case actor_record::state::starting: return "starting";
    case actor_record::state::constructing: return "constructing";
    case actor_record::state::alive: return "alive";
    case actor_record::state::dead: return "dead";
  }
  return "?";
}

/// Names may hold any bytes: invalid UTF-8 is replaced, never thrown on.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

json scheduler::status_report() const {
  json processes = json::array();
  std::size_t busy = 0;
  for (int i = 0; i < slots_in_use(); ++i) {
    const worker_link& w = *links_[static_cast<std::size_t>(i)];
    auto st = w.st.load(std::memory_order_acquire);
    if (st == worker_link::state::dead) continue;
    json tasks = json::array();
    std::size_t started = 0;
    for (const task_spec* t : w.place.in_flight) {
      if (not_started_ahead(*t)) continue;
      ++started;
      if (tasks.size() < 8) tasks.push_back(t->name());  // a queue behind it: the first few say enough
    }
    const char* state = st == worker_link::state::starting ? "starting"
                        : started == 0                     ? "idle"
                        : w.place.blocked == static_cast<int>(w.place.in_flight.size()) ? "waiting"
                                                                                         : "busy";
    busy += std::string_view(state) == "busy";
    json p = {{"slot", w.slot},
              {"pid", w.pid},
              {"kind", w.actor ? "actor" : w.place.extra ? "extra" : "worker"},
              {"state", state},
              {"tasks_in_flight", w.place.in_flight.size()},
              {"current", std::move(tasks)}};
    if (w.actor) p["actor"] = w.actor->label;
    processes.push_back(std::move(p));
  }
  std::size_t waiting = 0, queued = 0, running = 0;
  graph_.for_each([&](const task_spec& t) {
    if (t.worker >= 0 && !not_started_ahead(t)) ++running;
    else if (t.pending_deps > 0) ++waiting;
    else ++queued;
  });
  json actors = json::array();
  for (const auto& a : actors_) {
    if (a->st == actor_record::state::dead && !a->entry) continue;  // gone, and nobody can call it
    json j = {{"class", a->label}, {"state", actor_state(a->st)}, {"restarts", a->restarts},
              {"queued_calls", a->queue.size()}};
    if (!a->name.empty()) j["name"] = a->name;
    if (a->host >= 0) {
      const worker_link& host = *links_[static_cast<std::size_t>(a->host)];
      if (host.st.load() == worker_link::state::alive) j["pid"] = host.pid;
    }
    actors.push_back(std::move(j));
  }
  return {{"processes", std::move(processes)},
          {"pool_workers", cfg_.pool_size},
          {"extra_workers", extras_.size()},
          {"extra_workers_started", extras_started_.load()},
          {"tasks_sent_ahead", sent_ahead_.load()},
          {"tasks_taken_back", taken_back_.load()},
          {"busy_workers", busy},
          {"actors", std::move(actors)},
          {"tasks",
           {{"waiting_for_arguments", waiting},
            {"queued", queued},
            {"running", running},
            {"finished", tasks_finished_.load()},
            {"failed", tasks_failed_.load()},
            {"retried", task_retries_.load()}}},
          {"resources", {{"total", ledger_.totals()}, {"available", ledger_.available()}}},
          {"processes_lost", processes_lost_.load()},
          {"actor_restarts", actor_restarts_.load()}};
}

json scheduler::function_report() const {
  std::unordered_map<std::string, std::size_t> running;
  graph_.for_each([&](const task_spec& t) {
    if (t.worker >= 0 && !not_started_ahead(t)) ++running[t.label()];
  });
  return functions_.report(running);
}

std::unordered_map<object_id, std::vector<pid_t>> scheduler::holders() const {
  std::unordered_map<object_id, std::vector<pid_t>> by_object;
  for (int i = 0; i < slots_in_use(); ++i) {
    const worker_link& w = *links_[static_cast<std::size_t>(i)];
    if (w.st.load(std::memory_order_acquire) == worker_link::state::dead) continue;
    for (const auto& [id, pinned] : w.holds) by_object[id].push_back(w.pid);
  }
  return by_object;
}

std::string node_runtime::answer(const std::string& request) {
  process::context_use use;  // as every entry point: the context lock before the runtime's own
  std::istringstream in(request);
  std::string verb;
  in >> verb;
  if (verb == "status") return status_json();
  if (verb == "summary") {  // summary [limit=N]: the N busiest functions
    std::size_t limit = 0;
    if (std::string arg; in >> arg) {
      if (arg.rfind("limit=", 0) != 0 || arg.size() == 6 || arg.size() > 15 ||
          arg.find_first_not_of("0123456789", 6) != std::string::npos)
        return dump({{"error", "summary: '" + arg + "' is not limit=N"}});
      limit = std::stoul(arg.substr(6));
    }
    json j;
    {
      scheduler_lock lock(*this);
      j = sched_->function_report();
    }
    json& functions = j["functions"];
    if (limit && functions.size() > limit) functions.erase(functions.begin() + static_cast<std::ptrdiff_t>(limit), functions.end());
    return dump(j);
  }
  if (verb == "memory") {
    memory_query q;
    for (std::string arg; in >> arg;) {
      const auto eq = arg.find('=');
      const std::string key = arg.substr(0, eq), value = eq == std::string::npos ? "" : arg.substr(eq + 1);
      if (key == "limit" && !value.empty() && value.find_first_not_of("0123456789") == std::string::npos &&
          value.size() < 10)
        q.limit = std::stoul(value);
      else if (key == "sort" && (value == "size" || value == "age"))
        q.sort = value;
      else if (key == "group" && (value == "made_by" || value == "where" || value == "holder"))
        q.group_by = value;
      else
        return dump({{"error", "memory: '" + arg +
                                   "' is not limit=N, sort=size|age or group=made_by|where|holder"}});
    }
    return memory_json(q);
  }
  if (verb == "stack") {  // stack PID: the stacks of every thread of one of this runtime's processes
    long pid = 0;
    in >> pid;
    std::vector<pid_t> mine = process_ids();
    mine.erase(mine.begin());  // (the zygote's: it has no handler, and the signal would end it)
    if (pid <= 0 || std::find(mine.begin(), mine.end(), static_cast<pid_t>(pid)) == mine.end())
      return dump({{"error", "pid " + std::to_string(pid) + " is not a worker or actor host of this runtime"}});
    if (crash_dir_.empty() || !observe::stack_requests_fit(crash_dir_))
      return dump({{"error", "this runtime's log_dir cannot take stacks (none, or a path too long)"}});
    json threads = json::array();
    for (const auto& t : observe::collect_stacks(crash_dir_, static_cast<pid_t>(pid), std::chrono::seconds(3)))
      threads.push_back({{"tid", t.tid}, {"name", t.name}, {"frames", t.frames}});
    return dump({{"pid", pid}, {"threads", std::move(threads)}});
  }
  if (verb == "timeline") {
    double seconds = 5;
    in >> seconds;
    return timeline_json(seconds);
  }
  return dump({{"error", "unknown request '" + request + "' (status, summary, memory, stack PID, timeline [seconds])"}});
}

std::size_t node_runtime::task_count() {
  scheduler_lock lock(*this);
  return sched_->graph().size();
}

std::string node_runtime::status_json() {
  json j;
  {
    scheduler_lock lock(*this);
    j = sched_->status_report();
  }
  auto spill = store_->stats();
  j["runtime"] = {{"pid", pid_},
                  {"epoch", epoch_},
                  {"log_dir", log_dir_},
                  {"socket", address()},
                  {"uptime_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count()},
                  {"timeline_recording", timeline_.on()},
                  {"metrics_address", metrics_address_}};
  j["objects"] = {{"count", dir_->size()},
                  {"arena_used_bytes", arena_->used_bytes()},
                  {"arena_capacity_bytes", arena_->capacity()},
                  {"spilled_objects", spill.spilled_now},
                  {"spilled_bytes", spill.disk_bytes},
                  {"spilled_since_start", spill.spilled},
                  {"restored_since_start", spill.restored}};
  return dump(j);
}

std::vector<object_entry*> node_runtime::scan_directory() {
  // The directory (a TBB hash map) cannot be walked while other threads insert
  // and erase; ids can be looked up. Every id is (creator, sequence number),
  // dense per creator and never reused, so each creator's range is probed from
  // the first id alive at the previous scan (everything below it was dead then,
  // and stays dead) up to the last it handed out: the first scan costs a lookup
  // per id ever made, the next ones only what is new or still alive.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;  // (creator, last sequence)
  {
    scheduler_lock lock(*this);
    ranges = sched_->worker_id_ranges();
  }
  const std::uint64_t driver_hi = std::uint64_t{epoch_} << 32;
  ranges.emplace_back(driver_hi, dir_->last_seq());
  std::vector<object_entry*> found;
  std::lock_guard lock(scan_mu_);
  for (const auto& [hi, last] : ranges) {
    std::uint64_t& from = scan_from_[hi];
    if (from == 0) from = 1;
    std::uint64_t first_alive = 0;
    for (std::uint64_t seq = from; seq <= last; ++seq)
      if (object_entry* e = dir_->acquire({hi, seq})) {
        found.push_back(e);
        if (!first_alive) first_alive = seq;
      }
    std::uint64_t next = first_alive ? first_alive : last + 1;
    // The driver hands out an id a moment before its entry is inserted: its
    // newest ids are looked at again next time.
    if (hi == driver_hi) next = std::min(next, last > 4096 ? last - 4095 : std::uint64_t{1});
    from = next;
  }
  return found;
}

std::string node_runtime::memory_json(const memory_query& q) {
  // Every object is held (a count each) while it is read; fields the scheduler
  // or the store change are copied under their locks; JSON is made after them.
  std::vector<object_entry*> held = scan_directory();
  struct row {
    object_id id;
    std::uint64_t size = 0;
    const char* where = "";
    std::int32_t pins = 0, owner = 0;
    std::int64_t refs = 0;
    std::string made_by;
  };
  std::vector<row> rows;
  rows.reserve(held.size());
  std::unordered_map<object_id, std::vector<pid_t>> holders;
  const std::unordered_set<const object_entry*> scanned(held.begin(), held.end());
  {
    scheduler_lock lock(*this);
    holders = sched_->holders();
    store_->for_each([&](const object_entry& e, bool spilled) {
      std::int64_t refs = e.count.load(std::memory_order_relaxed) - (scanned.count(&e) ? 1 : 0);  // less the scan's own
      rows.push_back({e.id, e.size, spilled ? "spill file" : "arena", spilled ? 0 : std::max(e.pins.load(), 0),
                      e.owner, refs, e.made_by ? "task " + e.made_by->name : std::string("put")});
    });
    for (object_entry* e : held) {
      std::uint32_t st = e->status();  // (acquire: what was written before it was sealed is visible)
      if (st == state_ready && e->large) continue;  // listed by the store above
      row r;
      r.id = e->id;
      r.owner = e->owner;
      r.refs = e->count.load(std::memory_order_relaxed) - 1;  // less the scan's own
      if (e->actor) {
        r.where = "actor handle";
        r.made_by = "actor " + e->actor->label;
      } else if (st == state_pending) {
        r.where = "not made yet";
        const task_spec* t = task_graph::producer_of(e);
        r.made_by = t ? "task " + t->name() + (t->worker >= 0 ? " (running)" : " (waiting)") : std::string("put");
      } else {
        r.size = e->size;
        r.where = st == state_failed ? "failed" : "driver heap";
        r.made_by = e->made_by ? "task " + e->made_by->name : std::string("put");
      }
      rows.push_back(std::move(r));
    }
  }
  for (object_entry* e : held) detail::release(e);  // (may free it: outside the locks)
  std::uint64_t arena_bytes = 0, spilled_bytes = 0, heap_bytes = 0;
  struct group {
    std::size_t count = 0;
    std::uint64_t bytes = 0;
  };
  std::map<std::string, group> groups;
  for (const row& r : rows) {
    std::string_view where = r.where;
    (where == "arena" ? arena_bytes : where == "spill file" ? spilled_bytes : heap_bytes) += r.size;
    if (q.group_by.empty()) continue;
    auto add = [&](const std::string& key) {
      group& g = groups[key];
      ++g.count;
      g.bytes += r.size;
    };
    if (q.group_by == "made_by") {
      add(r.made_by);
    } else if (q.group_by == "where") {
      add(r.where);
    } else if (auto it = holders.find(r.id); it != holders.end()) {  // by holder: each process holding it
      for (pid_t pid : it->second) add("pid " + std::to_string(pid));
    } else {
      add("owner pid " + std::to_string(r.owner) + " only");
    }
  }
  const std::size_t total = rows.size();
  if (q.sort == "size")
    std::stable_sort(rows.begin(), rows.end(), [](const row& a, const row& b) { return a.size > b.size; });
  else if (q.sort == "age")  // ids are (creator, sequence): a creator's older objects first
    std::sort(rows.begin(), rows.end(), [](const row& a, const row& b) {
      return a.id.lo != b.id.lo ? a.id.lo < b.id.lo : a.id.hi < b.id.hi;
    });
  if (q.limit && rows.size() > q.limit) rows.resize(q.limit);
  json objects = json::array();
  for (const row& r : rows) {
    json o = {{"id", id_text(r.id)},    {"size", r.size},       {"where", r.where},    {"pinned", r.pins},
              {"references", r.refs}, {"owner_pid", r.owner}, {"made_by", r.made_by}};
    if (auto it = holders.find(r.id); it != holders.end()) o["held_by_pids"] = it->second;
    objects.push_back(std::move(o));
  }
  std::size_t listed = objects.size();
  json j = {{"objects", std::move(objects)},
            {"summary",
             {{"listed", listed},
              {"total", total},
              {"arena_bytes", arena_bytes},
              {"spilled_bytes", spilled_bytes},
              {"driver_heap_bytes", heap_bytes},
              {"inline_limit_bytes", detail::max_inline_bytes},
              {"arena_used_bytes", arena_->used_bytes()},
              {"arena_capacity_bytes", arena_->capacity()}}}};
  if (!q.group_by.empty()) {
    std::vector<std::pair<std::string, group>> sorted(groups.begin(), groups.end());
    std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
      return a.second.bytes != b.second.bytes ? a.second.bytes > b.second.bytes : a.second.count > b.second.count;
    });
    json out = json::array();
    for (const auto& [key, g] : sorted) out.push_back({{"key", key}, {"count", g.count}, {"bytes", g.bytes}});
    j["group_by"] = q.group_by;
    j["groups"] = std::move(out);
  }
  return dump(j);
}

void scheduler::name_processes() const {
  for (int i = 0; i < slots_in_use(); ++i) {
    const worker_link& w = *links_[static_cast<std::size_t>(i)];
    if (w.st.load(std::memory_order_acquire) == worker_link::state::alive)
      cfg_.timeline->name_process(w.pid, w.actor ? "actor " + w.actor->label : "worker " + std::to_string(w.slot));
  }
}

std::string node_runtime::timeline_json(double seconds) {
  if (timeline_.on()) return timeline_.json();  // recording since init: everything so far
  // Not recording: record for a while, answer, and stop (the events go with it).
  std::unique_lock capture(capture_mu_, std::try_to_lock);
  if (!capture.owns_lock()) return dump({{"error", "another timeline capture is running; try again when it ends"}});
  seconds = std::clamp(seconds, 0.0, 60.0);
  timeline_.clear();
  timeline_.name_process(pid_, "driver");
  timeline_.start();
  {
    scheduler_lock lock(*this);
    sched_->name_processes();
  }
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until && !stopping_.load(std::memory_order_acquire))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  timeline_.stop();
  std::string out = timeline_.json();
  timeline_.clear();
  return out;
}

}  // namespace manta::runtime

// runtime/cluster.cpp: a driver's link to the cluster, and a node's service.
#include "runtime/cluster.hpp"
#include "observe/log.hpp"
#include "observe/thread_name.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include <manta/errors.hpp>
#include <manta/registry.hpp>

#include "bridge/socket_io.hpp"
#include "bridge/token.hpp"
#include "bridge/wire.hpp"
#include "process/args_blob.hpp"
#include "process/context.hpp"
#include "runtime/directory.hpp"
#include "runtime/landing.hpp"
#include "runtime/node_runtime.hpp"

namespace manta::runtime {

using nlohmann::json;

namespace {

/// Sets `flag` while it lives (and clears it on a throw too).
struct raised {
  explicit raised(std::atomic<bool>& f) : flag(f) { flag.store(true); }
  ~raised() { flag.store(false); }
  raised(const raised&) = delete;
  raised& operator=(const raised&) = delete;
  std::atomic<bool>& flag;
};

std::string host_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return "localhost";
  return host;
}

bridge::task_outcome failed_outcome(std::uint64_t id, ipc::error_info e) {
  bridge::task_outcome o;
  o.id = id;
  o.ok = false;
  o.error = to_remote(e);
  return o;
}

/// Why `what` (a task or call named `name`) fails: object `key` cannot come.
/// Its driver says with which error (object_store_full: it could not be read
/// back), else node_died_error (its driver left, or it was freed).
ipc::error_info unfetched(const std::string& what, const std::string& name, const std::string& key,
                          const std::string& why, const std::optional<ipc::error_info>& cause) {
  ipc::error_info e{ipc::error_kind::node_died, "manta::node_died_error", {}, name, {}, ::getpid(), 0, {}};
  if (cause) {
    e.kind = cause->kind;
    e.remote_type = cause->remote_type;
  }
  e.message = "manta: " + what + " '" + name + "' needs object " + key + ", which could not be fetched: " + why;
  return e;
}

ipc::error_info usage(const std::string& message, const std::string& function) {
  return {ipc::error_kind::usage, "manta::usage_error", message, function, {}, ::getpid(), 0, {}};
}

}  // namespace

bridge::remote_error to_remote(const ipc::error_info& e) {
  return {static_cast<std::uint8_t>(e.kind), e.remote_type, e.message, e.function, e.chain, e.stack, e.pid, e.signal};
}

ipc::error_info from_remote(const bridge::remote_error& e) {
  ipc::error_info out;
  out.kind = e.kind <= ipc::last_error_kind ? static_cast<ipc::error_kind>(e.kind) : ipc::error_kind::task_exception;
  out.remote_type = e.remote_type;
  out.message = e.message;
  out.function = e.function;
  out.chain = e.chain;
  out.stack = e.stack;
  out.pid = e.pid;
  out.signal = e.signal;
  return out;
}

/// Debug lines for the nodes that joined or were lost since the last table.
void log_table_change(const std::vector<manta::node_info>& before, const std::vector<manta::node_info>& after) {
  auto find = [](const std::vector<manta::node_info>& t, const std::string& id) -> const manta::node_info* {
    for (const auto& n : t)
      if (n.id == id) return &n;
    return nullptr;
  };
  for (const auto& n : after) {
    const manta::node_info* was = find(before, n.id);
    if (n.alive && (!was || !was->alive)) MANTA_DEBUG << "cluster: node " << n.id << " (" << n.address << ") joined";
    if (!n.alive && was && was->alive) MANTA_DEBUG << "cluster: node " << n.id << " (" << n.address << ") was lost";
  }
}

// ---- the driver's side

cluster_driver::cluster_driver(node_runtime& rt, const std::string& address, const std::string& token,
                               std::map<std::string, double> resources)
    : rt_(rt) {
  char runtime_id[9];  // (as node_id() says: the table lists this machine under it)
  std::snprintf(runtime_id, sizeof runtime_id, "%08x", rt.epoch());
  bridge::node_info me{host_name(),
                       static_cast<int>(::getpid()),
                       std::move(resources),
                       detail::registered_names(),
                       "driver",
                       runtime_id};
  link_ = std::make_unique<bridge::node_link>(
      address, token, std::move(me), [this](const std::string& why) { on_end(why); },
      [this](std::vector<bridge::frame>&& frames) { on_frames(std::move(frames)); },
      lander_for(rt));  // a long outcome's large values go into the arena as they come, where they stay
  try {
    sender_ = std::thread([this] {
      observe::name_runtime_thread("manta-c-send");  // (names what top -H and perf show)
      send_loop();
    });
    applier_ = std::thread([this] {
      observe::name_runtime_thread("manta-c-apply");
      apply_loop();
    });
  } catch (...) {
    leave();
    throw;
  }
  MANTA_DEBUG << "cluster: joined the head at " << address << " as a driver";
  // The head sends the node table right after `joined`: a task submitted as
  // soon as init returns must find the nodes there.
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, std::chrono::seconds(5), [&] { return version_ > 0 || !lost_.empty(); });
}

cluster_driver::~cluster_driver() { leave(); }

void cluster_driver::give_back(outgoing& o) noexcept {
  for (auto& h : o.held) rt_.sent(h.node);
  o.held.clear();
}

void cluster_driver::give_back(std::deque<outgoing>& q) noexcept {
  for (auto& o : q) give_back(o);
  q.clear();
}

void cluster_driver::leave() {
  std::deque<outgoing> unsent;
  {
    std::lock_guard lock(mu_);
    if (left_) return;
    left_ = true;
    stopping_ = true;
    unsent.swap(queue_);
    inbound_.clear();
  }
  give_back(unsent);
  cv_.notify_all();
  applier_cv_.notify_all();
  if (link_) link_->stop_sending();  // a long task going out stops at its next part (the head drops it)
  if (sender_.joinable()) sender_.join();
  if (applier_.joinable()) applier_.join();
  std::thread hosting;
  {
    std::lock_guard lock(mu_);  // (the link's thread starts it under mu_)
    hosting.swap(host_);
  }
  if (hosting.joinable()) hosting.join();
  link_.reset();  // the head sees the connection close and drops this driver's tasks
}

std::string cluster_driver::lacking(const detail::task_options& o) const {
  std::lock_guard lock(mu_);
  if (!lost_.empty()) return "the cluster is gone (" + lost_ + ")";
  if (stopping_) return "this driver is leaving the cluster";
  std::string each;  // what each node lacks (the first few)
  std::size_t listed = 0;
  for (const auto& n : table_) {
    // (A node that had it, lost, counts: the head keeps such work until one like it joins, or its wait ends.)
    std::string lack = bridge::lacking(n.resources, o.num_cpus, o.num_gpus, o.resources, static_cast<double>(o.memory));
    if (lack.empty()) return {};
    if (listed++ < 4) each += (each.empty() ? "node " : "; node ") + n.id + " lacks " + lack;
  }
  if (listed > 4) each += "; and " + std::to_string(listed - 4) + " more";
  return table_.empty() ? "the cluster has no node" : "no node of the cluster can run it (" + each + ")";
}

double cluster_driver::spare_cpus(const detail::task_options& o) const {
  std::lock_guard lock(mu_);
  if (!lost_.empty() || stopping_) return 0;
  double cpus = 0;
  for (const auto& n : table_) {
    if (!n.alive || !bridge::lacking(n.resources, o.num_cpus, o.num_gpus, o.resources, static_cast<double>(o.memory)).empty()) continue;
    auto it = n.resources.find("CPU");
    cpus += it == n.resources.end() ? 0 : std::floor(it->second / std::max(o.num_cpus, 1e-9));
  }
  return cpus;
}

bool cluster_driver::send(bridge::remote_task t, std::vector<held_argument> held) {
  outgoing o{std::move(t), std::move(held)};
  bool queued = false, was_empty = false;
  {
    std::lock_guard lock(mu_);
    if (lost_.empty() && !stopping_) {
      was_empty = queue_.empty();
      queue_.push_back(std::move(o));
      queued = true;
    }
  }
  if (!queued) {
    give_back(o);  // (under the scheduler's lock: the task holds counts too, so never the last)
    return false;
  }
  // Only a queue that was empty can have the sender asleep on it: one wake-up per burst, not per task.
  if (was_empty) cv_.notify_all();
  return true;
}

void cluster_driver::end_actor(const std::string& key, bool kill) {
  send_control(bridge::frame_type::actor_end, bridge::encode_actor_end({key, kill}));
}

void cluster_driver::cancel(std::uint64_t id) {
  send_control(bridge::frame_type::cancel_task, std::string(reinterpret_cast<const char*>(&id), sizeof id));
}

bridge::actor_lookup cluster_driver::find_actor(const std::string& name) {
  std::uint64_t request;
  {
    std::lock_guard lock(mu_);
    if (!lost_.empty()) return {0, name, {}, 0, "the cluster is gone (" + lost_ + ")"};
    request = ++next_lookup_;
    asking_.insert(request);
  }
  send_control(bridge::frame_type::find_actor, bridge::encode_actor_lookup({request, name, {}, 0, {}}));
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, std::chrono::seconds(10), [&] { return lookups_.count(request) || !lost_.empty() || stopping_; });
  asking_.erase(request);
  auto it = lookups_.find(request);
  if (it == lookups_.end())
    return {request, name, {}, 0, lost_.empty() ? "the head did not answer within 10 s" : "the cluster is gone (" + lost_ + ")"};
  bridge::actor_lookup found = std::move(it->second);
  lookups_.erase(it);
  return found;
}

bool cluster_driver::find_actor_later(actor_asker asker) {
  std::uint64_t request;
  std::string name = asker.name;
  {
    std::lock_guard lock(mu_);
    if (!lost_.empty() || stopping_) return false;
    request = ++next_lookup_;
    askers_.emplace(request, std::move(asker));
  }
  send_control(bridge::frame_type::find_actor, bridge::encode_actor_lookup({request, name, {}, 0, {}}));
  return true;
}

void cluster_driver::offer_actor(const std::string& key, std::uint64_t class_tag, const std::string& name) {
  std::uint64_t request = 0;  // a named one waits for the head's answer (actor_found)
  if (!name.empty()) {
    std::lock_guard lock(mu_);
    request = ++next_lookup_;
    offering_[request] = key;
  }
  send_control(bridge::frame_type::host_actor, bridge::encode_actor_lookup({request, name, key, class_tag, {}}));
}

void cluster_driver::object_freed(const std::string& key) {
  send_control(bridge::frame_type::object_freed, bridge::encode_object_note({key, {}, {}}));
}

void cluster_driver::send_control(bridge::frame_type type, std::string body) {
  bool was_empty = false;
  {
    std::lock_guard lock(mu_);
    if (!lost_.empty() || stopping_) return;  // (the head ends a leaving driver's work itself)
    was_empty = queue_.empty();
    outgoing o;
    o.control = type;
    o.control_body = std::move(body);
    queue_.push_back(std::move(o));
  }
  if (was_empty) cv_.notify_all();
}

std::vector<manta::node_info> cluster_driver::nodes() const {
  std::lock_guard lock(mu_);
  return table_;
}

std::vector<manta::node_info> cluster_driver::drivers() const {
  std::lock_guard lock(mu_);
  return drivers_;
}

std::string cluster_driver::lost() const {
  std::lock_guard lock(mu_);
  return lost_;
}

void cluster_driver::send_loop() {
  // Small tasks that wait together go in one write; a long one goes alone, in parts.
  constexpr std::size_t small = 64u << 10, batch_bytes = 1u << 20, batch_tasks = 32;
  std::string batch;
  for (;;) {
    std::deque<outgoing> taken;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !lost_.empty() || !queue_.empty(); });
      if (stopping_ || !lost_.empty()) return;  // what was queued fails with the cluster (cluster_lost)
      while (!queue_.empty() && taken.size() < batch_tasks) {
        taken.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    struct given_back {
      cluster_driver& d;
      std::deque<outgoing>& q;
      ~given_back() { d.give_back(q); }
    } at_end{*this, taken};
    batch.clear();
    try {
      for (outgoing& o : taken) {
        const bridge::remote_task& t = o.task;
        if (!o.control_body.empty()) {
          const std::string_view body = o.control_body;
          bridge::append_frame(batch, o.control, std::span<const std::string_view>(&body, 1));
          continue;
        }
        try {
          // The header, then the arguments: inline ones from the blob, stored
          // ones from the arena (a long task goes in parts, nothing joined or copied).
          const std::string head = bridge::encode_task_head(t);
          std::vector<std::string_view> pieces{head};
          std::size_t from = 0;
          for (const held_argument& h : o.held) {
            pieces.push_back(std::string_view(t.args).substr(from, h.at - from));
            pieces.push_back(h.bytes);
            from = h.at;
          }
          pieces.push_back(std::string_view(t.args).substr(from));
          if (bridge::total_size(pieces) <= small) {
            bridge::append_frame(batch, bridge::frame_type::run_task, pieces);
            if (batch.size() >= batch_bytes) link_->send_encoded(std::exchange(batch, {}));
          } else {
            if (!batch.empty()) link_->send_encoded(std::exchange(batch, {}));
            link_->send(bridge::frame_type::run_task, pieces);
          }
        } catch (const bridge::io_error&) {
          throw;
        } catch (const std::exception& e) {
          // It could not even be encoded (too large, no memory): it fails alone.
          bridge::task_outcome out = failed_outcome(
              t.id, usage("manta: task '" + t.name + "' could not be sent to the cluster: " + e.what(), t.name));
          {
            std::lock_guard lock(mu_);
            inbound_.push_back({false, {}, std::move(out)});
          }
          applier_cv_.notify_all();
        }
        give_back(o);  // sent: its arguments' pins go
      }
      if (!batch.empty()) link_->send_encoded(batch);
    } catch (const bridge::io_error&) {
      // The link broke (send shut it down): its end fails every task sent and
      // unanswered, these with them (they wait in the runtime's remote lane).
      return;
    }
  }
}

void cluster_driver::apply_loop() {
  std::deque<inbound> taken;
  std::vector<bridge::task_outcome> outcomes;  // that came one after another: applied together
  for (;;) {
    {
      std::unique_lock lock(mu_);
      applier_cv_.wait(lock, [&] { return stopping_ || !inbound_.empty(); });
      if (stopping_) return;
      taken.swap(inbound_);
    }
    for (; !taken.empty(); taken.pop_front()) {
      inbound& in = taken.front();
      const bool outcome =
          !in.end && !in.found && !in.offer_answer && !in.fetch && in.killed.empty() && in.returned.empty();
      // A large result goes into the arena before it is sealed: one at a time,
      // so that what came before it is sealed (and may be spilled) first.
      const bool large = outcome && std::any_of(in.outcome.values.begin(), in.outcome.values.end(), [](const auto& v) {
                           return v.data().size() > detail::max_inline_bytes;
                         });
      if (!outcomes.empty() && (!outcome || large)) rt_.remote_finished(std::exchange(outcomes, {}));
      if (outcome) outcomes.push_back(std::move(in.outcome));
      if (!outcomes.empty() && (large || taken.size() == 1)) rt_.remote_finished(std::exchange(outcomes, {}));
      if (outcome) continue;
      if (in.end) {
        rt_.cluster_lost(in.why);
        return;  // nothing comes after the end
      }
      if (in.found) rt_.actor_found_for(in.found->first, in.found->second);
      else if (in.offer_answer) rt_.offer_answered(in.offer_answer->first, in.offer_answer->second);
      else if (in.fetch) rt_.send_object(*in.fetch);
      else if (!in.killed.empty()) rt_.remote_actor_killed(in.killed, in.killed_why);
      else if (!in.returned.empty()) rt_.actor_returned(in.returned);
    }
  }
}

void cluster_driver::to_applier(inbound&& in) {
  std::lock_guard lock(mu_);
  inbound_.push_back(std::move(in));
  unannounced_ = true;
}

void cluster_driver::on_frames(std::vector<bridge::frame>&& frames) {
  for (auto& f : frames) take_frame(std::move(f));
  // Frames that came together wake the applier once, after the last of them,
  // and reach the hosting thread together (a call and its cancel in one round).
  if (std::exchange(unannounced_, false)) applier_cv_.notify_one();
  if (host_staged_.empty() && cancels_staged_.empty() && news_staged_.empty()) return;
  {
    std::lock_guard lock(mu_);
    if (!stopping_) {
      std::move(host_staged_.begin(), host_staged_.end(), std::back_inserter(host_inbox_));
      host_cancels_.insert(host_cancels_.end(), cancels_staged_.begin(), cancels_staged_.end());
      if (!host_inbox_.empty() && !host_.joinable()) host_ = std::thread([this] {
        observe::name_runtime_thread("manta-c-host");
        host_loop();
      });
      // (News concern objects of calls routed here, which started the thread.)
      if (host_.joinable()) host_news_.insert(host_news_.end(), news_staged_.begin(), news_staged_.end());
      host_arrivals_.fetch_add(1);
    }
  }
  host_staged_.clear();
  cancels_staged_.clear();
  news_staged_.clear();
  cv_.notify_all();
  if (host_waits_.load()) rt_.wake_waiters();  // (it waits for results: what came may not wait for them)
}

void cluster_driver::take_frame(bridge::frame&& f) {
  if (f.type == bridge::frame_type::run_task) {  // a call of an actor this node offered
    host_staged_.push_back(bridge::decode_task(std::move(f.body)));  // malformed: throws, and the link ends
    host_staged_.back().landed = std::move(f.landed);
  } else if (f.type == bridge::frame_type::cancel_task && f.body.size() == sizeof(std::uint64_t)) {
    std::uint64_t call = 0;  // a call of an offered actor, cancelled by its caller
    std::memcpy(&call, f.body.data(), sizeof call);
    cancels_staged_.push_back(call);
  } else if (f.type == bridge::frame_type::task_result) {
    inbound in;
    // (Values that landed in the arena are not in the body: decode_outcome is told which.)
    const auto* landed = static_cast<const landed_values*>(f.landed.get());
    const std::vector<std::uint32_t> numbers = landed ? landed->numbers() : std::vector<std::uint32_t>();
    in.outcome = bridge::decode_outcome(std::move(f.body), numbers);  // malformed: throws, and the link ends
    in.outcome.landed = std::move(f.landed);
    to_applier(std::move(in));
  } else if (f.type == bridge::frame_type::actor_found) {
    bridge::actor_lookup found = bridge::decode_actor_lookup(f.body);  // malformed: throws, and the link ends
    inbound in;
    {
      std::lock_guard lock(mu_);
      if (auto offer = offering_.find(found.request); offer != offering_.end()) {
        in.offer_answer.emplace(std::move(offer->second), found.why);
        offering_.erase(offer);
      } else if (auto it = askers_.find(found.request); it != askers_.end()) {
        in.found.emplace(std::move(it->second), std::move(found));
        askers_.erase(it);
      } else if (asking_.count(found.request)) {
        lookups_[found.request] = std::move(found);
      }
    }
    if (in.found || in.offer_answer) to_applier(std::move(in));
    else cv_.notify_all();
  } else if (f.type == bridge::frame_type::actor_returned) {  // a handle lent in a result is no longer held
    inbound in;
    in.returned = std::move(f.body);
    to_applier(std::move(in));
  } else if (f.type == bridge::frame_type::actor_end) {  // another driver killed one of this driver's actors
    inbound in;
    bridge::actor_end e = bridge::decode_actor_end(f.body);  // malformed: throws, and the link ends
    in.killed = std::move(e.actor);
    in.killed_why = std::move(e.why);
    to_applier(std::move(in));
  } else if (f.type == bridge::frame_type::object_lost || f.type == bridge::frame_type::object_freed) {
    // (About an object the hosting thread fetched: a copy it holds, or one it waits for.)
    news_staged_.emplace_back(f.type, bridge::decode_object_note(f.body));  // malformed: throws, and the link ends
  } else if (f.type == bridge::frame_type::fetch_object) {
    inbound in;
    in.fetch = bridge::decode_object_note(f.body);  // malformed: throws, and the link ends
    to_applier(std::move(in));
  } else if (f.type == bridge::frame_type::output) {
    rt_.print_remote_output(bridge::decode_output(f.body));  // malformed: throws, and the link ends
  } else if (f.type == bridge::frame_type::cluster_update) {
    std::vector<manta::node_info> table, drivers;
    std::uint64_t version = 0;
    try {
      json j = json::parse(f.body);
      version = j.at("version").get<std::uint64_t>();
      for (const auto& n : j.at("nodes"))
        table.push_back({n.at("id").get<std::string>(), n.at("address").get<std::string>(),
                         n.at("resources").get<std::map<std::string, double>>(), n.at("alive").get<bool>()});
      for (const auto& d : j.value("drivers", json::array()))
        if (!d.value("node_id", std::string()).empty())
          drivers.push_back({d.at("node_id").get<std::string>(), d.at("address").get<std::string>(),
                             d.at("resources").get<std::map<std::string, double>>(), true});
    } catch (const json::exception& e) {
      throw bridge::wire_error(std::string("manta: a malformed node table from the head: ") + e.what());
    }
    {
      std::lock_guard lock(mu_);
      if (version > version_) {
        if (log::enabled(log::level::debug)) log_table_change(table_, table);
        version_ = version;
        table_ = std::move(table);
        drivers_ = std::move(drivers);
      }
    }
    cv_.notify_all();
  }
}

void cluster_driver::on_end(const std::string& why) {
  MANTA_DEBUG << "cluster: the link to the head ended: " << (why.empty() ? "the cluster was stopped" : why);
  std::deque<outgoing> unsent;  // never sent: they fail with the rest
  {
    std::lock_guard lock(mu_);
    lost_ = why.empty() ? "the cluster was stopped" : why;
    ended_.store(true, std::memory_order_release);
    for (auto& n : table_) n.alive = false;
    unsent.swap(queue_);
    for (auto& [request, asker] : askers_) {  // workers waiting for a lookup hear why not
      inbound in;
      in.found.emplace(std::move(asker), bridge::actor_lookup{request, {}, {}, 0, "the cluster is gone (" + lost_ + ")"});
      inbound_.push_back(std::move(in));
    }
    askers_.clear();
    offering_.clear();  // (named actors waiting for the head's word start: cluster_lost)
    // After the outcomes that arrived before it: the applier fails what is left.
    inbound_.push_back({true, lost_, {}});
  }
  cv_.notify_all();
  applier_cv_.notify_all();
  give_back(unsent);
}

// ---- a node's service

namespace {

/// A task the head sent, running here.
struct job {
  std::uint64_t id = 0;
  std::vector<detail::ref_node*> returns;  ///< counted
  std::vector<detail::ref_node*> pinned;   ///< results whose bytes its outcome borrows
  std::vector<detail::ref_node*> handles;  ///< counted: actor handles its arguments hold, made here
  bool call = false;  ///< an actor's call: it waits in its actor's queue, not for a worker
};

/// The actors drivers started on this node, by key (remote_task::actor): one
/// handle each, given back when the driver ends the actor.
using actor_table = std::map<std::string, detail::ref_node*>;
/// Copies of drivers' objects that tasks here named, by key: one count each,
/// given back when the driver frees the object (or leaves). The entries are
/// also kept as a set, which made_here_inside asks on every round.
class object_table {
 public:
  object_table() = default;
  object_table(const object_table&) = delete;
  object_table& operator=(const object_table&) = delete;
  bool has(const std::string& key) const { return by_key_.count(key) != 0; }
  /// The copy kept as `key`, or null.
  detail::ref_node* find(const std::string& key) const {
    auto it = by_key_.find(key);
    return it == by_key_.end() ? nullptr : it->second;
  }
  /// Whether `n` is a copy of a driver's object (under any key).
  bool is_copy(const detail::ref_node* n) const { return entries_.count(n) != 0; }
  /// Keeps `n` (one count, taken over) as `key`.
  void keep(const std::string& key, detail::ref_node* n) {
    by_key_.emplace(key, n);
    ++entries_[n];
  }
  /// Gives back every copy (with the runtime in use: process::context_use).
  void clear() {
    for (auto& [key, n] : by_key_) detail::release(n);
    by_key_.clear();
    entries_.clear();
  }
  /// Gives back the copy kept as `key`, if any.
  void drop(const std::string& key) {
    auto it = by_key_.find(key);
    if (it == by_key_.end()) return;
    if (auto e = entries_.find(it->second); --e->second == 0) entries_.erase(e);
    detail::release(it->second);
    by_key_.erase(it);
  }

 private:
  std::map<std::string, detail::ref_node*> by_key_;
  std::unordered_map<const detail::ref_node*, int> entries_;  ///< how many keys name each
};

/// Whether every object `t` names is here.
bool has_objects(const bridge::remote_task& t, const object_table& objects) {
  return std::all_of(t.objects.begin(), t.objects.end(), [&](const std::string& k) { return objects.has(k); });
}

/// Submits `t` to this node's runtime; an actor's constructor goes into
/// `actors` and leaves the job without results. @throws what submission throws
job start(node_runtime& rt, const bridge::remote_task& t, actor_table& actors, const object_table& objects) {
  using detail::call_mode;
  if (t.mode > static_cast<std::uint8_t>(call_mode::method))
    throw usage_error("manta: task '" + t.name + "' came with a call mode a node does not run");
  const auto mode = static_cast<call_mode>(t.mode);
  const auto kind = mode == call_mode::construct ? detail::callable_kind::constructor
                    : mode == call_mode::method  ? detail::callable_kind::method
                                                 : detail::callable_kind::function;
  const detail::function_info* fn = detail::function_by_id(t.function);
  if (!fn || fn->kind != kind)
    throw usage_error("manta: '" + t.name + "' is not a " +
                      (kind == detail::callable_kind::function ? "function" : "an actor's constructor or method") +
                      " this node's binary registered");
  if ((kind == detail::callable_kind::function) != t.actor.empty())
    throw usage_error("manta: task '" + t.name + "' came without its actor, or with one it does not take");
  if (mode == call_mode::construct && actors.count(t.actor))
    throw usage_error("manta: actor '" + t.actor + "' was started on this node already");
  detail::task_request r;
  if (mode == call_mode::method) {
    auto it = actors.find(t.actor);
    if (it == actors.end())
      throw actor_died_error("manta: the actor of call '" + t.name + "' is not on this node (it was ended)");
    detail::acquire(it->second);
    r.actor = it->second;
  }
  r.function = fn;
  r.mode = mode;
  r.num_returns = t.num_returns;
  r.options.num_cpus = t.num_cpus;
  r.options.num_gpus = t.num_gpus;
  r.options.resources = t.resources;
  r.options.memory = t.memory;
  r.options.max_retries = t.max_retries;
  r.options.retry_exceptions = t.retry_exceptions;
  // (An actor's name lives in its driver: two drivers may name theirs alike.)
  r.options.name = t.name == fn->name || mode == call_mode::construct ? std::string() : t.name;
  r.options.timeout_ns = t.timeout_ns;
  r.options.max_calls = t.max_calls;
  if (mode == call_mode::construct) {
    r.options.max_restarts = t.max_restarts;
    r.options.max_task_retries = t.max_task_retries;
    r.options.max_concurrency = std::max(1, t.max_concurrency);
  }
  // Handles its arguments hold, of actors on nodes: made here first, under their ids.
  std::vector<detail::ref_node*> handles;
  struct release_all {
    std::vector<detail::ref_node*>& v;
    ~release_all() {
      for (auto* n : v) detail::release(n);
    }
  } on_failure{handles};
  for (const auto& h : t.handles) {
    const std::optional<object_id> id = id_from_text(h.id);
    if (!id) throw usage_error("manta: task '" + t.name + "' names an actor handle with a malformed id");
    handles.push_back(rt.borrow_actor(*id, h.key, h.class_tag, h.label));
  }
  detail::arg_writer writer(r);  // large values go into this node's arena first
  process::for_each_arg(t.args, t.arg_count, [&](const process::blob_arg& a) {
    if (a.kind == process::arg_kind::ref && a.size_or_index >= t.objects.size() && landed_of(t)) {
      detail::ref_node* n = landed_of(t)->claim(a.size_or_index - t.objects.size());  // it landed in the arena
      struct released {
        detail::ref_node* n;
        ~released() { detail::release(n); }
      } once_passed{n};
      writer.ref(n, a.tag);
      return;
    }
    if (a.kind == process::arg_kind::ref) {  // an object fetched before (has_objects)
      detail::ref_node* held = a.size_or_index < t.objects.size() ? objects.find(t.objects[a.size_or_index]) : nullptr;
      if (!held) throw usage_error("manta: task '" + t.name + "' names an object this node does not hold");
      writer.ref(held, a.tag);
      return;
    }
    detail::encoded_value v;
    v.type_tag = a.tag;
    v.borrowed = a.bytes;
    v.size = a.size_or_index;
    writer.value(v);
  });
  job j{t.id, std::vector<detail::ref_node*>(t.num_returns, nullptr)};
  j.call = mode == call_mode::method;
  rt.submit(std::move(r), j.returns.data());
  j.handles = std::move(handles);  // (held until it is answered)
  if (mode == call_mode::construct) {
    actors.emplace(t.actor, j.returns[0]);  // the handle: calls find it from now on
    j.returns.clear();
  }
  return j;
}

/// Keeps the value an object frame carries (mode_object) as `t.object`, under
/// the id its driver gave it: refs to it inside other values resolve here.
/// @throws what putting it throws (the arena is full), usage_error for a malformed key
void keep_object(node_runtime& rt, object_table& objects, const bridge::remote_task& t) {
  if (objects.has(t.object) || t.arg_count != 1) return;
  const std::optional<object_id> id = id_in_object_key(t.object);
  if (!id) throw usage_error("manta: object " + t.object + " came with a malformed key");
  if (landed_values* landed = landed_of(t)) {  // it landed in the arena as it came
    objects.keep(t.object, landed->claim_as(0, *id));
    return;
  }
  detail::encoded_value v;
  process::for_each_arg(t.args, t.arg_count, [&](const process::blob_arg& a) {
    if (a.kind != process::arg_kind::value) throw usage_error("manta: object " + t.object + " came as a ref");
    v.type_tag = a.tag;
    v.borrowed = a.bytes;
    v.size = a.size_or_index;
  });
  objects.keep(t.object, rt.import_object(*id, v));
}

/// Keeps object `key` that failed at its driver as failed here (`failed`
/// note), so what names it runs and its get raises the object's own error, as
/// on the driver's node. @returns false if it cannot (a malformed key)
bool keep_failed(node_runtime& rt, object_table& objects, const bridge::object_note& note) {
  if (!note.failed || !note.error || objects.has(note.object)) return false;
  const std::optional<object_id> id = id_in_object_key(note.object);
  if (!id) return false;
  objects.keep(note.object, rt.import_failed(*id, from_remote(*note.error)));
  return true;
}

/// A driver ended one of its actors here: its handle goes (it ends once its
/// calls are done), or it is killed at once.
void end_actor(node_runtime& rt, actor_table& actors, const bridge::actor_end& e) {
  auto it = actors.find(e.actor);
  if (it == actors.end()) return;
  if (e.kill) {
    try {
      rt.kill_actor(it->second);
    } catch (const std::exception&) {  // (the runtime is going)
    }
  }
  detail::release(it->second);
  actors.erase(it);
}

/// The objects refs inside `j`'s results name that their driver may not
/// hold, and refs inside those, each after the ones it holds refs to (the
/// driver keeps them in that order): those this node made, those it got
/// from other nodes (results of its own nested tasks), and every actor
/// handle. Copies of drivers' objects, fetched for tasks here (`fetched`),
/// are not among them.
std::vector<object_entry*> made_here_inside(const node_runtime& rt, const job& j, const object_table& fetched) {
  std::vector<object_entry*> out;
  std::unordered_set<const object_entry*> seen;
  std::vector<std::pair<object_entry*, std::size_t>> path;  // an entry, and its next ref to follow
  auto visit = [&](detail::ref_node* n) {
    auto* e = static_cast<object_entry*>(n);
    // (Every actor handle goes: the receiver makes it, or finds its own.)
    const bool its_drivers = (e->id.hi >> 32) != rt.epoch() && fetched.is_copy(e);
    if (!its_drivers && seen.insert(e).second) path.emplace_back(e, 0);
  };
  for (detail::ref_node* r : j.returns)
    for (detail::ref_node* c : static_cast<object_entry*>(r)->contained) {
      visit(c);
      while (!path.empty()) {
        auto& [e, next] = path.back();
        // (status first: `contained` is written before an entry is sealed, and fixed after)
        if (e->status() == state_ready && next < e->contained.size()) {
          visit(e->contained[next++]);
        } else {
          out.push_back(e);
          path.pop_back();
        }
      }
    }
  return out;
}

/// What `j` still waits for: a result not sealed, or an object made here that
/// one names and that is not made yet; null when it can be answered.
detail::ref_node* awaited(const node_runtime& rt, const job& j, const object_table& fetched) {
  for (detail::ref_node* r : j.returns)
    if (static_cast<object_entry*>(r)->status() == state_pending) return r;
  if (std::none_of(j.returns.begin(), j.returns.end(),
                   [](detail::ref_node* r) { return !static_cast<object_entry*>(r)->contained.empty(); }))
    return nullptr;
  for (object_entry* e : made_here_inside(rt, j, fetched)) {
    if (e->status() == state_pending) return e;
    // An actor this node started on the cluster: its constructor goes on the
    // node's other connection, and the head must know it before the result
    // hands it over. (Not pending: nothing to wake on; the wait is polled.)
    if (e->actor && e->actor->remote && !e->actor->borrowed && !e->actor->answered.load(std::memory_order_acquire))
      return e;
  }
  return nullptr;
}

/// The outcome of a job that awaits nothing; its values borrow the results'
/// bytes in the arena (pinned) until done_with. Objects made here that refs
/// in the results name go with them: the driver keeps them under their ids.
bridge::task_outcome finish(node_runtime& rt, job& j, const object_table& fetched) {
  bridge::task_outcome o;
  o.id = j.id;
  std::size_t bytes = 0;
  std::vector<std::string> kept;  // the keys of the handles it hands over (a count kept of each)
  auto add = [&](detail::ref_node* n, bool carried) {
    auto* e = static_cast<object_entry*>(n);
    if (carried && e->actor) {
      try {
        o.handles.push_back(rt.lend_actor(e));
        if (o.handles.back().owned) {
          kept.push_back(o.handles.back().key);
          o.lender = rt.cluster_id();
        }
      } catch (const std::exception&) {
        o = failed_outcome(j.id, ipc::error_from_exception(std::current_exception(), "", ::getpid()));
      }
    } else if (e->status() == state_failed) {
      if (!carried) {
        o = failed_outcome(j.id, e->error->describe());
        return;
      }
      bridge::remote_value v;
      v.id = id_text(e->id);
      v.error = to_remote(e->error->describe());
      o.values.push_back(std::move(v));
    } else if ((bytes += e->size) > bridge::max_long_body - (1u << 20)) {
      o = failed_outcome(j.id, usage("manta: results of " + std::to_string(bytes) + " bytes (with the objects their "
                                         "refs name) are over the " + std::to_string(bridge::max_long_body >> 30) +
                                         " GiB a result may carry between nodes",
                                     ""));
    } else {
      detail::object_data d;
      try {
        // Sealed: at once, pinned. A spilled one is read back, which may wait
        // (a few seconds at most) for values workers here are writing.
        d = rt.fetch(n, detail::clock::now() + std::chrono::seconds(5));
      } catch (const std::exception&) {  // (the arena too full to read a spilled one back)
        o = failed_outcome(j.id, ipc::error_from_exception(std::current_exception(), "", ::getpid()));
        return;
      }
      j.pinned.push_back(n);
      bridge::remote_value v{d.type_tag, {}, std::string_view(reinterpret_cast<const char*>(d.data), d.size)};
      for (const detail::ref_node* c : e->contained) v.inside.push_back(id_text(c->id));
      if (carried) v.id = id_text(e->id);
      o.values.push_back(std::move(v));
    }
  };
  bool holds_refs = false;
  for (detail::ref_node* n : j.returns) {
    if (!o.ok) break;
    add(n, false);
    holds_refs = holds_refs || !static_cast<object_entry*>(n)->contained.empty();
  }
  if (holds_refs)
    for (object_entry* e : made_here_inside(rt, j, fetched)) {
      if (!o.ok) break;
      add(e, true);
    }
  if (!o.ok) {
    o.values.clear();
    o.handles.clear();
    for (const auto& key : kept) rt.actor_returned(key);  // lent before the failure: nobody receives them
  }
  return o;
}

/// Gives back a finished job's results (once its outcome is sent).
void done_with(node_runtime& rt, job& j) {
  for (auto* n : j.pinned) rt.unpin(n);
  j.pinned.clear();
  for (auto* n : j.handles) detail::release(n);
  j.handles.clear();
  for (auto*& n : j.returns) detail::release(std::exchange(n, nullptr));
}

}  // namespace

void cluster_driver::host_loop() {
  // As a node serves the head's tasks (serve_as_node), for calls alone: each
  // goes to its actor here as this driver's own calls do; its outcome goes back
  // once its results are sealed.
  std::vector<job> running;
  std::vector<detail::ref_node*> watch;
  std::uint64_t taken_arrivals = 0;  ///< host_arrivals_ when the inbox was last taken
  const object_table none;  // (results name no copy: what a call's refs name goes back with its outcome)
  // Objects of other members a call names by key are fetched through the head
  // (this driver answers fetches the same way); the call waits parked, and so
  // do later calls of its actor, so that an actor's calls run in order.
  object_table copies;  ///< fetched objects, by key, until their owner frees them
  std::deque<bridge::remote_task> parked;
  std::set<std::string> requested, parked_actors;
  auto answer = [&](bridge::task_outcome o) {
    o.node = id();
    try {
      const std::string head = bridge::encode_outcome_head(o);
      std::vector<std::string_view> pieces{head};
      for (const auto& v : o.values) pieces.push_back(v.data());
      link_->send(bridge::frame_type::task_result, pieces);  // (a long one in parts)
      return;
    } catch (const bridge::wire_error& e) {
      o = failed_outcome(o.id, usage(std::string("manta: the outcome of a call could not be sent back: ") + e.what(),
                                     o.error.function));
    } catch (const std::exception&) {  // the link broke: its end fails what is left
      return;
    }
    try {
      link_->send(bridge::frame_type::task_result, bridge::encode_outcome(o));
    } catch (const std::exception&) {
    }
  };
  // Starts call `t`, or returns the keys of the objects it names that are not
  // here yet (it then starts nothing).
  auto start_call = [&](const bridge::remote_task& t) -> std::vector<std::string> {
    if (t.mode != static_cast<std::uint8_t>(detail::call_mode::method) || !on_driver_key(t.actor) ||
        t.actor.rfind(id() + "/", 0) != 0)
      throw usage_error("manta: " + id() + " was sent '" + t.name + "', which is not a call of an actor it offered");
    object_table objects;  // the objects the call names by key, found here
    struct cleared {
      object_table& o;
      ~cleared() { o.clear(); }
    } on_exit{objects};
    std::vector<std::string> missing;
    for (const auto& key : t.objects) {
      // Keyed by the sender, named by the id this driver gave them (or kept them under).
      detail::ref_node* n = copies.find(key);
      if (n) {
        detail::acquire(n);
      } else if (const std::optional<object_id> oid = id_in_object_key(key)) {
        try {
          n = rt_.ref_from_id(*oid);  // counted
        } catch (const usage_error&) {  // another member's, or freed
        }
      }
      if (!n && key.rfind(id() + "/", 0) == 0)
        throw usage_error("manta: actor call '" + t.name + "' names object " + key + ", which " + id() +
                          " no longer holds (it was freed)");
      if (!n) missing.push_back(key);
      else if (objects.has(key)) detail::release(n);
      else objects.keep(key, n);
    }
    if (!missing.empty()) return missing;
    if (!t.origin.empty()) rt_.set_origin(t.origin);  // (what the call starts serves its caller's program)
    detail::ref_node* actor = rt_.hosted_actor(t.actor);  // counted
    if (!actor)
      throw actor_died_error("manta: actor call '" + t.name + "' cannot run: its actor on " + id() + " has ended");
    actor_table actors{{t.actor, actor}};
    struct released {
      detail::ref_node* n;
      ~released() { detail::release(n); }
    } on_return{actor};
    running.push_back(start(rt_, t, actors, objects));
    return {};
  };
  auto fail_call = [&](const bridge::remote_task& t) {
    answer(failed_outcome(t.id, ipc::error_from_exception(std::current_exception(), t.name, ::getpid())));
  };
  // Starts `t` unless a call of its actor waits already; else, or if objects
  // it names must come first, parks it (asking for those).
  auto start_or_park = [&](bridge::remote_task&& t) {
    std::vector<std::string> missing;
    try {
      if (!parked_actors.count(t.actor)) missing = start_call(t);
    } catch (const std::exception&) {
      fail_call(t);
      return;
    }
    if (missing.empty() && !parked_actors.count(t.actor)) return;
    for (const auto& key : missing) {
      if (!requested.insert(key).second) continue;
      try {
        link_->send(bridge::frame_type::fetch_object, bridge::encode_object_note({key, {}, {}}));
      } catch (const std::exception&) {  // the link broke: its end fails what is left
      }
    }
    parked_actors.insert(t.actor);
    parked.push_back(std::move(t));
  };
  // Starts the parked calls whose objects all came, in order (a call whose
  // objects did not come holds its actor's later calls back).
  auto unpark = [&] {
    std::deque<bridge::remote_task> waiting = std::move(parked);
    parked.clear();
    parked_actors.clear();
    for (auto& t : waiting) {
      const bool ready = std::all_of(t.objects.begin(), t.objects.end(),
                                     [&](const std::string& k) { return !requested.count(k); });
      if (ready) start_or_park(std::move(t));
      else {
        parked_actors.insert(t.actor);
        parked.push_back(std::move(t));
      }
    }
  };
  // Object `key` cannot come: the parked calls that name it fail.
  auto object_lost = [&](const std::string& key, const std::string& why, const std::optional<ipc::error_info>& cause) {
    requested.erase(key);
    std::erase_if(parked, [&](const bridge::remote_task& t) {
      if (std::find(t.objects.begin(), t.objects.end(), key) == t.objects.end()) return false;
      answer(failed_outcome(t.id, unfetched("actor call", t.name, key, why, cause)));
      return true;
    });
  };
  bool runtime_gone = false;
  for (;;) {
    std::deque<bridge::remote_task> arrived;
    std::vector<std::uint64_t> cancels;
    std::vector<object_news> news;
    {
      std::unique_lock lock(mu_);
      if (running.empty() || runtime_gone)
        cv_.wait(lock, [&] {
          return stopping_ || !lost_.empty() ||
                 (!runtime_gone && (!host_inbox_.empty() || !host_cancels_.empty() || !host_news_.empty()));
        });
      if (stopping_ || !lost_.empty()) break;
      arrived.swap(host_inbox_);
      cancels.swap(host_cancels_);
      news.swap(host_news_);
      taken_arrivals = host_arrivals_.load();
    }
    process::context_use use;
    // Objects first (values that came, and news), then the calls that waited for them.
    const bool about_objects =
        !news.empty() || std::any_of(arrived.begin(), arrived.end(),
                                     [](const bridge::remote_task& t) { return t.mode == bridge::mode_object; });
    // Values before news: the head sends an object's news after its value, and
    // both may be taken in one round (news first would keep a freed copy).
    std::erase_if(arrived, [&](const bridge::remote_task& t) {
      if (t.mode != bridge::mode_object) return false;
      try {
        if (requested.count(t.object)) keep_object(rt_, copies, t);  // (one asked for: the head sends no other)
        requested.erase(t.object);
      } catch (const std::exception& e) {
        object_lost(t.object, std::string("this driver could not keep it: ") + e.what(),
                    ipc::error_from_exception(std::current_exception(), {}, ::getpid()));
      }
      answer({t.id, true, {}, {}, {}});  // (nobody waits for it: the head drops its route)
      return true;
    });
    for (auto& [type, note] : news) {
      if (type == bridge::frame_type::object_freed) copies.drop(note.object);
      else if (keep_failed(rt_, copies, note)) requested.erase(note.object);
      else object_lost(note.object, note.why, note.error ? std::optional(from_remote(*note.error)) : std::nullopt);
    }
    if (about_objects) unpark();
    for (std::uint64_t call : cancels) {
      // Not started: dropped; started: cancelled in this runtime (dropped from
      // its actor's queue, or left to finish if it runs), answered as any other.
      if (auto it = std::find_if(arrived.begin(), arrived.end(), [&](const auto& t) { return t.id == call; });
          it != arrived.end()) {
        answer(failed_outcome(call, {ipc::error_kind::cancelled, "manta::task_cancelled_error",
                                     "manta: task '" + it->name + "' was cancelled", it->name, {}, ::getpid(), 0, {}}));
        arrived.erase(it);
        continue;
      }
      if (auto it = std::find_if(parked.begin(), parked.end(), [&](const auto& t) { return t.id == call; });
          it != parked.end()) {
        answer(failed_outcome(call, {ipc::error_kind::cancelled, "manta::task_cancelled_error",
                                     "manta: task '" + it->name + "' was cancelled", it->name, {}, ::getpid(), 0, {}}));
        parked.erase(it);
        unpark();  // (the calls of its actor behind it may go)
        continue;
      }
      for (auto& j : running)
        if (j.id == call && !j.returns.empty() && j.returns[0]) {
          try {
            rt_.cancel_producer(j.returns[0]);
          } catch (const std::exception&) {  // (the runtime is stopping)
          }
        }
    }
    {
      node_runtime::submission_batch batch(rt_);  // (the round's calls go in under one lock)
      for (auto& t : arrived) start_or_park(std::move(t));
    }
    try {
      if (!running.empty() && std::all_of(running.begin(), running.end(), [&](const job& j) { return awaited(rt_, j, none); })) {
        watch.clear();
        for (std::size_t i = 0; i < running.size() && watch.size() < 32; ++i)
          if (auto* next = awaited(rt_, running[i], none); next && static_cast<object_entry*>(next)->status() == state_pending)
            watch.push_back(next);  // (an actor's start awaited is polled)
        raised waiting(host_waits_);
        rt_.wait_any(watch, detail::clock::now() + std::chrono::milliseconds(2),
                     [&] { return host_arrivals_.load() != taken_arrivals; });
      }
      for (auto& j : running) {
        if (awaited(rt_, j, none)) continue;
        answer(finish(rt_, j, none));  // sent from the arena
        done_with(rt_, j);
      }
    } catch (const std::exception&) {
      // The runtime is stopping (its waits end with usage_error): nothing more
      // runs here; the head fails these calls when this driver leaves.
      runtime_gone = true;
    }
    std::erase_if(running, [](const job& j) { return j.returns.empty() || !j.returns[0]; });
  }
  process::context_use use;
  for (auto& j : running) {
    for (auto* n : j.returns) detail::release(n);
    for (auto* n : j.handles) detail::release(n);
    for (auto* n : j.pinned) rt_.unpin(n);
  }
  copies.clear();  // (parked calls are failed by the head as this driver leaves)
}

std::string serve_as_node(node_runtime& rt, const std::string& address, const std::string& token) {
  std::mutex mu;  // inbox, ended, done
  std::condition_variable cv;
  /// A task from the head, or the end of an actor (in the order they came).
  struct arrival {
    bridge::remote_task task;
    std::optional<bridge::actor_end> end;
    std::optional<std::uint64_t> cancel;  ///< the number of a task sent before
    std::optional<bridge::object_note> note;  ///< an object lost or freed (`note_type`)
    bridge::frame_type note_type{};
  };
  std::deque<arrival> inbox;  ///< from the head, not submitted yet
  std::string ended;
  bool done = false;
  // Rounds of frames put into the inbox, and whether the serving thread waits
  // in the runtime for results: frames that come meanwhile wake it, rather
  // than wait for a result or the end of its wait.
  std::atomic<std::uint64_t> arrivals{0};
  std::atomic<bool> waits_for_results{false};

  rt.serve_cluster(address, token);  // (a driver too: its workers' tasks may go to other nodes)
  bridge::node_info me{host_name(),         static_cast<int>(::getpid()), rt.resources(false),
                       detail::registered_names(), "node",                       manta::node_id()};
  bridge::node_link link(
      address, token, std::move(me),
      [&](const std::string& why) {
        std::lock_guard lock(mu);
        ended = why;
        done = true;
        cv.notify_all();
      },
      [&](std::vector<bridge::frame>&& frames) {
        // Only decoded here: the link's thread must keep reading (submitting may
        // put large arguments into the arena, and spill). Frames that came
        // together go to the serving thread together: a call and its cancel
        // read at once are handled in one round (the call is dropped, not run).
        std::vector<arrival> together;
        for (bridge::frame& f : frames) {
          arrival a;
          if (f.type == bridge::frame_type::run_task) {
            a.task = bridge::decode_task(std::move(f.body));  // malformed: the link ends
            a.task.landed = std::move(f.landed);
          }
          else if (f.type == bridge::frame_type::actor_end) a.end = bridge::decode_actor_end(f.body);
          else if (f.type == bridge::frame_type::cancel_task && f.body.size() == sizeof(std::uint64_t))
            std::memcpy(&a.cancel.emplace(), f.body.data(), sizeof(std::uint64_t));
          else if (f.type == bridge::frame_type::object_lost || f.type == bridge::frame_type::object_freed)
            a.note = bridge::decode_object_note(f.body), a.note_type = f.type;
          else continue;
          together.push_back(std::move(a));
        }
        if (together.empty()) return;
        std::lock_guard lock(mu);
        const bool was_empty = inbox.empty();
        std::move(together.begin(), together.end(), std::back_inserter(inbox));
        arrivals.fetch_add(1);
        if (was_empty) cv.notify_all();  // (the serving thread sleeps only on an empty inbox)
        if (waits_for_results.load()) rt.wake_waiters();
      },
      lander_for(rt));  // a long task's large values go into the arena as they come, where they stay
  const std::string me_id = link.node_id();
  std::fprintf(stderr, "manta: joined the cluster at %s as %s\n", address.c_str(), me_id.c_str());

  // Small outcomes found together go back in one write (sent at the end of
  // each round of the loop below); a long one goes at once, in parts.
  std::string outbox;
  auto flush = [&] {
    if (outbox.empty()) return;
    try {
      link.send_encoded(outbox);
    } catch (const std::exception&) {  // the link broke (send ended it): its callback says why
    }
    outbox.clear();
  };
  auto answer = [&](bridge::task_outcome o) {
    o.node = me_id;
    try {
      // The header, then each value as it is (a long outcome goes in parts, uncopied).
      const std::string head = bridge::encode_outcome_head(o);
      std::vector<std::string_view> pieces{head};
      for (const auto& v : o.values) pieces.push_back(v.data());
      if (bridge::total_size(pieces) <= (64u << 10)) {
        bridge::append_frame(outbox, bridge::frame_type::task_result, pieces);
        if (outbox.size() >= (1u << 20)) flush();
        return;
      }
      flush();
      link.send(bridge::frame_type::task_result, pieces);
      return;
    } catch (const bridge::wire_error& e) {
      // Too large to travel (its header: an error's text): the driver hears why, not nothing.
      o = failed_outcome(o.id, usage(std::string("manta: the outcome of a task could not be sent back: ") + e.what(),
                                     o.error.function));
    } catch (const std::exception&) {  // the link broke (send ended it): its callback says why
      return;
    }
    flush();
    try {
      link.send(bridge::frame_type::task_result, bridge::encode_outcome(o));
    } catch (const std::exception&) {
    }
  };

  std::vector<job> running;
  std::vector<detail::ref_node*> watch;
  std::uint64_t taken_arrivals = 0;  ///< `arrivals` when the inbox was last taken (under mu)
  std::string why;
  // Tasks go into the runtime 32 per worker at a time; the rest wait here. A
  // runtime's ready queue thousands long makes every dispatch scan it (tasks
  // asking for resources may let later ones pass).
  const std::size_t in_runtime = std::max<std::size_t>(64, 32 * rt.worker_count());
  std::deque<arrival> waiting;
  actor_table actors;
  // Tasks waiting for objects to arrive from their drivers (in arrival order),
  // the objects asked for, and the actors with a call among them (their later
  // calls wait behind it, so calls still run in order).
  object_table objects;
  std::map<std::string, std::string> unstarted;  ///< actors whose constructor failed here: why (until their end)
  std::string origin;  ///< the driver of the task submitted last
  std::map<std::string, std::vector<detail::ref_node*>> ctor_handles;  ///< counted: handles actors here were built with
  std::deque<arrival> parked;  ///< tasks, and ends of actors with a parked task
  std::set<std::string> requested, parked_actors;
  auto actor_of = [](const arrival& a) -> const std::string& { return a.end ? a.end->actor : a.task.actor; };
  bool lost = false;
  // A task that failed because this node's processes are gone is not answered:
  // the node leaves, and the head runs it elsewhere.
  // (Only the runtime's own loss: a task of this node that failed because a
  // nested task was lost on another node failed in its worker, whose pid it names.)
  auto runtime_lost = [&](const bridge::task_outcome& o) {
    return !o.ok && o.error.kind == static_cast<std::uint8_t>(ipc::error_kind::node_died) &&
           (rt.lost() || o.error.pid == 0);
  };
  auto submit_one = [&](const bridge::remote_task& t) {
    if (auto it = unstarted.find(t.actor); it != unstarted.end() && !actors.count(t.actor)) {
      answer(failed_outcome(t.id, {ipc::error_kind::actor_died, "manta::actor_died_error",
                                   "manta: the actor of call '" + t.name + "' could not be started on " + me_id + ": " +
                                       it->second,
                                   t.name, {}, ::getpid(), 0, {}}));
      return;
    }
    try {
      if (t.origin != origin) rt.set_origin(origin = t.origin);  // (whose program its nested tasks serve)
      job j = start(rt, t, actors, objects);
      if (j.returns.empty()) {
        answer({t.id, true, {}, {}, {}});  // an actor started: its calls may come
        // The handles its constructor was given, for as long as it lives here.
        auto& kept = ctor_handles[t.actor];
        kept.insert(kept.end(), j.handles.begin(), j.handles.end());
      } else {
        running.push_back(std::move(j));
      }
    } catch (const std::exception&) {
      auto o = failed_outcome(t.id, ipc::error_from_exception(std::current_exception(), t.name, ::getpid()));
      if (t.mode == static_cast<std::uint8_t>(detail::call_mode::construct) && !t.actor.empty())
        unstarted[t.actor] = o.error.message;
      if (runtime_lost(o)) lost = true;
      else answer(std::move(o));
    }
  };
  auto park = [&](arrival&& a) {
    for (const auto& key : a.task.objects) {
      if (objects.has(key) || !requested.insert(key).second) continue;
      try {
        link.send(bridge::frame_type::fetch_object, bridge::encode_object_note({key, {}, {}}));
      } catch (const std::exception&) {  // the link broke: its callback says why
      }
    }
    if (!actor_of(a).empty()) parked_actors.insert(actor_of(a));
    parked.push_back(std::move(a));
  };
  auto end_one = [&](const bridge::actor_end& e) {
    end_actor(rt, actors, e);
    unstarted.erase(e.actor);
    if (auto it = ctor_handles.find(e.actor); it != ctor_handles.end()) {
      for (auto* n : it->second) detail::release(n);
      ctor_handles.erase(it);
    }
  };
  // Takes out the parked tasks whose objects are all here, in order: plain
  // ones go back to the front of `waiting` (under the cap), actors' work now.
  auto unpark = [&] {
    std::deque<arrival> still;
    std::vector<arrival> go;
    std::set<std::string> blocked;
    for (auto& a : parked) {
      const std::string& actor = actor_of(a);
      if ((!a.end && !has_objects(a.task, objects)) || (!actor.empty() && blocked.count(actor))) {
        if (!actor.empty()) blocked.insert(actor);
        still.push_back(std::move(a));
      } else {
        go.push_back(std::move(a));
      }
    }
    parked = std::move(still);
    parked_actors = std::move(blocked);
    for (auto it = go.rbegin(); it != go.rend(); ++it)
      if (actor_of(*it).empty()) waiting.push_front(std::move(*it));
    for (auto& a : go) {
      if (a.end) end_one(*a.end);
      else if (!a.task.actor.empty()) submit_one(a.task);
    }
  };
  auto fail_parked = [&](const arrival& a, ipc::error_kind kind, const char* type, const std::string& message) {
    if (!a.end) answer(failed_outcome(a.task.id, {kind, type, message, a.task.name, {}, ::getpid(), 0, {}}));
  };
  // An object cannot come: the parked tasks that need it fail.
  auto object_lost = [&](const std::string& key, const std::string& why, const std::optional<ipc::error_info>& cause) {
    requested.erase(key);
    std::erase_if(parked, [&](const arrival& a) {
      if (a.end || std::find(a.task.objects.begin(), a.task.objects.end(), key) == a.task.objects.end()) return false;
      if (!a.end) answer(failed_outcome(a.task.id, unfetched("task", a.task.name, key, why, cause)));
      return true;
    });
  };
  for (;;) {
    std::deque<arrival> arrived;
    std::vector<std::uint64_t> cancels;
    std::vector<arrival> about_objects;  // values and notes: handled at once, not behind the tasks that wait
    std::deque<arrival> actor_work;      // constructors, calls, ends: never capped, in order
    {
      std::unique_lock lock(mu);
      // (Idle, it still looks twice a second at its other connection, below.)
      cv.wait_for(lock, std::chrono::milliseconds(500),
                  [&] { return done || !inbox.empty() || !running.empty() || !waiting.empty(); });
      if (!done && rt.cluster_link_ended()) {
        // Its connection as a driver ended (the head dropped it, or is gone):
        // its tasks could no longer reach the cluster. It leaves, so the head
        // runs its work elsewhere; the node link's own news, if it comes at
        // once, says better why.
        cv.wait_for(lock, std::chrono::seconds(1), [&] { return done; });
        if (!done) {
          const std::string gone = rt.cluster_link_lost();
          why = gone.find("stopped") != std::string::npos
                    ? std::string()
                    : "its other connection to the head (as a driver, for its tasks' own work) ended: " + gone;
          break;
        }
      }
      if (done) {
        why = ended.find("stopped") != std::string::npos ? std::string() : ended;
        break;
      }
      for (auto& a : inbox) {
        if (a.cancel) cancels.push_back(*a.cancel);  // at once: not behind the tasks that wait
        else if (a.note || (!a.end && a.task.mode == bridge::mode_object)) about_objects.push_back(std::move(a));
        else if (a.end || !a.task.actor.empty()) actor_work.push_back(std::move(a));
        else waiting.push_back(std::move(a));
      }
      inbox.clear();
      taken_arrivals = arrivals.load();
    }
    lost = false;
    if (!about_objects.empty()) {
      process::context_use use;
      for (auto& a : about_objects) {
        if (a.note && a.note_type == bridge::frame_type::object_freed) {
          objects.drop(a.note->object);
        } else if (a.note) {
          if (keep_failed(rt, objects, *a.note)) requested.erase(a.note->object);
          else
            object_lost(a.note->object, a.note->why,
                        a.note->error ? std::optional(from_remote(*a.note->error)) : std::nullopt);
        } else {
          try {
            keep_object(rt, objects, a.task);
            requested.erase(a.task.object);
          } catch (const std::exception& e) {
            object_lost(a.task.object, std::string("this node could not keep it: ") + e.what(),
                        ipc::error_from_exception(std::current_exception(), {}, ::getpid()));
          }
          answer({a.task.id, true, {}, {}, {}});  // (nobody waits for it: the head drops its route)
        }
      }
      unpark();
    }
    for (std::uint64_t id : cancels) {
      // Not submitted yet: dropped; submitted: cancelled in this runtime (a
      // queued actor call is dropped, a running task's worker killed); its
      // outcome goes back as any other. Done already: nothing to do.
      auto cancelled = [&](const std::string& name) {
        answer(failed_outcome(id, {ipc::error_kind::cancelled, "manta::task_cancelled_error",
                                   "manta: task '" + name + "' was cancelled", name, {}, ::getpid(), 0, {}}));
      };
      auto is_it = [&](const arrival& a) { return !a.end && a.task.id == id; };
      if (auto queued = std::find_if(waiting.begin(), waiting.end(), is_it); queued != waiting.end()) {
        cancelled(queued->task.name);
        waiting.erase(queued);
        continue;
      }
      if (auto call = std::find_if(actor_work.begin(), actor_work.end(), is_it); call != actor_work.end()) {
        cancelled(call->task.name);
        actor_work.erase(call);
        continue;
      }
      auto waits = std::find_if(parked.begin(), parked.end(), is_it);
      if (waits != parked.end()) {
        cancelled(waits->task.name);
        parked.erase(waits);
        unpark();  // (the calls of its actor behind it may go)
        continue;
      }
      auto it = std::find_if(running.begin(), running.end(), [&](const job& j) { return j.id == id; });
      if (it != running.end() && !it->returns.empty() && it->returns[0]) {
        process::context_use use;
        rt.cancel_producer(it->returns[0]);
      }
    }
    arrived = std::move(actor_work);
    // Only plain tasks count: calls queued on a slow actor hold up nobody else.
    std::size_t plain = std::count_if(running.begin(), running.end(), [](const job& j) { return !j.call; });
    for (; !waiting.empty() && plain < in_runtime; ++plain) {
      arrived.push_back(std::move(waiting.front()));
      waiting.pop_front();
    }
    if (rt.lost()) {
      // Its processes are gone: the head must send its tasks elsewhere, which it
      // does once this node leaves.
      why = "this node's runtime was lost: " + rt.lost_why();
      break;
    }
    process::context_use use;
    // Tasks of one round go into the runtime under one lock; an actor's
    // end first lets what came before it in.
    std::optional<node_runtime::submission_batch> batch;
    for (auto& a : arrived) {
      if (a.end) batch.reset();
      if (a.end && parked_actors.count(a.end->actor) && a.end->kill) {
        // Killed while its constructor or calls wait for objects: they never run.
        std::erase_if(parked, [&](const arrival& p) {
          if (actor_of(p) != a.end->actor) return false;
          fail_parked(p, ipc::error_kind::actor_died, "manta::actor_died_error",
                      "manta: actor call '" + p.task.name + "' did not run: its actor was killed");
          return true;
        });
        parked_actors.erase(a.end->actor);
        end_one(*a.end);
      } else if (a.end && !parked_actors.count(a.end->actor)) {
        end_one(*a.end);
      } else if (!a.end && has_objects(a.task, objects) && !(!a.task.actor.empty() && parked_actors.count(a.task.actor))) {
        if (!batch) batch.emplace(rt);
        submit_one(a.task);
      } else {
        park(std::move(a));  // (an end: behind its actor's parked calls)
      }
    }
    batch.reset();
    auto sealed = [&](const job& j) { return !awaited(rt, j, objects); };
    if (!running.empty() && !lost && arrived.empty() && std::none_of(running.begin(), running.end(), sealed)) {
      // Nothing done yet: sleep until one of the oldest is (they mostly finish
      // first), or briefly, so tasks that arrive meanwhile are taken soon.
      watch.clear();
      bool one_done = false;  // since the check above (sealed by the runtime's threads)
      for (std::size_t i = 0; i < running.size() && watch.size() < 32 && !one_done; ++i) {
        detail::ref_node* next = awaited(rt, running[i], objects);
        if (!next) one_done = true;
        else if (static_cast<object_entry*>(next)->status() == state_pending) watch.push_back(next);
      }
      if (!one_done) {
        raised waiting(waits_for_results);
        rt.wait_any(watch, detail::clock::now() + std::chrono::milliseconds(2),
                    [&] { return arrivals.load() != taken_arrivals; });
      }
    }
    for (auto& j : running) {
      if (lost || !sealed(j)) continue;
      bridge::task_outcome o = finish(rt, j, objects);
      if (runtime_lost(o)) lost = true;
      else answer(std::move(o));  // sent from the arena
      done_with(rt, j);
    }
    std::erase_if(running, [](const job& j) { return j.returns.empty() || !j.returns[0]; });
    flush();  // the outcomes of this round, in one write
    if (lost) {
      why = "this node's runtime was lost" + (rt.lost() ? ": " + rt.lost_why() : std::string());
      break;
    }
  }
  process::context_use use;
  for (auto& j : running) {
    for (auto* n : j.returns) detail::release(n);
    for (auto* n : j.handles) detail::release(n);
  }
  for (auto& [key, held] : ctor_handles)
    for (auto* n : held) detail::release(n);
  for (auto& [key, handle] : actors) detail::release(handle);
  objects.clear();
  return why;
}

std::string id_text(const object_id& id) {
  char text[40];
  std::snprintf(text, sizeof text, "%016llx%016llx", static_cast<unsigned long long>(id.hi),
                static_cast<unsigned long long>(id.lo));
  return text;
}

std::optional<object_id> id_from_text(std::string_view text) {
  if (text.size() != 32) return std::nullopt;
  object_id id;
  const char* hex = text.data();
  if (std::from_chars(hex, hex + 16, id.hi, 16).ptr != hex + 16 ||
      std::from_chars(hex + 16, hex + 32, id.lo, 16).ptr != hex + 32)
    return std::nullopt;
  return id;
}

std::string object_key(const std::string& driver, const object_id& id) { return driver + "/" + id_text(id); }

std::optional<object_id> id_in_object_key(const std::string& key) {
  const std::size_t slash = key.rfind('/');
  if (slash == std::string::npos) return std::nullopt;
  return id_from_text(std::string_view(key).substr(slash + 1));
}

// ---- launchers

namespace {
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}
std::string env_string(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}
}  // namespace

std::optional<launch> launched() {
  launch l;
  if (const char* rank = std::getenv("OMPI_COMM_WORLD_RANK")) {
    l.launcher = "mpirun";
    l.rank = std::atoi(rank);
    l.size = env_int("OMPI_COMM_WORLD_SIZE", 1);
    l.job = env_string("PMIX_NAMESPACE");
    if (l.job.empty()) l.job = env_string("OMPI_MCA_ess_base_jobid");
  } else if (const char* rank = std::getenv("SLURM_PROCID")) {
    l.launcher = "srun";
    l.rank = std::atoi(rank);
    l.size = env_int("SLURM_NTASKS", env_int("SLURM_NPROCS", 1));
    l.job = env_string("SLURM_JOB_ID");
    if (!l.job.empty() && std::getenv("SLURM_STEP_ID")) l.job += "." + env_string("SLURM_STEP_ID");
  } else {
    return std::nullopt;
  }
  if (l.size <= 1) return std::nullopt;  // one process: a single node, as without a launcher
  if (l.rank < 0 || l.rank >= l.size)
    throw usage_error("manta: " + l.launcher + " says this is rank " + std::to_string(l.rank) + " of " +
                      std::to_string(l.size));
  if (l.job.empty() || l.job.find('/') != std::string::npos || l.job.find('\0') != std::string::npos)
    throw usage_error("manta: started by " + l.launcher + " with no job id to meet the other ranks by; "
                      "set MANTA_ADDRESS (rank 0's head) or MANTA_NODE instead");
  return l;
}

launch_head::launch_head(const launch& l, const std::string& dir)
    : token_(bridge::new_token()),
      token_file_(dir.empty() ? "" : dir + "/launch-" + l.job + ".token"),
      address_file_(dir.empty() ? "" : dir + "/launch-" + l.job + ".address") {
  // Files an earlier run with this job id left (its rank 0 killed) go first:
  // the other ranks must not take that run's head for this one's.
  if (!dir.empty()) {
    std::remove(address_file_.c_str());
    std::remove(token_file_.c_str());
  }
  std::string bind = env_string("MANTA_BIND");
  if (bind.empty()) bind = "127.0.0.1";  // loopback unless told: one machine
  // TLS as manta start --head --tls-cert/--tls-key, from the environment every rank shares.
  const std::string cert = env_string("MANTA_TLS_CERT"), key = env_string("MANTA_TLS_KEY");
  if (cert.empty() != key.empty())
    throw usage_error("manta: under " + l.launcher + ", MANTA_TLS_CERT and MANTA_TLS_KEY go together (one is unset)");
  std::shared_ptr<bridge::tls_context> tls;
  if (!cert.empty()) tls = bridge::tls_context::for_head(cert, key);
  if (!tls)
    if (const std::string warning = bridge::plain_tcp_warning(bind); !warning.empty()) MANTA_WARN << warning;
  head_ = std::make_unique<bridge::head>(bridge::head::config{.bind = bind, .token = token_, .tls = tls});
  const std::string host = bind == "0.0.0.0" || bind == "::" ? host_name() : bind;
  address_ = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(head_->port());
  if (dir.empty()) return;
  bridge::write_token_file(token_file_, token_);
  // The address last, through a renamed file: a rank that sees it finds the token there too.
  const std::string fresh = address_file_ + ".new";
  {
    std::ofstream out(fresh, std::ios::trunc);
    out << address_ << "\n";
    if (!out.flush()) throw usage_error("manta: cannot write " + fresh);
  }
  if (std::rename(fresh.c_str(), address_file_.c_str()) != 0) throw usage_error("manta: cannot write " + address_file_);
}

launch_head::~launch_head() {
  head_.reset();  // every node is told to stop
  if (address_file_.empty()) return;
  std::remove(address_file_.c_str());
  std::remove(token_file_.c_str());
}

std::pair<std::string, std::string> wait_for_launch_head(const launch& l, const std::string& dir) {
  const std::string address_file = dir + "/launch-" + l.job + ".address";
  const int limit = env_int("MANTA_LAUNCH_TIMEOUT", 60);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(limit);
  std::string address, stale;
  while (address.empty()) {
    std::ifstream(address_file) >> address;
    // A head that does not answer is an earlier run's (its rank 0 was
    // killed and left the file): this run's rank 0 replaces it.
    if (!address.empty()) {  // (asked again each time: this run's head may get the same port)
      try {
        auto [host, port] = bridge::split_address(address);
        ::close(bridge::connect_to(host, port, std::chrono::seconds(2)));
        break;
      } catch (const std::exception&) {
        stale = address;
      }
    }
    address.clear();
    if (std::chrono::steady_clock::now() > until)
      throw usage_error("manta: rank " + std::to_string(l.rank) + " of " + l.launcher + " saw no head within " +
                        std::to_string(limit) + " s (" + address_file +
                        (stale.empty() ? " never appeared; on several machines, set MANTA_LAUNCH_DIR to a shared "
                                         "directory)"
                                       : " names " + stale + ", where no head answers: left by an earlier run?)"));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  try {
    return {address, bridge::read_token_file(dir + "/launch-" + l.job + ".token")};
  } catch (const bridge::token_error& e) {
    throw usage_error(std::string("manta: ") + e.what());
  }
}

}  // namespace manta::runtime

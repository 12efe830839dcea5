// cluster/cluster_driver.cpp: a driver's link to the cluster (cluster.hpp).
#include "cluster/cluster.hpp"

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
#include "observe/log.hpp"
#include "observe/thread_name.hpp"
#include "process/args_blob.hpp"
#include "process/context.hpp"
#include "runtime/directory.hpp"
#include "cluster/landing.hpp"
#include "cluster/cluster_member.hpp"
#include "runtime/node_runtime.hpp"
#include "cluster/remote_jobs.hpp"

namespace manta::runtime {

using nlohmann::json;
using remote::failed_outcome;
using remote::unfetched;
using remote::usage_failure;

namespace {
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
}  // namespace

// The numbers the bridge keeps of the runtime's (task_wire.hpp) are the runtime's.
static_assert(bridge::kind_actor_died == static_cast<std::uint8_t>(ipc::error_kind::actor_died));
static_assert(bridge::kind_usage == static_cast<std::uint8_t>(ipc::error_kind::usage));
static_assert(bridge::kind_node_died == static_cast<std::uint8_t>(ipc::error_kind::node_died));
static_assert(bridge::mode_construct == static_cast<std::uint8_t>(detail::call_mode::construct));
static_assert(bridge::mode_object > static_cast<std::uint8_t>(detail::call_mode::method),
              "an object's frame must not read as a call");
static_assert(std::is_same_v<std::underlying_type_t<ipc::error_kind>, decltype(bridge::remote_error::kind)>);

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


// ---- the driver's side

cluster_driver::cluster_driver(cluster_member& member, const std::string& address, const std::string& token,
                               std::map<std::string, double> resources)
    : member_(member), rt_(member.runtime()) {
  char runtime_id[9];  // (as node_id() says: the table lists this machine under it)
  std::snprintf(runtime_id, sizeof runtime_id, "%08x", rt_.epoch());
  bridge::node_info me{host_name(),
                       static_cast<int>(::getpid()),
                       std::move(resources),
                       detail::registered_names(),
                       "driver",
                       runtime_id};
  link_ = std::make_unique<bridge::node_link>(
      address, token, std::move(me), [this](const std::string& why) { on_end(why); },
      [this](std::vector<bridge::frame>&& frames) { on_frames(std::move(frames)); },
      lander_for(rt_));  // a long outcome's large values go into the arena as they come, where they stay
  id_ = link_->node_id();  // (before any thread of this object starts; the link's threads never ask it)
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
  host_arrivals_.fetch_add(1);  // (the hosting thread's wait for results ends too)
  rt_.wake_waiters();
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
  send_control(bridge::frame_type::cancel_task, bridge::encode_cancel(id));
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
              t.id, usage_failure("manta: task '" + t.name + "' could not be sent to the cluster: " + e.what(), t.name));
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
      if (!outcomes.empty() && (!outcome || large)) member_.remote_finished(std::exchange(outcomes, {}));
      if (outcome) outcomes.push_back(std::move(in.outcome));
      if (!outcomes.empty() && (large || taken.size() == 1)) member_.remote_finished(std::exchange(outcomes, {}));
      if (outcome) continue;
      if (in.end) {
        member_.cluster_lost(in.why);
        return;  // nothing comes after the end
      }
      if (in.found) member_.actor_found_for(in.found->first, in.found->second);
      else if (in.offer_answer) rt_.offer_answered(in.offer_answer->first, in.offer_answer->second);
      else if (in.fetch) member_.send_object(*in.fetch);
      else if (!in.killed.empty()) rt_.remote_actor_killed(in.killed, in.killed_why);
      else if (!in.returned.empty()) member_.actor_returned(in.returned);
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
  } else if (f.type == bridge::frame_type::cancel_task) {  // a call of an offered actor, cancelled by its caller
    cancels_staged_.push_back(bridge::decode_cancel(f.body));  // malformed: throws, and the link ends
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
    member_.print_remote_output(bridge::decode_output(f.body));  // malformed: throws, and the link ends
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
  // Serving loops waiting for results end their wait (this node's service
  // looks at link_ended(), the hosting thread at host_arrivals_).
  host_arrivals_.fetch_add(1);
  rt_.wake_waiters();
  give_back(unsent);
}

std::string object_key(const std::string& driver, const object_id& id) { return driver + "/" + id_text(id); }

std::optional<object_id> id_in_object_key(const std::string& key) {
  const std::size_t slash = key.rfind('/');
  if (slash == std::string::npos) return std::nullopt;
  return id_from_text(std::string_view(key).substr(slash + 1));
}

}  // namespace manta::runtime

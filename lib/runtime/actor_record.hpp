// runtime/actor_record.hpp: what the driver keeps of one actor: its process, its
// queue of calls not sent yet, what it holds, how it ends.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <manta/detail/task_request.hpp>
#include <manta/registry.hpp>

#include "ipc/failure.hpp"
#include "runtime/resources.hpp"
#include "runtime/task_spec.hpp"

namespace manta::runtime {

struct actor_record {
  enum class state { waiting, starting, constructing, alive, dead };
  actor_record() = default;
  actor_record(const actor_record&) = delete;
  actor_record& operator=(const actor_record&) = delete;
  ~actor_record();

  state st = state::waiting;
  object_entry* entry = nullptr;  ///< what handles point to; null once the last handle is gone
  std::uint64_t class_tag = 0;
  std::string label;  ///< "Counter 'name'", for messages
  std::string class_name;  ///< "Counter": its constructor's name in the tools
  std::string name;   ///< registered name, or empty
  profile_ptr profile = default_profile(false);  ///< its constructor's options and demand
  const detail::task_options& options() const { return profile->options; }
  const demand& need() const { return profile->need; }
  pool_vector<int> gpus;
  bool holds_resources = false;
  // The constructor call, kept to run it again after a crash.
  const detail::function_info* ctor = nullptr;
  std::string ctor_args;
  std::uint16_t ctor_arg_count = 0;
  pool_vector<object_entry*> ctor_deps;        ///< counted
  pool_vector<object_entry*> ctor_contained;  ///< counted
  int host = -1;  ///< slot of its process
  int restarts = 0;
  bool killed = false;
  /// Named on a driver of a cluster: it starts once the head took its name
  /// (scheduler::name_answered); `start_deferred`: its constructor was ready meanwhile.
  bool awaiting_name = false;
  bool start_deferred = false;
  lane queue;  ///< calls not sent yet, in submission order (the task graph's lane)
  /// Its first constructor call, while it waits for its arguments to be sealed.
  task_spec* pending_ctor = nullptr;
  std::unique_ptr<ipc::error_info> death;
  /// It lives on another node of the cluster (no local resources could ever
  /// hold it): its constructor and calls go there as remote tasks.
  bool remote = false;
  bool remote_started = false;  ///< its constructor was sent: its end must be too
  bool borrowed = false;  ///< another driver's actor, found by name: only a kill goes to it
  std::string remote_key;       ///< its key in the cluster (bridge::remote_task::actor)
  /// Remote: its constructor was answered, or it died: the head knew it. A
  /// node's result handing it over waits for that (read without the lock).
  std::atomic<bool> answered{false};
};

}  // namespace manta::runtime

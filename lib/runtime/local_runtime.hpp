// runtime/local_runtime.hpp: the runtime of options.local_mode. Every task and
// actor method runs in the driver, on the thread that submits it, at once and
// one at a time; objects live on the heap. No zygote, worker, arena or pipe:
// task code can be stepped through in a debugger. The API, the errors, the
// resource checks and named actors behave as in the process runtime.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <manta/options.hpp>

#include "ipc/failure.hpp"
#include "process/context.hpp"
#include "runtime/resources.hpp"

namespace manta::runtime {

class local_runtime final : public process::process_context {
 public:
  explicit local_runtime(const options& opts);
  ~local_runtime() override;
  /// Ends every actor (their destructors run here, with the runtime still up)
  /// and lets the named ones go. Called by shutdown before the context is dropped.
  void stop();

  detail::ref_node* put(const detail::encoded_value& v) override;
  detail::extent allocate_extent(std::size_t bytes) override;
  void free_extent(const detail::extent& x) noexcept override;
  detail::ref_node* put_extent(std::uint64_t tag, const detail::extent& x, std::size_t size) override;
  detail::object_data fetch(detail::ref_node* n, detail::deadline until) override;
  void wait(std::span<detail::ref_node* const> nodes, std::size_t num, detail::deadline until,
            std::vector<bool>& ready) override;
  detail::ref_node* ref_from_id(const object_id& id) override;
  void release(detail::ref_node* n) noexcept override;
  void submit(detail::task_request&& request, detail::ref_node** returns) override;
  detail::ref_node* find_actor(const std::string& name, std::uint64_t class_tag) override;
  void kill_actor(detail::ref_node* node) override;
  void cancel_producer(detail::ref_node*) override {}  // every task has run by the time remote returns
  std::vector<int> gpu_ids() override { return {}; }
  std::map<std::string, double> resources(bool available_only) override;
  std::size_t worker_count() const noexcept override { return 1; }
  std::uint32_t epoch() const noexcept override { return epoch_; }
  bool is_worker() const noexcept override { return false; }

  std::size_t object_count();
  /// This thread is running a task (shutdown there, or exit, would wait for it).
  static bool in_task_here() noexcept;

  struct actor;
  struct object;

 private:
  object* checked(detail::ref_node* n) const;
  object* new_object();
  /// Holds one count of each ref serialised inside a value, for the object.
  void hold_contained(object& o, const std::vector<object_id>& ids);
  void run(detail::task_request& r, std::vector<object*>& returns);
  ipc::failure_ptr call(detail::task_request& r, std::vector<object*>& returns, const std::string& name);
  /// A named actor's name goes (killed, or its constructor failed).
  void forget_name(object* handle);

  options opts_;
  std::uint32_t epoch_;
  resource_ledger ledger_;
  ipc::error_info setup_error_;  ///< worker_setup's failure (empty message: none)

  std::mutex mu_;  ///< objects_, names_, actors_, next_id_
  std::unordered_map<object_id, object*> objects_;
  std::unordered_map<std::string, object*> names_;  ///< named actors' handles (counted)
  std::vector<std::weak_ptr<actor>> actors_;
  std::size_t prune_actors_at_ = 64;
  std::uint64_t next_id_ = 1;
  std::atomic<bool> stopped_{false};  ///< shutdown began: nothing more runs
  /// Tasks run one at a time; a task's own submissions run inside it.
  std::recursive_mutex run_mu_;
};

}  // namespace manta::runtime

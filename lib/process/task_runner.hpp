// process/task_runner.hpp: running one task in a worker process: decode its
// run_task message, call the registered function, constructor or method, place
// its results (inline, in the extent offered for them, or in a new extent) and
// send task_done, or the error it failed with.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <manta/registry.hpp>

#include "ipc/messages.hpp"

namespace manta::process {

class worker_context;

/// An extent the driver offered a task for its result (sized like its last one).
struct result_grant {
  std::uint64_t offset = ipc::no_offset;
  std::uint64_t size = 0;
  bool taken = false;
  /// Takes it if it fits and nothing took it yet.
  bool take(std::size_t bytes, std::uint64_t& out) {
    if (taken || offset == ipc::no_offset || bytes > size) return false;
    taken = true;
    out = offset;
    return true;
  }
};

/// One result of a running task, as it will be sent.
struct result_slot {
  bool set = false;
  std::uint64_t tag = 0, size = 0, offset = ipc::no_offset;
  std::string inline_bytes;
  std::vector<object_id> contained;
};

/// The call a registered invoker sees: arguments from the message or the arena,
/// results into slots. Lives on the stack of the thread running the task.
class task_invocation final : public detail::invocation {
 public:
  task_invocation(worker_context& ctx, std::vector<detail::arg_view> args, std::size_t num_returns,
                  result_grant grant)
      : ctx_(ctx), args_(std::move(args)), results_(num_returns), grant_(grant) {}
  ~task_invocation();

  std::size_t arg_count() const override { return args_.size(); }
  detail::arg_view arg(std::size_t i) const override { return args_.at(i); }
  std::size_t num_returns() const override { return results_.size(); }
  void set_result(std::size_t i, const detail::encoded_value& v) override;
  void set_result_extent(std::size_t i, std::uint64_t tag, const detail::extent& x,
                         std::size_t size) override;
  void* instance() override;
  void adopt_instance(void* object, void (*destroy)(void*)) override;

  std::vector<result_slot>& results() { return results_; }
  result_grant& grant() { return grant_; }
  /// Refs serialised inside the results, held until task_done has been sent.
  std::vector<detail::ref_node*>& holds() { return holds_; }

 private:
  worker_context& ctx_;
  std::vector<detail::arg_view> args_;
  std::vector<result_slot> results_;
  result_grant grant_;
  std::vector<detail::ref_node*> holds_;
  std::size_t inline_bytes_ = 0;  ///< results sent inline so far
};

/// Runs the task in `body` (a run_task message body) on this thread and sends
/// its task_done. Exceptions of the task become its error; never throws.
void run_task_body(worker_context& ctx, const std::string& body);

/// The task this thread runs (innermost), or 0.
std::uint64_t current_task_key() noexcept;
/// The invocation this thread runs (innermost), or nullptr.
task_invocation* current_invocation() noexcept;
/// Tasks this thread is running, nested ones included.
std::size_t task_depth() noexcept;

}  // namespace manta::process

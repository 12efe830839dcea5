// process/task_runner.cpp: one task, from its run_task message to its task_done.
#include "process/task_runner.hpp"

#include <stdio_ext.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include <manta/errors.hpp>

#include "observe/log.hpp"
#include "process/throw_stack.hpp"
#include "process/worker_context.hpp"

namespace manta::process {
namespace {
// What this thread runs, innermost last: nested tasks stack up while one waits.
thread_local std::vector<std::uint64_t> tl_keys;
thread_local std::vector<task_invocation*> tl_running;

// Results of one task sent inline, in bytes and in ids of refs inside them; past
// these they go to the arena, so a task_done frame stays small whatever it holds.
constexpr std::size_t max_inline_result_bytes = 4 << 20;
constexpr std::size_t max_inline_result_ids = 1 << 16;
/// Results of tasks that ran longer than this go to the driver at once (not batched).
constexpr std::uint64_t flush_after_ns = 50000;
}  // namespace

std::uint64_t current_task_key() noexcept { return tl_keys.empty() ? 0 : tl_keys.back(); }
task_invocation* current_invocation() noexcept { return tl_running.empty() ? nullptr : tl_running.back(); }
std::size_t task_depth() noexcept { return tl_keys.size(); }

task_invocation::~task_invocation() {
  for (auto* n : holds_) detail::release(n);
}

void task_invocation::set_result(std::size_t i, const detail::encoded_value& v) {
  result_slot& res = results_.at(i);
  if (res.set) throw usage_error("manta: a task set the same result twice");
  res.tag = v.type_tag;
  res.size = v.size;
  if (v.size <= detail::max_inline_bytes && inline_bytes_ + v.size <= max_inline_result_bytes) {
    res.inline_bytes.assign(static_cast<const char*>(v.data()), v.size);
    inline_bytes_ += v.size;
  } else {
    if (!grant_.take(v.size, res.offset)) res.offset = ctx_.allocate(v.size);
    std::memcpy(ctx_.arena_base() + res.offset, v.data(), v.size);
  }
  res.contained = v.contained;
  // Held until task_done is sent: by then the result object holds them.
  for (const auto& id : v.contained) holds_.push_back(ctx_.ref_from_id(id));
  res.set = true;
}

void task_invocation::set_result_extent(std::size_t i, std::uint64_t tag, const detail::extent& x,
                                        std::size_t size) {
  result_slot& res = results_.at(i);
  if (res.set) throw usage_error("manta: a task set the same result twice");
  res.tag = tag;
  res.size = size;
  res.offset = x.offset;
  res.set = true;
}

void* task_invocation::instance() { return ctx_.instance; }

void task_invocation::adopt_instance(void* object, void (*destroy)(void*)) {
  // A restarted host runs its constructor once; a second one would leak the first.
  if (ctx_.instance) throw usage_error("manta: this process already hosts an actor");
  ctx_.instance = object;
  ctx_.destroy_instance = destroy;
}

namespace {

/// Calls the function, constructor or method; throws what it throws.
void invoke(worker_context& ctx, const detail::function_info* fn, detail::call_mode mode,
            std::uint16_t concurrency, task_invocation& inv) {
  if (!fn) throw usage_error("manta: no function with this id is registered in the worker");
  detail::invoker call = mode == detail::call_mode::map       ? fn->map
                         : mode == detail::call_mode::starmap ? fn->starmap
                                                              : fn->call;
  if (!call) throw usage_error("manta: '" + fn->name + "' cannot be called in this mode");
  if (mode == detail::call_mode::method && !ctx.instance)
    throw usage_error("manta: a method call reached a process hosting no actor");
  call(*fn, inv);
  if (mode == detail::call_mode::construct) ctx.become_actor_host(std::max<int>(1, concurrency));
  for (auto& res : inv.results())
    if (!res.set) throw usage_error("manta: task did not produce all its returns");
}

/// Extents of results that will never be sealed go back.
void give_back_results(worker_context& ctx, task_invocation& inv) {
  for (auto& res : inv.results())
    if (res.set && res.offset != ipc::no_offset) ctx.give_back(res.offset);
}

/// Fills `done` with the task's results, or, when they cannot be sent, turns it
/// into the failure that stopped them; then sends it.
void complete(worker_context& ctx, task_invocation& inv, ipc::task_done& done, const std::string& name) {
  // Long lists of refs inside results travel in the arena (place_ids may ask
  // the driver for room, so this comes before the message is built).
  boost::container::small_vector<ipc::id_list, 1> placed;
  if (done.ok) {
    try {
      std::size_t inline_ids = 0;
      for (auto& res : inv.results()) {
        bool fits = res.contained.size() <= ipc::max_inline_ids &&
                    inline_ids + res.contained.size() <= max_inline_result_ids;
        if (fits) inline_ids += res.contained.size();
        placed.push_back(ctx.place_ids(res.contained, /*in_arena=*/!fits));
      }
    } catch (...) {
      for (auto& l : placed)
        if (l.offset != ipc::no_offset) ctx.give_back(l.offset);
      placed.clear();
      done.ok = false;
      done.error = ipc::error_from_exception(std::current_exception(), name, ::getpid());
    }
  }
  if (done.ok) {
    for (std::size_t i = 0; i < inv.results().size(); ++i) {
      const auto& res = inv.results()[i];
      done.results.push_back({placed[i], {res.tag, res.size, res.offset,
                                          reinterpret_cast<const std::byte*>(res.inline_bytes.data())}});
    }
  } else {
    give_back_results(ctx, inv);
  }
  try {
    // A result held back for batching waits for the next task to end: worth it
    // only when tasks are short. The driver sends the next work when it hears.
    ctx.send_done(done, done.ns > flush_after_ns);
  } catch (const ipc::frame_too_large& e) {
    if (done.ok) give_back_results(ctx, inv);
    ipc::task_done failed;
    failed.key = done.key;
    failed.ok = false;
    failed.grant_used = done.grant_used;
    failed.ns = done.ns;
    failed.started_ns = done.started_ns;
    failed.thread = done.thread;
    failed.error = {ipc::error_kind::usage, "manta::usage_error",
                    "manta: the results of '" + name + "' are too large to send: " + e.what(), name, {},
                    ::getpid(), 0};
    ctx.send_done(failed, failed.ns > flush_after_ns);
  }
}

}  // namespace

void run_task_body(worker_context& ctx, const std::string& body) {
  // Only read before the task runs (a nested task reuses it): no allocation per task.
  thread_local std::vector<ipc::value_location> locations;
  ipc::frame_reader r(reinterpret_cast<const std::byte*>(body.data()), body.size());
  ipc::run_task m;
  try {
    m = ipc::run_task::read(r, locations);
  } catch (const ipc::protocol_error& e) {
    MANTA_ERROR << "worker: a malformed task: " << e.what();
    ::_exit(3);
  }
  if (m.ahead && !ctx.claim_ahead(m.ahead_seq)) return;  // the driver took it back
  const detail::function_info* fn = detail::function_by_id(m.function);
  std::string name(m.name);
  if (name.empty() && fn) name = fn->name;
  if (!m.gpus.empty()) ctx.use_gpus(m.gpus);

  std::vector<detail::arg_view> args(locations.size());
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto& loc = locations[i];
    args[i] = {loc.inline_data ? loc.inline_data : ctx.arena_base() + loc.offset, loc.size, loc.type_tag};
  }
  ctx.task_started(m.key);
  tl_keys.push_back(m.key);
  task_invocation inv(ctx, std::move(args), m.returns.size(), {m.grant_offset, m.grant_size});
  tl_running.push_back(&inv);

  ipc::task_done done;
  done.key = m.key;
  auto t0 = std::chrono::steady_clock::now();
  done.started_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count());
  static thread_local const pid_t thread_id = ::gettid();  // a system call once per thread
  done.thread = thread_id;
  {
    throw_recording record;  // where an exception leaving the task was thrown
    try {
      ctx.ensure_setup();
      invoke(ctx, fn, m.mode, m.concurrency, inv);
    } catch (...) {
      record.stop();
      done.ok = false;
      done.error = ipc::error_from_exception(std::current_exception(), name, ::getpid());
      if (done.error.kind == ipc::error_kind::task_exception) done.error.stack = take_throw_stack();
    }
  }
  done.ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  // What the task printed goes out before its result (flushing an empty
  // buffer still takes the stream's lock: skipped, once per task).
  if (__fpending(stdout) > 0) std::fflush(stdout);
  if (__fpending(stderr) > 0) std::fflush(stderr);
  tl_running.pop_back();
  done.grant_used = inv.grant().taken;

  complete(ctx, inv, done, name);  // (which ends it in ctx too)
  tl_keys.pop_back();
  // Refs inside the results are held by their objects now (the driver reads
  // task_done before these releases): inv's destructor lets them go.
}

}  // namespace manta::process

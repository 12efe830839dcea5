// handler_fuzz: what a hostile or broken worker could send, through every
// handler of the driver's scheduler. A scheduler with two workers running real
// tasks (no processes: they are its pipes' other ends) receives a sequence of
// messages built from the input: raw frames of any type, and well-formed ones
// naming known tasks, objects, extents and functions with hostile twists. Each
// must be handled or refused with protocol_error (the worker is then replaced),
// and the scheduler must stay consistent: no crash, no leak, no sanitizer report.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <manta/manta.hpp>

#include "fuzz_input.hpp"
#include "ipc/messages.hpp"
#include "process/args_blob.hpp"
#include "process/context.hpp"
#include "runtime/scheduler.hpp"

namespace manta {
constexpr std::uint32_t epoch_of_fuzz = 1;
}

namespace {

using namespace manta;
using namespace manta::runtime;

int fuzz_fn(int x) { return x; }
MANTA_REMOTE(fuzz_fn);
struct fuzz_actor {
  int read() const { return 1; }
};
MANTA_ACTOR(fuzz_actor, &fuzz_actor::read);

using fuzzing::input;

struct quiet_host final : scheduler_host {
  std::vector<int> spawns;
  void spawn(int slot, std::uint64_t) override { spawns.push_back(slot); }
  void kill(pid_t) override {}
  void watch_writable(worker_link&, bool) override {}
  void wake() override {}
  std::optional<ipc::error_info> send_remote(task_spec&) override {  // no task here is remote
    return ipc::error_info{ipc::error_kind::usage, "manta::usage_error", "no cluster", {}, {}, 0, 0, {}};
  }
  bool remote_room(const task_spec&, std::size_t) override { return false; }
  bool cluster_room(const detail::task_options&, std::size_t) override { return false; }
  void end_remote_actor(const std::string&, bool) override {}
  void cancel_remote(std::uint64_t) override {}
  bool cluster_can_run(const task_spec&) override { return false; }
  void object_settled(object_entry*) override {}
  bool find_actor_later(int, std::uint64_t, std::uint64_t, const std::string&, std::uint64_t, std::string&) override {
    return false;
  }
  bool names_in_cluster() override { return false; }
  void offer_named(manta::runtime::actor_record&) override {}
  // The spiller's jobs, done after each input (drain_spills).
  struct room_job {
    int slot;
    std::uint64_t generation, request, size;
  };
  std::vector<room_job> rooms;
  std::vector<std::vector<object_entry*>> restores;
  void make_room(int slot, std::uint64_t generation, std::uint64_t request, std::uint64_t size) override {
    rooms.push_back({slot, generation, request, size});
  }
  void restore(std::vector<object_entry*> entries) override { restores.push_back(std::move(entries)); }
};

constexpr std::uint32_t epoch = epoch_of_fuzz;

/// The process context a driver has, reduced to what the scheduler reaches:
/// refs released to zero leave the directory and are freed, as in the driver.
struct fuzz_context final : process::process_context {
  directory* dir = nullptr;
  void release(detail::ref_node* n) noexcept override {
    auto* e = static_cast<object_entry*>(n);
    if (dir->erase_if_unused(e)) free_entry(e);
  }
  std::uint32_t epoch() const noexcept override { return manta::epoch_of_fuzz; }
  [[noreturn]] static void unused() { throw std::logic_error("not used by the scheduler"); }
  detail::ref_node* put(const detail::encoded_value&) override { unused(); }
  detail::extent allocate_extent(std::size_t) override { unused(); }
  void free_extent(const detail::extent&) noexcept override {}
  detail::ref_node* put_extent(std::uint64_t, const detail::extent&, std::size_t) override { unused(); }
  detail::object_data fetch(detail::ref_node*, detail::deadline) override { unused(); }
  void wait(std::span<detail::ref_node* const>, std::size_t, detail::deadline, std::vector<bool>&) override {
    unused();
  }
  detail::ref_node* ref_from_id(const object_id&) override { unused(); }
  void submit(detail::task_request&&, detail::ref_node**) override { unused(); }
  detail::ref_node* find_actor(const std::string&, std::uint64_t) override { unused(); }
  void kill_actor(detail::ref_node*) override { unused(); }
  void cancel_producer(detail::ref_node*) override { unused(); }
  std::vector<int> gpu_ids() override { return {}; }
  std::map<std::string, double> resources(bool) override { return {}; }
  std::size_t worker_count() const noexcept override { return 2; }
  bool is_worker() const noexcept override { return false; }
};

struct world {
  store::arena arena{1 << 20};
  object_store store{arena, "/tmp/manta-fuzz/spill"};
  directory dir{epoch, &store};
  quiet_host host;
  std::unique_ptr<scheduler> sched;
  std::vector<object_id> ids;       ///< objects the workers may name
  std::vector<std::uint64_t> keys;  ///< tasks the workers may name
  std::uint64_t next_worker_seq = 0;

  fuzz_context context;

  world() {
    context.dir = &dir;
    process::set_current_context(&context);
    sched = std::make_unique<scheduler>(scheduler::config{2, 4, 2, nullptr}, dir, store,
                                        resource_ledger(2, 0, {{"disk", 1}}), host);
    sched->start();
    start_processes();
    // A few objects and tasks, so messages have something to name.
    for (int i = 0; i < 3; ++i) {
      object_entry* e = dir.create(dir.next_id(), 1);
      e->inline_bytes = "ab";
      e->size = 2;
      e->state.store(state_ready);
      dir.insert(e);
      ids.push_back(e->id);
    }
    for (int i = 0; i < 6; ++i) submit(detail::function_for(reinterpret_cast<detail::erased_fn>(&fuzz_fn)),
                                       detail::call_mode::call);
    submit(detail::constructor_registration<fuzz_actor>::info, detail::call_mode::construct);
    start_processes();  // the actor's host
  }
  ~world() {
    sched->stopping();
    sched->clear();
    for (object_entry* e : dir.take_all()) {
      e->store = nullptr;
      e->contained.clear();  // every contained entry is in this list too
      delete e;
    }
    process::set_current_context(nullptr);
  }
  void start_processes() {
    std::vector<int> slots = std::move(host.spawns);
    host.spawns.clear();
    for (int slot : slots) {
      int to = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
      int from = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      sched->spawned(slot, -1, to, from);
    }
  }
  void submit(const detail::function_info& fn, detail::call_mode mode) {
    auto t = std::make_unique<task_spec>();
    t->fn = &fn;
    t->mode = mode;
    detail::task_options o;
    if (mode == detail::call_mode::construct) o.num_cpus = 0;  // as actor_builder asks
    t->profile = profile_of(std::move(o), mode);
    t->key = sched->new_key();
    std::string blob;
    process::append_arg_header(blob, process::arg_kind::value, detail::type_tag<int>(), 4);
    blob.append(4, '\0');
    t->args = blob;
    t->arg_count = mode == detail::call_mode::construct ? 0 : 1;
    if (mode == detail::call_mode::construct) t->args.clear();
    object_entry* out = dir.create(dir.next_id(), 2);
    dir.insert(out);
    t->returns.push_back(out);
    ids.push_back(out->id);
    keys.push_back(t->key);
    if (mode == detail::call_mode::construct) {
      t->new_actor = std::make_unique<actor_record>();
      t->actor = t->new_actor.get();
      t->actor->class_tag = fn.class_tag;
      out->actor = t->actor;
    }
    if (auto why = sched->admit(*t)) return;
    sched->submit(std::move(t));
    detail::release(out);  // as a caller dropping its ref
  }

  object_id pick_id(input& in) {
    std::uint8_t how = in.byte();
    if (how % 4 == 0 || ids.empty()) return {in.u64(2) | (std::uint64_t{epoch} << 32), in.u64(2)};
    if (how % 4 == 1) return {(std::uint64_t{epoch} << 32) | 0x77, ++next_worker_seq};  // a fresh worker id
    return ids[in.byte() % ids.size()];
  }
  std::vector<object_id> pick_ids(input& in) {
    std::vector<object_id> out(in.byte() % 6);
    for (auto& id : out) id = pick_id(in);
    return out;
  }
  std::uint64_t pick_key(input& in) {
    if (keys.empty() || in.byte() % 4 == 0) return in.u64(2);
    return keys[in.byte() % keys.size()];
  }
  std::uint64_t pick_offset(worker_link& w, input& in) {
    std::uint8_t how = in.byte() % 4;
    if (how == 0) return ipc::no_offset;
    if (how == 1 && !w.extents.empty()) {
      auto it = w.extents.begin();
      std::advance(it, in.byte() % w.extents.size());
      return it->first;
    }
    return in.u64(3);
  }
  ipc::value_location pick_location(worker_link& w, input& in, std::string& scratch) {
    std::uint64_t off = pick_offset(w, in);
    if (off == ipc::no_offset) {
      scratch = in.bytes(16);
      return {in.u64(1), scratch.size(), ipc::no_offset, reinterpret_cast<const std::byte*>(scratch.data())};
    }
    return {in.u64(1), in.u64(2), off, nullptr};
  }

  /// Builds one message from the input; empty when the input is used up.
  std::string message(worker_link& w, input& in) {
    std::string out;
    std::string s1, s2;
    std::vector<object_id> l1, l2, l3;
    switch (in.byte() % 12) {
      case 0: {  // raw bytes under any type
        frame_writer_raw(out, static_cast<std::uint16_t>(in.byte() % 32), in.bytes(64));
        break;
      }
      case 1: {
        ipc::task_done m;
        m.key = pick_key(in);
        m.ok = in.byte() % 4 != 0;
        m.grant_used = in.byte() % 2;
        m.ns = in.u64(2);
        std::vector<object_id> lists[3];  // what each result's contained ids view
        std::string inline_bytes[3];
        if (m.ok) {
          int n = in.byte() % 3;
          for (int i = 0; i < n; ++i) {
            lists[i] = pick_ids(in);
            ipc::id_list ids_in{lists[i], ipc::no_offset, lists[i].size()};
            if (in.byte() % 5 == 0) ids_in = {{}, pick_offset(w, in), in.u64(2)};
            m.results.push_back({ids_in, pick_location(w, in, inline_bytes[i])});
          }
        } else {
          m.error = {static_cast<ipc::error_kind>(in.byte() % (ipc::last_error_kind + 1)), "E", in.bytes(8), "f", "", 1, 0};
        }
        ipc::append(out, m);
        break;
      }
      case 2: {
        ipc::submit m;
        std::uint8_t f = in.byte() % 4;
        m.function = f == 0 ? in.u64() : f == 1 ? detail::constructor_registration<fuzz_actor>::info.id
                                                : detail::function_for(reinterpret_cast<detail::erased_fn>(&fuzz_fn)).id;
        m.parent = pick_key(in);
        m.mode = static_cast<detail::call_mode>(in.byte() % 5);
        m.arg_count = in.byte() % 3;
        m.options.num_cpus = in.byte() % 3;
        m.options.num_gpus = in.byte() % 2;
        if (in.byte() % 4 == 0) m.options.resources["disk"] = in.byte() % 3;
        if (in.byte() % 4 == 0) m.options.name = in.bytes(4);
        if (in.byte() % 3 == 0) m.actor = pick_id(in);
        l1 = pick_ids(in);
        if (l1.empty()) l1.push_back(pick_id(in));
        l2 = pick_ids(in);
        l3 = pick_ids(in);
        m.returns = l1;
        m.deps = l2;
        m.contained = l3;
        if (in.byte() % 2) {
          for (int i = 0; i < m.arg_count; ++i) {
            bool ref = in.byte() % 2;
            process::append_arg_header(s1, ref ? process::arg_kind::ref : process::arg_kind::value,
                                       detail::type_tag<int>(), ref ? in.byte() % 4 : 4);
            if (!ref) s1.append(4, '\0');
          }
        } else {
          s1 = in.bytes(24);
        }
        m.args = s1;
        ipc::append(out, m);
        break;
      }
      case 3: {
        l1 = pick_ids(in);
        ipc::id_list contained{l1, ipc::no_offset, l1.size()};
        if (in.byte() % 5 == 0) contained = {{}, pick_offset(w, in), in.u64(2)};
        ipc::append(out, ipc::put{pick_id(in), contained, pick_location(w, in, s1)});
        break;
      }
      case 4:
        l1 = pick_ids(in);
        ipc::append(out, ipc::add_ref{l1});
        break;
      case 5:
        l1 = pick_ids(in);
        ipc::append(out, ipc::release{l1});
        break;
      case 6:
        l1 = pick_ids(in);
        ipc::append(out, ipc::subscribe{l1});
        break;
      case 7:
        ipc::append(out, ipc::alloc_request{in.u64(1), in.u64(3) % (8 << 20)});
        ipc::append(out, ipc::free_alloc{pick_offset(w, in)});
        break;
      case 8:
        l1 = pick_ids(in);
        ipc::append(out, ipc::block{pick_key(in), static_cast<std::uint32_t>(in.byte() % 4), l1,
                                    static_cast<std::uint32_t>(in.byte() % 3)});
        if (in.byte() % 2) ipc::append(out, ipc::unblock{pick_key(in), static_cast<std::uint32_t>(in.byte() % 3)});
        break;
      case 9:
        s1 = in.byte() % 2 ? "fuzz" : in.bytes(4);
        ipc::append(out, ipc::find_actor{in.u64(1), in.byte() % 2 ? detail::type_tag<fuzz_actor>() : in.u64(), s1});
        ipc::append(out, ipc::resources_request{in.u64(1), in.byte() % 2 != 0});
        if (in.byte() % 2) ipc::append(out, ipc::nodes_request{in.u64(1)});
        break;
      case 10:
        l1 = pick_ids(in);
        if (in.byte() % 2) ipc::append(out, ipc::cancel{l1});
        else ipc::append(out, ipc::kill_actor{l1});
        break;
      case 11:
        out = "exit";  // the process dies here
        break;
    }
    return out;
  }

  static void frame_writer_raw(std::string& out, std::uint16_t type, const std::string& body) {
    ipc::frame_writer w(out, type);
    w.bytes(body.data(), body.size());
    w.finish();
  }

  void deliver(int slot, const std::string& frames) {
    worker_link& w = sched->link(slot);
    if (w.st != worker_link::state::alive) return;
    if (frames == "exit") {
      sched->exited(w, SIGKILL);
      start_processes();
      return;
    }
    std::size_t pos = 0;
    while (pos + sizeof(ipc::frame_header) <= frames.size()) {
      ipc::frame_header h;
      std::memcpy(&h, frames.data() + pos, sizeof h);
      ipc::frame f{h.type, reinterpret_cast<const std::byte*>(frames.data() + pos + sizeof h), h.size};
      try {
        sched->handle(w, f);
      } catch (const ipc::protocol_error&) {
        // As the driver does: the worker is replaced, its tasks retried.
        sched->malformed(w, "fuzz");
        sched->exited(w, SIGKILL);
        start_processes();
        return;
      }
      pos += sizeof h + ipc::pad8(h.size);
    }
    drain_spills();
    sched->flush_dirty();
  }
  /// Does the spiller's jobs as node_runtime's thread would, then answers.
  void drain_spills() {
    while (!host.rooms.empty() || !host.restores.empty()) {
      auto rooms = std::move(host.rooms);
      host.rooms.clear();
      for (const auto& r : rooms) {
        std::string disk_error;
        const std::uint64_t off = store.allocate(r.size, disk_error);
        sched->room_made(r.slot, r.generation, r.request, off,
                         off == ipc::no_offset ? store.no_room(r.size, disk_error) : "", !disk_error.empty());
      }
      auto restores = std::move(host.restores);
      host.restores.clear();
      for (const auto& entries : restores) {
        std::string why;
        std::size_t i = 0;
        try {
          for (; i < entries.size(); ++i) store.pin(entries[i]);
        } catch (const std::exception& x) {
          why = x.what();
          for (std::size_t k = 0; k < i; ++k) store.unpin(entries[k]);
        }
        sched->restored(entries, why.empty(), i, why);
      }
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  world w;
  input in{data, size};
  for (int steps = 0; steps < 64 && !in.empty(); ++steps) {
    int slot = in.byte() % 3;  // two pool workers and the actor's host
    std::string frames = w.message(w.sched->link(slot), in);
    if (frames.empty()) continue;
    w.deliver(slot, frames);
  }
  return 0;
}

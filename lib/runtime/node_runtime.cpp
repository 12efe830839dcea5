// runtime/node_runtime.cpp: starting and stopping the node, and the calls user
// threads make (put, get, wait, submit, ref counting).
#include "runtime/node_runtime.hpp"

#include <nlohmann/json.hpp>

#include "observe/metrics.hpp"
#include "observe/thread_name.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <unordered_set>

#include <manta/errors.hpp>

#include "ipc/futex.hpp"
#include "process/args_blob.hpp"
#include "observe/log.hpp"
#include "ipc/owned_fds.hpp"

namespace manta::runtime {

namespace {

/// A submission_batch lives on this thread: submit leaves its tasks queued.
thread_local bool batching_submissions = false;

/// Makes `dir` and its parents; false, with a warning, if it cannot, or if it
/// is not this user's alone: the control socket, crash stacks and worker logs
/// are made there by name (another user could put links in their place).
bool make_log_dir(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::create_directories(dir, ec))  // made now: this user's alone, whatever the umask
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    MANTA_WARN << "log_dir " << dir << " cannot be made (" << ec.message()
               << "): no control socket, crash stacks or worker logs; manta status will not find this runtime";
    return false;
  }
  try {
    observe::check_private_dir(dir);
  } catch (const std::system_error& e) {
    MANTA_WARN << e.what() << ": no control socket, crash stacks or worker logs there; set options.log_dir";
    return false;
  }
  return true;
}

/// Writes the timeline where MANTA_TIMELINE says, or warns why it could not.
void write_timeline(const std::string& path, const std::string& json) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << json;
  out.close();
  if (!out) MANTA_WARN << "MANTA_TIMELINE: could not write " << path << ": " << std::strerror(errno);
}

/// A daemon may run with stdin, stdout or stderr closed: the runtime's own pipes
/// would then take those numbers, and worker output would be written into them.
void open_standard_fds() {
  for (int fd = 0; fd <= 2; ++fd)
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
      int got = ::open("/dev/null", O_RDWR);  // the lowest free number: this one
      if (got >= 0 && got != fd) ::close(got);
    }
}

void ignore_sigpipe() {
  // A write to a dead worker's pipe must return EPIPE, not kill the driver.
  struct sigaction old{};
  ::sigaction(SIGPIPE, nullptr, &old);
  if (old.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
}

/// Each process costs the driver four descriptors (two pipes, its stdout and
/// stderr): hundreds of actors need more than the usual soft limit of 1024.
void raise_fd_limit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur >= r.rlim_max) return;
  rlimit want = r;
  want.rlim_cur = std::min<rlim_t>(r.rlim_max, rlim_t{1} << 20);
  ::setrlimit(RLIMIT_NOFILE, &want);
}

constexpr std::uint64_t ev_zygote = 5;
}  // namespace

node_runtime::call_guard::call_guard(node_runtime& r, bool needs_node) : r_(r) {
  r_.active_calls_.fetch_add(1, std::memory_order_acq_rel);
  if (r_.stopping_.load(std::memory_order_acquire)) {
    r_.active_calls_.fetch_sub(1, std::memory_order_acq_rel);
    stopped(r_, "manta: the runtime is shutting down");
  }
  if (needs_node && r_.lost_.load(std::memory_order_acquire)) {
    r_.active_calls_.fetch_sub(1, std::memory_order_acq_rel);
    throw node_died_error("manta: " + r_.lost_why_ + "; call manta::shutdown() and manta::init() to start again");
  }
  ++held_here;
}

thread_local int node_runtime::call_guard::held_here = 0;

void node_runtime::call_guard::stopped(node_runtime& r, const char* why) {
  if (process::exiting_elsewhere()) {
    // Shutdown waits for active calls: this thread's leave with it.
    r.active_calls_.fetch_sub(std::exchange(held_here, 0), std::memory_order_acq_rel);
    process::park_until_exit();
  }
  throw usage_error(why);
}

node_runtime::node_runtime(const options& opts)
    : opts_(opts),
      epoch_(process::new_epoch()),
      pid_(::getpid()),
      log_dir_(opts.log_dir.empty() ? observe::default_log_dir() : opts.log_dir) {
  // MANTA_NUM_WORKERS (manta start --num-workers) stands in for an options.num_workers left at 0.
  const char* env_workers = std::getenv("MANTA_NUM_WORKERS");
  const int from_env = env_workers ? std::atoi(env_workers) : 0;
  int n = opts.num_workers > 0 ? opts.num_workers
          : from_env > 0       ? from_env
                               : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (n >= process::max_slots)
    throw usage_error("manta: num_workers must be below " + std::to_string(process::max_slots));
  resource_ledger ledger = ledger_for(opts, n);  // before the zygote: probing GPUs forks a child
  pool_size_ = static_cast<std::size_t>(n);
  open_standard_fds();
  ignore_sigpipe();
  raise_fd_limit();

  // The arena and control block are mapped before the fork so every process inherits them.
  arena_ = std::make_unique<store::arena>(opts.object_store_bytes ? opts.object_store_bytes
                                                                   : store::arena::default_size());
  store_ = std::make_unique<object_store>(*arena_, log_dir_ + "/spill");
  store_->set_timeline(&timeline_);
  spiller_ = std::make_unique<spiller>(*store_, [this](const spiller::job& j, const spiller::outcome& out) {
    spiller_answered(j, out);
  });
  if (const char* path = std::getenv("MANTA_TIMELINE"); path && *path) {
    timeline_path_ = path;
    timeline_.name_process(pid_, "driver");
    timeline_.start();
  }
  // The tools' socket is named now: the zygote removes it if the driver dies unannounced.
  std::string socket = make_log_dir(log_dir_) ? observe::socket_path(log_dir_, pid_, epoch_) : "";
  if (socket.size() >= sizeof(sockaddr_un::sun_path)) {
    MANTA_WARN << "log_dir " << log_dir_ << " is too long for a Unix socket's path: manta status will not find this runtime";
    socket.clear();
  }
  socket_ = socket;
  dir_ = std::make_unique<directory>(epoch_, store_.get());
  control_ = process::map_control_block();
  ipc::make_pipe(doorbell_, 0);
  ipc::set_nonblocking(doorbell_[0], true);
  ipc::set_nonblocking(doorbell_[1], true);
  for (int fd : doorbell_) ipc::own_fd(fd);
  process::zygote_config zc;
  zc.doorbell_read = doorbell_[0];
  zc.doorbell_write = doorbell_[1];
  zc.epoch = epoch_;
  zc.num_workers = pool_size_;
  zc.control = control_;
  zc.arena_base = arena_->base();
  zc.control_socket = socket;
  crash_dir_ = socket.empty() ? std::string() : log_dir_;
  zc.crash_dir = crash_dir_;
  if (opts_.worker_setup) zc.worker_setup = detail::function_for(opts_.worker_setup).id;
  zygote_ = std::make_unique<zygote_link>(process::start_zygote(zc));
  ipc::set_nonblocking(zygote_->socket(), true);
  output_ = std::make_unique<output_forwarder>(socket.empty() ? std::string() : log_dir_);

  // The doorbell is not in the epoll set: only the I/O thread reads it, so a
  // ring can never be consumed by a user thread polling in its place.
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  ipc::own_fd(epoll_fd_);
  sched_ = std::make_unique<scheduler>(
      scheduler::config{pool_size_, static_cast<std::size_t>(process::max_slots), max_extra_workers(pool_size_),
                        control_, &timeline_},
      *dir_, *store_, std::move(ledger), *this);
  {
    scheduler_lock lock(*this);
    sched_->start();
  }
  // Wait for the pool, synchronously: no thread reads the zygote yet. Each
  // process either starts or fails to (the open-file limit, most often): a
  // pool short of a process fails init, saying why.
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  auto count = [&](worker_link::state st) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < pool_size_; ++i) n += sched_->link(static_cast<int>(i)).st == st;
    return n;
  };
  while (count(worker_link::state::starting) > 0 && !lost_.load() &&
         std::chrono::steady_clock::now() < until) {
    ipc::wait_readable(zygote_->socket(), 100);
    std::lock_guard poll(poll_mu_);
    handle_zygote();
  }
  if (count(worker_link::state::alive) != pool_size_) {
    std::string why = lost_.load() ? lost_why_
                      : count(worker_link::state::starting) > 0
                          ? "timed out after 10 s"
                          : std::to_string(count(worker_link::state::dead)) + " of " +
                                std::to_string(pool_size_) + " processes could not start: " +
                                sched_->last_spawn_failure();
    finish_stop();
    throw error("manta: the worker pool did not start (" + why + ")");
  }
  epoll_event zev{EPOLLIN, {.u64 = ev_zygote << 32}};
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, zygote_->socket(), &zev);
  zygote_watched_ = true;
  io_thread_ = std::thread([this] {
    observe::name_runtime_thread("manta-io");  // (names what top -H and perf show)
    io_loop();
  });
  try {
    if (opts_.memory_threshold > 0)
      monitor_ = std::make_unique<memory_monitor>(opts_.memory_threshold, [this](const memory_usage&) {
        process::context_use use;
        scheduler_lock lock(*this);
        sched_->kill_for_memory(read_memory_usage, opts_.memory_threshold);
      });
    start_arena_warming();
  } catch (const std::exception& e) {
    // A thread that cannot start (the machine's thread limit): init fails
    // saying so, and what started stops (a joinable io_thread_ left behind
    // would end the program in std::terminate).
    begin_stop();
    finish_stop();
    throw error(std::string("manta: the runtime could not start its threads: ") + e.what());
  }
  bind_metrics_endpoint();
  if (!socket.empty()) {
    try {
      address_ = std::make_unique<observe::control_server>(
          socket, [this](const std::string& request) { return answer(request); });
    } catch (const std::exception& e) {  // the runtime works without it; the tools will not find it
      MANTA_WARN << e.what() << "; manta status will not find this runtime";
      socket_.clear();  // (no server thread reads it)
    }
  }
  serve_metrics_endpoint();
  MANTA_DEBUG << "runtime up: " << pool_size_ << " workers, a " << (arena_->capacity() >> 20)
              << " MiB arena, log_dir " << log_dir_ << (socket_.empty() ? "" : ", socket " + socket_);
}

void node_runtime::bind_metrics_endpoint() {
  const char* at = std::getenv("MANTA_METRICS_ADDRESS");
  if (!at || !*at) return;
  try {
    metrics_ = std::make_unique<observe::metrics_endpoint>(at, [this] {
      return observe::prometheus_metrics(nlohmann::json::parse(answer("status")),
                                         nlohmann::json::parse(answer("summary")));
    });
    metrics_address_ = metrics_->address();
  } catch (const std::exception& e) {  // the program runs on without them
    MANTA_WARN << "MANTA_METRICS_ADDRESS=" << at << ": " << e.what() << "; no metrics are served";
  }
}

void node_runtime::serve_metrics_endpoint() {
  if (!metrics_) return;
  try {
    metrics_->start();
    MANTA_INFO << "metrics: http://" << metrics_address_ << "/metrics";
  } catch (const std::exception& e) {  // (no thread: the port is closed, not left bound and unserved)
    MANTA_WARN << "metrics on " << metrics_address_ << ": " << e.what() << "; no metrics are served";
    metrics_.reset();
  }
}

void node_runtime::start_arena_warming() {
  // Only beside an idle core (never taking one from a process with work), and
  // never into memory the machine is short of: below 80% in use, and 10 points
  // under the memory monitor's threshold. Memory is read again every 16 MB.
  const double limit = opts_.memory_threshold > 0 ? std::min(0.8, opts_.memory_threshold - 0.1) : 0.8;
  std::size_t allowance = 0;
  arena_->start_warming(arena_->default_warm_reserve(), [this, limit, allowance](std::size_t bytes) mutable {
    if (!process::core_free(*control_, -1)) return false;
    if (allowance < bytes) {
      const memory_usage m = read_memory_usage();
      const double room = static_cast<double>(m.total) * limit - static_cast<double>(m.used);
      allowance = room > 0 ? std::min<std::size_t>(static_cast<std::size_t>(room), 16 << 20) : 0;
      if (allowance < bytes) return false;
    }
    allowance -= bytes;
    return true;
  });
}

node_runtime::~node_runtime() {
  if (!stopped_) {
    begin_stop();
    finish_stop();
  }
}

void node_runtime::begin_stop() {
  MANTA_DEBUG << "runtime stopping";
  stopping_.store(true, std::memory_order_release);
  address_.reset();  // its thread reads the scheduler
  metrics_.reset();  // so does this one's
  monitor_.reset();  // its thread takes the scheduler's lock
  spiller_->stop();  // so does its (jobs not done are dropped; the scheduler may still post: dropped too)
  arena_->stop_warming();  // it reads the control block, unmapped below
  wake_io();
  if (io_thread_.joinable()) io_thread_.join();
  if (!timeline_path_.empty()) write_timeline(timeline_path_, timeline_.json());
  dir_->wake_all();
  // Threads blocked in get/wait see stopping_ and leave with usage_error.
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (active_calls_.load(std::memory_order_acquire) > 0 && std::chrono::steady_clock::now() < until) {
    dir_->wake_all();
    std::this_thread::yield();
  }
  // Leaves the cluster: nothing more comes back from it. (The object stays until
  // finish_stop: a thread may still read it under the scheduler's mutex.)
  if (cluster_) cluster_->leave();  // (a launch's head too: every node is told to stop)
}

void node_runtime::finish_stop() {
  if (stopped_) return;
  stopped_ = true;
  MANTA_DEBUG << "runtime stopped: every process of it ends";
  std::unique_ptr<cluster_port> cluster;
  {
    std::lock_guard lock(mu_);
    sched_->stopping();
    cluster = std::move(cluster_);  // (under mu_: threads freeing objects read it there)
  }
  if (cluster) cluster->give_back();
  cluster.reset();
  zygote_->stop(5);  // it kills and reaps every process, then exits
  output_->stop();   // every writer is dead: the output pipes end with EOF
  // Drop every internal hold; what users still hold becomes an orphan.
  for (task_spec* t = submissions_.take(); t;) delete std::exchange(t, t->next_submitted);
  retired_.take();  // (the actors' records belong to the scheduler)
  {
    std::lock_guard lock(mu_);
    sched_->clear();
  }
  for (auto* e : dir_->take_all()) e->store = nullptr;  // the arena is unmapped below
  for (int* fd : {&epoll_fd_, &doorbell_[0], &doorbell_[1]})
    if (*fd >= 0) {
      ipc::disown_fd(*fd);
      ::close(std::exchange(*fd, -1));
    }
  process::unmap_control_block(control_);
  control_ = nullptr;
  store_.reset();  // its spill file goes with it
  if (std::int64_t pins = user_pins_.load(); pins > 0) {
    // A thread still decodes a get, or holds a view: unmapping would pull the
    // bytes from under it. The mapping stays until the process ends.
    MANTA_WARN << pins << " read" << (pins == 1 ? "" : "s")
               << " of stored objects (get, get_view) outlived shutdown: the object store stays mapped";
    static auto* kept = new std::vector<std::unique_ptr<store::arena>>();  // reachable, never freed
    kept->push_back(std::move(arena_));
  }
  arena_.reset();
}

std::vector<pid_t> node_runtime::process_ids() {
  scheduler_lock lock(*this);
  std::vector<pid_t> pids{zygote_->pid()};
  for (int i = 0; i < sched_->slots_in_use(); ++i)
    if (sched_->link(i).st == worker_link::state::alive) pids.push_back(sched_->link(i).pid);
  return pids;
}

// ---- scheduler_host

void node_runtime::spawn(int slot, std::uint64_t process_number) {
  zygote_->request(slot, process_number);  // queued behind others, if any wait
  if (zygote_->has_queued() && zygote_watched_) {
    // The socket is full: the I/O thread sends the rest when it has room.
    epoll_event ev{EPOLLIN | EPOLLOUT, {.u64 = ev_zygote << 32}};
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, zygote_->socket(), &ev);
  }
}

void node_runtime::kill(pid_t pid) {
  if (pid > 0) ::kill(pid, SIGKILL);
}

void node_runtime::watch_writable(worker_link& w, bool on) {
  if (w.out_fd < 0) return;
  epoll_event ev{on ? static_cast<std::uint32_t>(EPOLLOUT) : 0u,
                 {.u64 = (std::uint64_t{4} << 32) | static_cast<std::uint32_t>(w.slot)}};
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, w.out_fd, &ev) != 0 && errno == ENOENT)
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, w.out_fd, &ev);
}

void node_runtime::spiller_answered(const spiller::job& j, const spiller::outcome& out) {
  process::context_use use;  // as in remote_finished
  scheduler_lock lock(*this);
  if (j.what == spiller::job::kind::room) {
    MANTA_DEBUG << "spilled to make room for " << j.size << " bytes: "
                << (out.offset != ipc::no_offset ? "made" : "not made (" + out.error + ")");
    sched_->room_made(j.slot, j.generation, j.request, out.offset, out.error, out.disk_failed);
  } else {
    MANTA_DEBUG << "restored " << j.entries.size() << " objects from the spill file"
                << (out.offset == 0 ? "" : ": failed (" + out.error + ")");
    sched_->restored(j.entries, out.offset == 0, out.failed_at, out.error);  // (takes the pins and counts over)
  }
  sched_->flush_dirty();
}

// ---- submissions

void node_runtime::submit(detail::task_request&& r, detail::ref_node** returns) {
  call_guard guard(*this, /*needs_node=*/true);
  if (!r.function) throw usage_error("manta: submit without a function");
  // Everything is checked before the request's refs are taken over: on a throw,
  // the request still holds them and gives them back.
  if (r.actor && r.actor->epoch != epoch_) throw usage_error("manta: an actor_handle from another runtime was used");
  for (auto* d : r.deps)
    if (d->epoch != epoch_) throw usage_error("manta: a task argument is an object_ref from another runtime");
  auto t = std::make_unique<task_spec>();
  t->fn = r.function;
  t->mode = r.mode;
  t->num_returns = r.num_returns;
  t->arg_count = r.arg_count;
  t->profile = profile_of(std::move(r.options), r.mode);
  if (cluster_) cluster_->mark_origin(*t);
  if (timeline_.on()) t->submitted_ns = observe::now_ns();
  // Admission reads the ledger's totals, which never change: no lock (submitters
  // never wait on the scheduler's mutex). What this node cannot run may go to
  // another node of the cluster, arguments resolved to values.
  if (auto why = sched_->admit(*t)) {
    if (!cluster_) throw usage_error(*why);
    cluster_->send_elsewhere(*t, *why);
  }
  pool_vector<object_entry*> contained;
  try {
    for (const auto& id : r.contained) contained.push_back(static_cast<object_entry*>(ref_from_id(id)));
  } catch (...) {
    for (auto* e : contained) detail::release(e);
    throw;
  }
  t->contained = std::move(contained);
  t->args = std::move(r.args);
  if (r.actor) {
    t->actor_entry = static_cast<object_entry*>(std::exchange(r.actor, nullptr));
    t->actor = t->actor_entry->actor;
  }
  t->deps.reserve(r.deps.size());
  for (auto*& d : r.deps) t->deps.push_back(static_cast<object_entry*>(std::exchange(d, nullptr)));
  r.deps.clear();
  for (std::uint16_t i = 0; i < r.num_returns; ++i) {
    object_entry* e = dir_->create(dir_->next_id(), 2);  // the caller's ref and the task's hold
    dir_->insert(e);
    t->returns.push_back(e);
  }
  if (t->mode == detail::call_mode::construct) {
    // Handles must find their actor, and its class, from the moment remote() returns.
    t->new_actor = std::make_unique<actor_record>();
    t->actor = t->new_actor.get();
    t->actor->class_tag = t->fn->class_tag;
    t->returns[0]->actor = t->actor;
    if (!t->options().name.empty()) {
      bool reserved;
      {
        scheduler_lock lock(*this);
        reserved = sched_->reserve_name(t->options().name, t->returns[0]);
      }
      if (!reserved) {
        // The caller never gets the entry: dropping the task's holds frees it.
        t->returns[0]->actor = nullptr;
        detail::release(t->returns[0]);
        throw usage_error("manta: an actor named '" + t->options().name + "' already exists");
      }
    }
  }
  for (std::uint16_t i = 0; i < r.num_returns; ++i) returns[i] = t->returns[i];
  t->key = sched_->new_key();
  submissions_.push(t.release());
  if (!batching_submissions) take_submissions();
}

node_runtime::submission_batch::submission_batch(node_runtime& r) : r_(r), outer_(!batching_submissions) {
  batching_submissions = true;
}

node_runtime::submission_batch::~submission_batch() {
  if (!outer_) return;
  batching_submissions = false;
  r_.take_submissions();
}

void node_runtime::register_submissions() {
  for (task_spec* t = submissions_.take(); t;) {
    std::unique_ptr<task_spec> owned(std::exchange(t, t->next_submitted));
    owned->in_lane = nullptr;  // (the same pointer as next_submitted)
    sched_->submit(std::move(owned));
  }
}

void node_runtime::take_submissions() {
  while (!submissions_.empty() || !retired_.empty() || !freed_remote_.empty()) {
    std::unique_lock lock(mu_, std::try_to_lock);
    if (!lock) return;  // the holder takes them when it lets go
    register_submissions();
    if (!retired_.empty())
      for (actor_record* a : retired_.take()) sched_->retire(a);
    if (!freed_remote_.empty())
      for (const object_id& id : freed_remote_.take())
        if (cluster_) cluster_->object_freed(id);
  }
}

void node_runtime::cancel_producer(detail::ref_node* node) {
  call_guard guard(*this);
  object_entry* e = checked(node);
  scheduler_lock lock(*this);
  register_submissions();  // the task may have been submitted just now
  sched_->cancel(e);
}

void node_runtime::kill_actor(detail::ref_node* node) {
  call_guard guard(*this);
  object_entry* e = checked(node);
  scheduler_lock lock(*this);
  register_submissions();
  sched_->kill_actor(e);
}

std::map<std::string, double> node_runtime::resources(bool available_only) {
  call_guard guard(*this);
  scheduler_lock lock(*this);
  return sched_->resources(available_only);
}

}  // namespace manta::runtime

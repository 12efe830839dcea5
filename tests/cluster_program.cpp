// cluster_program: every member of a cluster_test cluster runs this one binary,
// as in production: with MANTA_NODE set, manta::init makes it a node (and never
// returns); otherwise it is a driver (MANTA_ADDRESS) and runs the scenario named
// by argv[1], printing what it saw, exiting 0 if everything held.
//   cluster_program [special|rare]             (MANTA_NODE) a node; "special", "rare": it has that resource
//   cluster_program basic|spill|node_lost|node_lost_long|head_lost|gigabyte|many_long|dies_mid_send|after_abort|
//                   actors|actor_lost N        (MANTA_ADDRESS) a driver, once N nodes are alive
//   cluster_program launched N                 under mpirun or srun: rank 0 drives, the others are
//                                              nodes with "special"
// Every process notes its pid in CLUSTER_NODE_PID before init: a task says where it ran.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <map>
#include <set>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <manta/detail/introspect.hpp>
#include <manta/manta.hpp>
#include <nlohmann/json.hpp>

namespace {

/// The pid of the process whose runtime runs this task (the driver's, or a node's).
int where() {
  const char* v = std::getenv("CLUSTER_NODE_PID");
  return v ? std::atoi(v) : 0;
}
double sum_on(std::span<const double> xs) { return std::accumulate(xs.begin(), xs.end(), 0.0); }
std::vector<double> big_from(int n) { return std::vector<double>(static_cast<std::size_t>(n), 0.25); }
int fail_on(int) { throw std::runtime_error("thrown on a node"); }
int add_one(int x) { return x + 1; }

/// Prints a line on stdout and one on stderr where it runs.
int shout(std::string word) {
  std::printf("shouted on a node: %s\n", word.c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "and on its stderr: %s\n", word.c_str());
  return ::getpid();
}

/// What a task sees of the cluster: {nodes listed, nodes listed once each, the cluster's "special"}.
std::vector<double> cluster_seen() {
  auto listed = manta::nodes();
  std::set<std::string> ids;
  for (const auto& n : listed) ids.insert(n.id);
  return {static_cast<double>(listed.size()), static_cast<double>(ids.size()), manta::cluster_resources()["special"]};
}
std::vector<char> eight_mib(int i) { return std::vector<char>(std::size_t{8} << 20, static_cast<char>(i)); }
/// Leaves a mark naming its node, then sleeps: the driver knows whom to kill.
int slow_where(int ms) {
  std::ofstream(std::string(std::getenv("CLUSTER_DIR")) + "/running-" + std::to_string(where()));
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return where();
}

/// Submits, from a worker of the driver's node, a task only a node can run.
int nested_where() { return manta::get(manta::task(where).resources({{"special", 1}}).remote()); }

/// Leaves its mark, sleeps, and says what it was given and where it ran.
std::vector<double> slow_sum_where(std::span<const double> xs, int ms) {
  std::ofstream(std::string(std::getenv("CLUSTER_DIR")) + "/running-" + std::to_string(where()));
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return {std::accumulate(xs.begin(), xs.end(), 0.0), static_cast<double>(where())};
}

/// A few bytes of `xs` (a gigabyte is too long to sum under the sanitizers), and its length.
std::vector<std::uint64_t> sample_of(std::span<const std::uint8_t> xs) {
  return {xs.size(), xs.empty() ? 0u : xs.front(), xs.empty() ? 0u : xs[xs.size() / 2],
          xs.empty() ? 0u : xs.back()};
}
std::vector<std::uint8_t> bytes_of(std::uint64_t n) {
  std::vector<std::uint8_t> out(n, 3);
  if (n) out.back() = 9;
  return out;
}

int nap_where(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return where();
}

/// An actor that keeps a count, on whichever node has what it asks.
using chunk = std::vector<double>;
struct Counter {
  explicit Counter(int start) : value(start) {
    if (start < 0) throw std::invalid_argument("a negative start");
  }
  int add(int x) { return value += x; }
  int host() const { return where(); }
  double sum(std::span<const double> xs) const { return std::accumulate(xs.begin(), xs.end(), 0.0); }
  /// Leaves its mark, then sleeps: the driver knows which node to kill.
  int slow_host(int ms) const { return slow_where(ms); }
  int nap(int ms) const { return nap_where(ms); }
  int absorb(std::span<const double> xs) { return value += static_cast<int>(xs.size()); }
  /// Adds up what the refs name (read where the actor lives).
  int count_refs(std::vector<manta::object_ref<int>> refs) const {
    int sum = 0;
    for (int x : manta::get(refs, std::chrono::seconds(30))) sum += x;
    return sum;
  }
  int process() const { return ::getpid(); }
  /// Adds how many it was given: ten values under 1 MiB each go by value, so
  /// a call of 9 MB travels in parts.
  int add_chunks(chunk a, chunk b, chunk c, chunk d, chunk e, chunk f, chunk g, chunk h, chunk i, chunk j) {
    for (const chunk* x : {&a, &b, &c, &d, &e, &f, &g, &h, &i, &j}) value += !x->empty();
    return value;
  }
  /// Keeps refs (another driver's, maybe), and hands them out.
  int keep(std::vector<manta::object_ref<int>> refs) {
    kept = std::move(refs);
    return static_cast<int>(kept.size());
  }
  std::vector<manta::object_ref<int>> kept_refs() const { return kept; }
  int value;
  std::vector<manta::object_ref<int>> kept;
};
/// A call of add_chunks with ten values of 900 KB.
manta::object_ref<int> add_ten_chunks(manta::actor_handle<Counter>& c) {
  const chunk x(112'500, 1.0);
  return c.task(&Counter::add_chunks).remote(x, x, x, x, x, x, x, x, x, x);
}

/// Names its worker in a mark, then sleeps: the driver can see it killed.
int marked_nap(int ms) {
  std::ofstream(std::string(std::getenv("CLUSTER_DIR")) + "/worker-" + std::to_string(::getpid()));
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return 0;
}

/// An actor whose constructor leaves a mark, then takes `ms` to finish.
struct Slow {
  explicit Slow(int ms) {
    std::ofstream(std::string(std::getenv("CLUSTER_DIR")) + "/slow-" + std::to_string(where()));
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }
  int host() const { return where(); }
};

/// An actor whose constructor takes a long value (which the head keeps, to start it again elsewhere).
struct Holder {
  explicit Holder(std::vector<double> xs) : n(xs.size()) {}
  std::size_t size() const { return n; }
  int host() const { return where(); }
  std::size_t n;
};

/// Leaves a mark, then waits (at most 20 s) until `n` marks are there: how
/// many tasks ran at once. Reads its argument only for its length.
int together(std::span<const double> xs, int n) {
  const std::string dir = std::getenv("CLUSTER_DIR");
  std::ofstream(dir + "/together-" + std::to_string(::getpid()) + "-" + std::to_string(xs.size()));
  int seen = 0;
  for (int i = 0; i < 2000 && seen < n; ++i) {
    seen = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      seen += e.path().filename().string().rfind("together-", 0) == 0;
    if (seen < n) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return seen;
}

/// Sleeps, then says where it ran (its argument only names an object).
int nap_with(std::span<const double> xs, int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms + static_cast<int>(xs.size() % 2)));
  return where();
}

// ---- refs inside arguments, on a node: each names an object of the driver
using doubles_ref = manta::object_ref<std::vector<double>>;
/// Sums what each ref names (read on the node that runs it), and says where it ran.
std::vector<double> sum_refs(std::vector<doubles_ref> refs) {
  double sum = 0;
  for (const auto& v : manta::get(refs, std::chrono::seconds(30))) sum += std::accumulate(v.begin(), v.end(), 0.0);
  return {sum, static_cast<double>(where())};
}
/// A ref inside a value of the user's own type.
struct scaled_ref {
  doubles_ref data;
  double scale = 1;
  template <class A>
  void serialize(A& a) {
    a(data, scale);
  }
};
double sum_scaled(scaled_ref s) {
  const auto v = manta::get(s.data, std::chrono::seconds(30));
  return s.scale * std::accumulate(v.begin(), v.end(), 0.0);
}
std::vector<double> slow_doubles(int ms, int n) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return std::vector<double>(static_cast<std::size_t>(n), 2.0);
}
std::vector<double> failing_doubles() { throw std::runtime_error("no doubles today"); }
/// Holds refs without reading them.
int count_unread(std::vector<doubles_ref> refs) { return static_cast<int>(refs.size()); }
int count_handles(std::vector<manta::actor_handle<Counter>> cs) { return static_cast<int>(cs.size()); }
/// An actor built from refs: it reads them whenever asked (again after a restart).
struct RefHolder {
  explicit RefHolder(std::vector<doubles_ref> r) : refs(std::move(r)) {}
  double total() const { return sum_refs(refs)[0]; }
  int host() const { return where(); }
  /// A ref to an object made on its node, and what refs it is given name.
  std::vector<doubles_ref> make(int n) const {
    std::vector<doubles_ref> out{manta::put(std::vector<double>(static_cast<std::size_t>(n), 1.0))};
    for (int i = 0; i < 10; ++i) out.push_back(manta::put(std::vector<double>{1.0}));  // ids past its runtime's own count
    return out;
  }
  double read(std::vector<doubles_ref> r) const { return sum_refs(std::move(r))[0]; }
  std::vector<doubles_ref> refs;
};

/// On a node: passes the refs it was given to a nested task there, and stores them in a value of its own.
double nested_sum(std::vector<doubles_ref> refs) {
  const double nested = manta::get(manta::task(sum_refs).remote(refs), std::chrono::seconds(30))[0];
  auto stored = manta::put(refs);
  const double again = manta::get(manta::task(sum_refs).remote(stored), std::chrono::seconds(30))[0];
  return nested == again ? nested : -1;
}

// ---- results holding refs, from a node: what they name goes back with them
/// Refs to objects made on its node: put there (small and large), and the
/// result of a nested task there still running when this one returns.
std::vector<doubles_ref> made_here() {
  return {manta::put(std::vector<double>{1, 2, 3}), manta::put(std::vector<double>(300'000, 0.5)),
          manta::task(slow_doubles).remote(300, 100)};
}
/// A long task's arguments of every kind (a small value, a large one, a
/// stored object, a string): those over 64 KiB land in the node's arena as
/// they arrive, the others stay in its blob.
double mixed_args(int small, std::vector<double> large, std::span<const double> stored, std::string text) {
  return small + std::accumulate(large.begin(), large.end(), 0.0) + std::accumulate(stored.begin(), stored.end(), 0.0) +
         static_cast<double>(text.size());
}
/// A stored value over 64 KiB that holds a ref.
struct padded_ref {
  doubles_ref data;
  std::vector<double> pad;
  template <class A>
  void serialize(A& a) {
    a(data, pad);
  }
};
/// A long result (over 8 MiB) whose refs name objects made here: a large one,
/// a small one, and one over 64 KiB holding a ref to another.
struct made_long_refs {
  std::vector<doubles_ref> plain;
  manta::object_ref<padded_ref> padded;
  template <class A>
  void serialize(A& a) {
    a(plain, padded);
  }
};
made_long_refs made_long() {
  return {{manta::put(std::vector<double>(1'500'000, 2.0)), manta::put(std::vector<double>{3})},
          manta::put(padded_ref{manta::put(std::vector<double>{4, 5}), std::vector<double>(20'000, 1.0)})};
}
/// A ref to a stored list of refs, all made on its node.
manta::object_ref<std::vector<doubles_ref>> refs_in_a_ref() {
  return manta::put(std::vector<doubles_ref>{manta::put(std::vector<double>(200'000, 1.0)),
                                             manta::put(std::vector<double>{4})});
}
/// The refs it was given (the driver's objects), and one of its own.
std::vector<doubles_ref> given_and_made(std::vector<doubles_ref> refs) {
  refs.push_back(manta::put(std::vector<double>{5}));
  return refs;
}
std::vector<doubles_ref> failed_inside() { return {manta::task(failing_doubles).remote()}; }
std::vector<manta::actor_handle<Counter>> handle_back() { return {manta::actor<Counter>().remote(1)}; }

void mark(const std::string& name);

// ---- from a node to the rest of the cluster (a node with "special", one with "rare")
const std::map<std::string, double> on_rare{{"rare", 1}};
/// Where it ran, and where a nested task needing what only the other node has ran.
std::vector<int> hop() { return {where(), manta::get(manta::task(where).resources(on_rare).remote(), std::chrono::seconds(30))}; }
/// A call on a named actor found from a task (wherever it runs).
int add_by_name(std::string name, int x) {
  return manta::get(manta::get_actor<Counter>(name).task(&Counter::add).remote(x), std::chrono::seconds(30));
}
/// An object made here, and the driver's `given`, read by a task on the other node.
std::vector<double> pass_on(doubles_ref given) {
  auto mine = manta::put(std::vector<double>(300'000, 1.0));
  return {manta::get(manta::task(sum_on).resources(on_rare).remote(mine), std::chrono::seconds(30)),
          manta::get(manta::task(sum_refs).resources(on_rare).remote(std::vector<doubles_ref>{given}),
                     std::chrono::seconds(30))[0]};
}

/// Leaves a mark, then sleeps: a nested task on the other node.
int slow_nested(int ms) {
  mark("nested-running");
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return 1;
}
/// Starts `n` slow tasks on the other node and waits for them.
int fan(int n) {
  std::vector<manta::object_ref<int>> refs;
  for (int i = 0; i < n; ++i) refs.push_back(manta::task(slow_nested).resources(on_rare).remote(20'000));
  return static_cast<int>(manta::get(refs).size());
}

std::vector<manta::actor_handle<Counter>> echo_handles(std::vector<manta::actor_handle<Counter>> cs) { return cs; }
/// Starts a named actor (wherever it fits) and calls it.
int start_named(std::string name) {
  return manta::get(manta::actor<Counter>().name(name).remote(50).task(&Counter::add).remote(1),
                    std::chrono::seconds(30));
}
int kill_it(manta::actor_handle<Counter> c) {
  manta::kill(c);
  return 1;
}
/// Puts 4 MB here and hands it to the actor (a stored object: by reference, unless its actor is on a driver).
int absorb_through(manta::actor_handle<Counter> c, int n) {
  auto big = manta::put(std::vector<double>(static_cast<std::size_t>(n), 1.0));
  return manta::get(c.task(&Counter::absorb).remote(big), std::chrono::seconds(30));
}
/// Hands the actor the refs it was given (they name the driver's objects).
int count_through(manta::actor_handle<Counter> c, std::vector<manta::object_ref<int>> refs) {
  return manta::get(c.task(&Counter::count_refs).remote(refs), std::chrono::seconds(30));
}
/// Puts `a` and `b` here (on a node), and has the actor add them up through refs in a vector.
int count_made_here(manta::actor_handle<Counter> c, int a, int b) {
  std::vector<manta::object_ref<int>> refs{manta::put(a), manta::put(b)};
  return manta::get(c.task(&Counter::count_refs).remote(refs), std::chrono::seconds(30));
}
int fail_after(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  throw std::runtime_error("failed on purpose");
}
/// Calls the actor with a ref to an object that will fail, then adds `x`:
/// the first call fails (its object cannot come), the second runs after it.
int add_after_lost(manta::actor_handle<Counter> c, int x) {
  auto doomed = manta::task(fail_after).remote(300);
  auto first = c.task(&Counter::count_refs).remote(std::vector{doomed});
  auto second = c.task(&Counter::add).remote(x);
  try {
    manta::get(first, std::chrono::seconds(30));
    return -1;
  } catch (const manta::error& e) {
    if (std::string(e.what()).find("failed on purpose") == std::string::npos) return -2;
  }
  return manta::get(second, std::chrono::seconds(30));
}
/// Calls the actor with a ref to an object not made for a while, cancels
/// that call, then adds `x`.
int add_after_cancel(manta::actor_handle<Counter> c, int x) {
  auto slow = manta::task(nap_where).remote(3000);
  auto first = c.task(&Counter::count_refs).remote(std::vector{slow});
  manta::cancel(first);
  try {
    manta::get(first, std::chrono::seconds(30));
    return -1;
  } catch (const manta::task_cancelled_error&) {
  }
  return manta::get(c.task(&Counter::add).remote(x), std::chrono::seconds(30));
}
/// Puts first..first+n-1 into `q`, in order.
int fill(manta::queue<int> q, int first, int n) {
  for (int i = first; i < first + n; ++i) q.put(i, std::chrono::seconds(30));
  return n;
}
/// Puts one vector of `n` doubles, each `x`, into `q`.
int fill_long(manta::queue<std::vector<double>> q, int n, double x) {
  q.put(std::vector<double>(static_cast<std::size_t>(n), x), std::chrono::seconds(60));
  return n;
}
void count_up(manta::emitter<int>& out, int n) {
  for (int i = 0; i < n; ++i) out.emit(i * i);
}
/// Here (a node), a queue whose producer runs on the node that has `rare`: the sum of what came.
int queue_across() {
  manta::queue<int> q;
  auto producer = manta::task(fill).resources(on_rare).remote(q, 1, 5);
  int sum = 0;
  for (int i = 0; i < 5; ++i) sum += q.get(std::chrono::seconds(30));
  return manta::get(producer, std::chrono::seconds(30)) == 5 ? sum : -1;
}
/// Calls the actor, then says which node this ran on.
std::vector<int> add_where(manta::actor_handle<Counter> c, int x) {
  return {manta::get(c.task(&Counter::add).remote(x), std::chrono::seconds(30)), where()};
}

int throws_node_died() { throw manta::node_died_error("a node it needed is gone"); }
/// Fails with a nested task's node_died_error: its own node is fine.
int relay_node_died() { return manta::get(manta::task(throws_node_died).resources(on_rare).remote()); }

/// An actor holding a handle of another: it calls it from wherever it lives.
struct Relay {
  explicit Relay(manta::actor_handle<Counter> c) : counter(std::move(c)) {}
  int add(int x) { return manta::get(counter.task(&Counter::add).remote(x), std::chrono::seconds(30)); }
  manta::actor_handle<Counter> counter;
};

/// Actors a task starts and hands back: two on its own node (they ask for no
/// CPU: they fit beside it), one on the node that has "rare".
std::vector<manta::actor_handle<Counter>> actors_back(int start) {
  return {manta::actor<Counter>().num_cpus(0).remote(start), manta::actor<Counter>().num_cpus(0).remote(start + 50),
          manta::actor<Counter>().resources(on_rare).remote(start + 100)};
}
/// An actor of the node it runs on (no CPU), its handle handed back.
manta::actor_handle<Counter> local_actor(int start) { return manta::actor<Counter>().num_cpus(0).remote(start); }
/// A task on the node with "rare" starts an actor there and hands it back
/// here; this hands it on.
manta::actor_handle<Counter> actor_via_rare(int start) {
  return manta::get(manta::task(local_actor).resources(on_rare).remote(start), std::chrono::seconds(30));
}
/// A handle wrapped in a stored object, as a result's ref names it.
manta::object_ref<manta::actor_handle<Counter>> actor_in_a_ref(int start) {
  return manta::put(manta::actor<Counter>().num_cpus(0).remote(start));
}

/// An actor started from a task, on the node that has what it asks.
std::vector<int> actor_from_node() {
  auto c = manta::actor<Counter>().resources(on_rare).remote(3);
  return {manta::get(c.task(&Counter::add).remote(4), std::chrono::seconds(30)),
          manta::get(c.task(&Counter::host).remote(), std::chrono::seconds(30)), where()};
}

/// Crashes its worker.
int crash() {
  ::raise(SIGSEGV);
  return 0;
}

/// From a worker of the driver's node: a call on an actor that lives on another node.
int add_through(manta::actor_handle<Counter> c, int x) { return manta::get(c.task(&Counter::add).remote(x)); }

/// Leaves an at-<node pid>-<i> mark, sleeps, and says where it ran.
int nap_marked_where(int ms, int i) {
  mark("at-" + std::to_string(where()) + "-" + std::to_string(i));
  return nap_where(ms);
}

}  // namespace

MANTA_REMOTE(where, sum_on, big_from, fail_on, add_one, slow_where, nap_where, nested_where, slow_sum_where, sample_of,
             bytes_of, add_through, marked_nap, together, nap_with, crash, sum_refs, sum_scaled, slow_doubles,
             failing_doubles, count_handles, nested_sum, made_here, refs_in_a_ref, given_and_made, failed_inside,
             handle_back, hop, add_by_name, pass_on, actor_from_node, throws_node_died, relay_node_died, slow_nested,
             fan, echo_handles, kill_it, start_named, nap_marked_where, absorb_through, add_where, count_through,
             actors_back, actor_in_a_ref, local_actor, actor_via_rare, mixed_args, made_long,
             count_made_here, fill, fill_long, count_up, queue_across, fail_after, add_after_lost, add_after_cancel,
             count_unread, eight_mib, cluster_seen, shout);
MANTA_ACTOR(Holder, &Holder::size, &Holder::host);
MANTA_ACTOR(Slow, &Slow::host);
MANTA_ACTOR(Relay, &Relay::add);
MANTA_ACTOR(RefHolder, &RefHolder::total, &RefHolder::host, &RefHolder::make, &RefHolder::read);
MANTA_ACTOR(Counter, &Counter::add, &Counter::host, &Counter::sum, &Counter::slow_host, &Counter::nap,
            &Counter::absorb, &Counter::count_refs, &Counter::process, &Counter::add_chunks, &Counter::keep,
            &Counter::kept_refs);

namespace {

int failures = 0;
void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  std::fflush(stdout);
  if (!ok) ++failures;
}

std::size_t alive_nodes() {
  std::size_t n = 0;
  for (const auto& node : manta::nodes()) n += node.alive;
  return n - 1;  // the driver's own node is listed first
}

bool wait_for(const std::function<bool()>& cond, std::chrono::seconds limit) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

/// The pid in the first running-<pid> mark (0 if none within 20 s).
int first_mark() {
  int pid = 0;
  wait_for(
      [&] {
        for (const auto& e : std::filesystem::directory_iterator(std::getenv("CLUSTER_DIR"))) {
          std::string name = e.path().filename();
          if (name.rfind("running-", 0) == 0) pid = std::atoi(name.c_str() + 8);
        }
        return pid != 0;
      },
      std::chrono::seconds(20));
  return pid;
}

void basic() {
  const std::map<std::string, double> on_special{{"special", 1}};
  int node = manta::get(manta::task(where).resources(on_special).remote());
  check(node != 0 && node != ::getpid(), "a task needing 'special' ran on a node (pid " + std::to_string(node) + ")");
  check(manta::get(manta::task(where).remote()) == ::getpid(), "a task this node can run stays here");
  // Its lines reach this terminal, prefixed with its pid and node (cluster_test reads them in our log).
  std::printf("shouter pid %d\n", manta::get(manta::task(shout).resources(on_special).remote(std::string("hello"))));
  try {
    manta::task(where).memory(std::size_t{1} << 50).remote();
    check(false, "a task asking more memory than any node has is refused at submission");
  } catch (const manta::usage_error& e) {
    check(std::string(e.what()).find("no node of the cluster can run it") != std::string::npos &&
              std::string(e.what()).find("memory: 1125899906842624 asked") != std::string::npos,
          std::string("a task asking more memory than any node has is refused at submission: ") + e.what());
  }

  auto big = manta::put(std::vector<double>(1 << 20, 0.5));  // 8 MB in the driver's arena
  check(manta::get(manta::task(sum_on).resources(on_special).remote(big)) == 524288.0,
        "a stored 8 MB argument reached the node as a value");
  auto made = manta::get(manta::task(big_from).resources(on_special).remote(1 << 20));
  check(made.size() == (1u << 20) && made.back() == 0.25, "an 8 MB result came back");

  auto there = manta::task(where).resources(on_special).remote();
  check(manta::get(manta::task(add_one).remote(there)) == node + 1, "a local task waits for a remote result");
  check(manta::get(manta::task(nested_where).remote()) == node, "a task on this node submits one that runs on a node");
  auto here = manta::task(add_one).remote(1);
  check(manta::get(manta::task(add_one).resources(on_special).remote(here)) == 3,
        "a remote task waits for a local result");

  try {
    manta::get(manta::task(fail_on).resources(on_special).remote(1));
    check(false, "a task failing on a node fails here");
  } catch (const manta::task_error& e) {
    check(std::string(e.what()).find("thrown on a node") != std::string::npos && e.function_name() == "fail_on",
          std::string("a task failing on a node fails here: ") + e.what());
  }
  try {
    manta::task(where).resources({{"nowhere", 1}}).remote();
    check(false, "a resource no node has is refused at submission");
  } catch (const manta::usage_error& e) {
    check(std::string(e.what()).find("lacks nowhere: 1 asked, 0 there") != std::string::npos,
          std::string("a resource no node has is refused at submission, saying what each node lacks: ") + e.what());
  }
  {  // Past part_size (8 MiB) both ways: they travel in parts.
    auto long_arg = manta::put(std::vector<double>(9'000'000, 0.5));  // 72 MB
    check(manta::get(manta::task(sum_on).resources(on_special).remote(long_arg)) == 4'500'000.0,
          "a 72 MB argument reached the node in parts");
    auto long_result = manta::get(manta::task(big_from).resources(on_special).remote(9'000'000));
    check(long_result.size() == 9'000'000 && long_result.front() == 0.25 && long_result.back() == 0.25,
          "a 72 MB result came back in parts");
  }
  std::vector<manta::object_ref<int>> many;
  for (int i = 0; i < 700; ++i) many.push_back(manta::task(add_one).resources(on_special).remote(i));
  auto values = manta::get(many);
  check(std::accumulate(values.begin(), values.end(), 0) == 700 * 701 / 2,
        "700 remote tasks (256 out at once), every result right");
  {  // Cancelling every remote task out at once lets the ones waiting behind them go.
    std::vector<manta::object_ref<int>> out, behind;
    for (int i = 0; i < 256; ++i) out.push_back(manta::task(nap_where).resources(on_special).remote(5));
    for (int i = 0; i < 20; ++i) behind.push_back(manta::task(add_one).resources(on_special).remote(i));
    for (auto& r : out) manta::cancel(r);
    auto got = manta::get(behind, std::chrono::seconds(60));
    check(got.size() == 20 && got[19] == 20, "remote tasks waiting behind 256 cancelled ones still run");
  }
  auto listed = manta::nodes();
  check(listed.size() >= 2 && listed[1].resources.count("special") == 1, "nodes() lists the cluster's nodes");
  check(manta::cluster_resources()["special"] == 2 &&
            manta::cluster_resources()["CPU"] == listed[0].resources["CPU"] + listed[1].resources["CPU"],
        "cluster_resources() adds the nodes up");
  {  // ...seen alike from a task here and from one on the other node (issue 31, defect 3).
    const std::vector<double> driver_sees{static_cast<double>(listed.size()), static_cast<double>(listed.size()), 2};
    auto here = manta::get(manta::task(cluster_seen).remote(), std::chrono::seconds(30));
    check(here == driver_sees, "a task on the driver's node sees the whole cluster: " + std::to_string(here[0]) +
                                   " nodes, special " + std::to_string(here[2]));
    // (The node's table lists it, and the driver's machine: each once.)
    auto there = manta::get(manta::task(cluster_seen).resources(on_special).remote(), std::chrono::seconds(30));
    check(there == driver_sees, "a task on another node sees the whole cluster, itself once: " +
                                    std::to_string(there[0]) + " nodes (" + std::to_string(there[1]) +
                                    " distinct), special " + std::to_string(there[2]));
  }
  // Left running at shutdown: a remote task, and one waiting for it (shutdown must not trip on them).
  auto running = manta::task(nap_where).resources(on_special).remote(300);
  auto waiting = manta::task(add_one).resources(on_special).remote(running);
}

/// Plain tasks (no resource asked) spill to a node while this one's workers are busy.
void spill() {
  std::vector<manta::object_ref<int>> refs;
  for (int i = 0; i < 24; ++i) refs.push_back(manta::task(nap_where).remote(100));
  int here = 0, there = 0;
  for (int w : manta::get(refs)) (w == ::getpid() ? here : there) += 1;
  check(here > 0 && there > 0, "24 busy tasks ran on both nodes: " + std::to_string(here) + " here, " +
                                   std::to_string(there) + " on the other node");
  auto ids = manta::nodes();
  check(ids.size() == 2 && ids[1].id.size() == 8 && ids[1].id != manta::node_id(),
        "the node is listed under its own node_id() (" + ids[1].id + ")");
}

/// Under a launcher: every rank but this one is a node.
void launched(std::size_t nodes) {
  std::vector<manta::object_ref<int>> refs;
  for (int i = 0; i < 30; ++i) refs.push_back(manta::task(nap_where).remote(60));
  std::set<int> places;
  for (int w : manta::get(refs)) places.insert(w);
  check(places.size() >= 2, "30 busy tasks ran in " + std::to_string(places.size()) + " of the " +
                                std::to_string(nodes + 1) + " ranks' runtimes");
  int node = manta::get(manta::task(where).resources({{"special", 1}}).remote());
  check(node != ::getpid(), "a task needing 'special' ran on another rank (pid " + std::to_string(node) + ")");
  // A crash on another rank is a crash, whatever MPI did to the signals there.
  try {
    manta::get(manta::task(crash).resources({{"special", 1}}).max_retries(0).remote());
    check(false, "a task crashing on another rank failed");
  } catch (const manta::worker_crashed_error& e) {
    check(std::string(e.what()).find("SIGSEGV") != std::string::npos, std::string("the crash names SIGSEGV: ") + e.what());
  }
}

/// The driver's object count once it stays put: the scheduler lets go of a
/// task's result just after sealing it, on its own thread, so a count taken
/// right after a `get` may still include it.
/// Polls `read()` (as wait_for does) until it gave one value 5 times in a row
/// and `enough(value)` holds, for at most `limit`: whether it did, and the
/// last value read.
std::pair<bool, std::size_t> steady_reading(const std::function<std::size_t()>& read,
                                            const std::function<bool(std::size_t)>& enough,
                                            std::chrono::seconds limit) {
  std::size_t seen = read(), steady = 0;
  const bool ok = wait_for(
      [&] {
        const std::size_t now = read();
        steady = now == seen ? steady + 1 : 0;
        seen = now;
        return enough(now) && steady >= 5;
      },
      limit);
  return {ok, seen};
}

std::size_t settled_object_count() {
  return steady_reading(manta::detail::object_count, [](std::size_t) { return true; }, std::chrono::seconds(5)).second;
}

/// Whether every thread of process `pid` has stopped (SIGSTOP arrives at
/// each thread in its own time: until then, they may still read).
bool all_threads_stopped(int pid) {
  std::error_code ec;
  for (const auto& t : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream f(t.path() / "stat");
    std::string line;
    std::getline(f, line);
    const auto close = line.rfind(')');
    if (close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'T') return false;
  }
  return !ec;
}

/// Bytes waiting unread in the TCP sockets of process `pid` (its link to the head).
std::size_t tcp_bytes_unread(int pid) {
  std::set<std::string> mine;
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(e.path(), ec).string();
    if (target.rfind("socket:[", 0) == 0) mine.insert(target.substr(8, target.size() - 9));
  }
  std::size_t unread = 0;
  for (const char* table : {"/net/tcp", "/net/tcp6"}) {
    std::ifstream in("/proc/" + std::to_string(pid) + table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream row(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      row >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      if (mine.count(inode)) unread += std::stoul(queues.substr(queues.find(':') + 1), nullptr, 16);
    }
  }
  return unread;
}

/// Actors that only another node can hold live there: calls in order, stored
/// and long arguments, names, handles passed to tasks, kill, failures.
void actors() {
  const std::map<std::string, double> on_special{{"special", 1}};
  auto c = manta::actor<Counter>().resources(on_special).remote(10);
  const int host = manta::get(c.task(&Counter::host).remote());
  check(host > 0 && host != ::getpid(), "an actor asking 'special' lives on a node (pid " + std::to_string(host) + ")");
  std::vector<manta::object_ref<int>> adds;
  for (int i = 0; i < 300; ++i) adds.push_back(c.task(&Counter::add).remote(1));
  auto counts = manta::get(adds);
  bool in_order = true;
  for (int i = 0; i < 300; ++i) in_order = in_order && counts[i] == 11 + i;
  check(in_order, "300 calls ran in the order they were made (last " + std::to_string(counts.back()) + ")");
  auto stored = manta::put(std::vector<double>(1 << 17, 2.0));
  check(manta::get(c.task(&Counter::sum).remote(stored)) == 262144.0, "a call reads a stored argument");
  check(manta::get(c.task(&Counter::sum).remote(std::vector<double>(2'000'000, 1.0)), std::chrono::seconds(60)) ==
            2'000'000.0,
        "a call takes a 16 MB argument (in parts)");
  check(manta::get(manta::task(add_through).remote(c, 5)) == 315, "a task on the driver's node calls the actor");

  auto named = manta::actor<Counter>().resources(on_special).name("shared").remote(100);
  manta::get(named.task(&Counter::add).remote(1));
  auto found = manta::get_actor<Counter>("shared");
  check(manta::get(found.task(&Counter::add).remote(1)) == 102, "get_actor finds an actor that lives on a node");

  manta::kill(found);
  try {
    manta::get(named.task(&Counter::add).remote(1), std::chrono::seconds(30));
    check(false, "a call on a killed actor fails");
  } catch (const manta::actor_died_error& e) {
    check(true, std::string("a call on a killed actor fails: ") + e.what());
  }
  auto broken = manta::actor<Counter>().resources(on_special).remote(-1);
  try {
    manta::get(broken.task(&Counter::add).remote(1), std::chrono::seconds(30));
    check(false, "a call on an actor whose constructor threw fails");
  } catch (const manta::actor_died_error& e) {
    check(std::string(e.what()).find("a negative start") != std::string::npos,
          std::string("a call on an actor whose constructor threw fails: ") + e.what());
  }
  try {
    manta::actor<Counter>().resources({{"nowhere", 1}}).remote(1);
    check(false, "an actor no node can hold is refused");
  } catch (const manta::usage_error& e) {
    check(true, std::string("an actor no node can hold is refused: ") + e.what());
  }
  check(manta::get(c.task(&Counter::add).remote(1)) == 316, "the first actor still counts");
  check(manta::get(c.task(&Counter::count_refs).remote(std::vector<manta::object_ref<int>>{manta::put(1), manta::put(2)}),
                   std::chrono::seconds(30)) == 3,
        "a call whose argument holds refs reads them where the actor lives");

  // Cancelled calls and tasks are cancelled on their node too. A call is
  // dropped there only until the node sends it to its actor's process: the
  // node is frozen meanwhile, so it reads the call and its cancellation at once.
  auto busy = c.task(&Counter::nap).remote(300);
  ::kill(host, SIGSTOP);
  check(wait_for([&] { return all_threads_stopped(host); }, std::chrono::seconds(1)), "the node stopped");
  const std::size_t unread = tcp_bytes_unread(host);
  auto dropped = c.task(&Counter::add).remote(1000);
  // The call's frame reaches the frozen node's socket first (cancelled before
  // its driver sent it, it would be dropped there, never reaching the node),
  // then its 14-byte cancellation; the count is read until it stays put
  // (heartbeats add 6 bytes each half second).
  auto unread_grows_by = [&](std::size_t from, std::size_t by) {
    return steady_reading([&] { return tcp_bytes_unread(host); },
                          [&](std::size_t now) { return now >= from + by; },
                          std::chrono::seconds(1));  // (frozen longer than 2.5 s, the node would be lost)
  };
  const auto [call_arrived, with_call] = unread_grows_by(unread, 100);
  manta::cancel(dropped);
  const auto [cancel_arrived, with_cancel] = unread_grows_by(with_call, 14);
  ::kill(host, SIGCONT);
  check(call_arrived && cancel_arrived,
        "the call, then its cancellation, reached the frozen node's socket (" + std::to_string(with_call - unread) +
            " then " + std::to_string(with_cancel - with_call) + " bytes more than the " + std::to_string(unread) +
            " unread before)");
  manta::get(busy);
  const int after_cancel = manta::get(c.task(&Counter::add).remote(1));
  check(after_cancel == 317, "a cancelled call queued on its node never ran (" + std::to_string(after_cancel) + ")");
  auto long_task = manta::task(marked_nap).resources(on_special).remote(60'000);
  int worker = 0;
  wait_for(
      [&] {
        for (const auto& e : std::filesystem::directory_iterator(std::getenv("CLUSTER_DIR")))
          if (std::string name = e.path().filename(); name.rfind("worker-", 0) == 0) worker = std::atoi(name.c_str() + 7);
        return worker != 0;
      },
      std::chrono::seconds(20));
  manta::cancel(long_task);
  check(worker > 0 && wait_for([&] { return ::kill(worker, 0) != 0; }, std::chrono::seconds(20)),
        "a cancelled task running on a node has its worker killed there (" + std::to_string(worker) + ")");
  check(manta::get(manta::task(add_one).resources(on_special).remote(1)) == 2, "and the node goes on");

  // Calls cancelled while queued behind a running one: its node drops those it
  // has not passed to the actor yet; the others run (a method is never
  // interrupted, as on one machine) and `get` returns their values. Either
  // way `get` agrees with what ran. (Cancelled once the first call runs, so
  // the rest are likely on the node already.)
  auto first = c.task(&Counter::slow_host).remote(1000);
  std::vector<manta::object_ref<int>> queued;
  for (int i = 0; i < 10; ++i) queued.push_back(c.task(&Counter::add).remote(1));
  check(first_mark() == host, "the first call runs on the actor's node");
  for (const auto& r : queued) manta::cancel(r);
  int ran = 0;
  for (const auto& r : queued) {
    try {
      manta::get(r, std::chrono::seconds(30));
      ++ran;
    } catch (const manta::task_cancelled_error&) {
    }
  }
  manta::get(first);
  const int count = manta::get(c.task(&Counter::add).remote(0));
  check(count == 317 + ran, "get agrees with the cancelled calls that ran anyway (" + std::to_string(ran) +
                                " of 10 returned a value; the count went from 317 to " + std::to_string(count) + ")");
}

/// A count the head's table gives each node (`manta status --json`): "objects"
/// (copies of stored objects), "actors", "tasks_running", by node id.
std::map<std::string, int> objects_on_nodes(const std::string& field = "objects") {
  std::map<std::string, int> out;
  const std::string cmd = std::string(std::getenv("CLUSTER_CLI")) + " status --json --log-dir " +
                          std::getenv("CLUSTER_DIR") + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string text;
  char buf[4096];
  for (std::size_t n; p && (n = std::fread(buf, 1, sizeof buf, p)) > 0;) text.append(buf, n);
  if (p) ::pclose(p);
  // The table (keys sorted: "drivers" first), whatever else the tool printed
  // around it. One it could not give is no empty cluster: it reads as a node
  // holding -1, a count no check waits for (a wait for 0 asks again).
  const auto start = text.find("{\n  \"drivers\"");
  std::istringstream in(start == std::string::npos ? std::string() : text.substr(start));
  nlohmann::json table;
  try {
    in >> table;  // (reads one value: what follows it is left)
  } catch (const nlohmann::json::exception&) {
    return {{"(no table: " + text + ")", -1}};
  }
  for (const auto& n : table.at("nodes")) out[n.value("id", "")] = n.value(field, 0);
  return out;
}

/// The actors the head lists on the node whose pid is `pid`.
int actors_on_pid(int pid) {
  const std::string cmd = std::string(std::getenv("CLUSTER_CLI")) + " status --log-dir " + std::getenv("CLUSTER_DIR") +
                          " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  int found = -1;
  char line[1024];
  while (p && std::fgets(line, sizeof line, p)) {
    char id[64], address[64], host[64], alive[8];
    int node_pid = 0, tasks = 0, actors = 0;
    if (std::sscanf(line, "%63s %63s %63s %d %7s %d %d", id, address, host, &node_pid, alive, &tasks, &actors) == 7 &&
        node_pid == pid)
      found = actors;
  }
  if (p) ::pclose(p);
  return found;
}

int total(const std::map<std::string, int>& counts) {
  int n = 0;
  for (const auto& [id, c] : counts) n += c;
  return n;
}

/// A stored object named by many remote tasks goes to each node once; calls
/// waiting for one keep their order; freed here, it is freed there.
void objects() {
  const std::map<std::string, double> on_special{{"special", 1}};
  {
    // Tasks go where their objects are, while that node has a CPU free.
    auto k = manta::put(std::vector<double>(200'000, 1.0));  // 1.6 MB: by reference
    const int x = manta::get(manta::task(nap_with).resources(on_special).remote(k, 0));
    auto one = manta::task(nap_with).resources(on_special).remote(k, 300);
    auto two = manta::task(nap_with).resources(on_special).remote(k, 300);
    check(manta::get(one) == x && manta::get(two) == x,
          "two tasks naming an object a node holds both ran there (it has 2 CPUs)");
  }
  {
    auto shared = manta::put(std::vector<double>(1'000'000, 0.5));  // 8 MB: by reference
    std::vector<manta::object_ref<double>> sums;
    for (int i = 0; i < 40; ++i) sums.push_back(manta::task(sum_on).resources(on_special).remote(shared));
    bool all = true;
    for (double s : manta::get(sums, std::chrono::seconds(60))) all = all && s == 500000.0;
    check(all, "40 tasks on two nodes read one 8 MB stored object");
    auto counts = objects_on_nodes();
    check(counts.size() == 2 && total(counts) >= 1 && total(counts) <= 2,
          "each node holds at most one copy of it (" + std::to_string(total(counts)) + " in all)");

    auto c = manta::actor<Counter>().resources(on_special).remote(0);
    auto first = c.task(&Counter::add).remote(1);
    auto fresh = manta::put(std::vector<double>(500'000, 1.0));  // a second object: its call waits for it
    auto absorbed = c.task(&Counter::absorb).remote(fresh);
    auto last = c.task(&Counter::add).remote(1);
    check(manta::get(first) == 1 && manta::get(absorbed) == 500'001 && manta::get(last) == 500'002,
          "an actor's calls keep their order while one waits for its object");

    auto huge = manta::put(std::vector<std::uint8_t>(100'000'000, 7));  // in parts
    auto seen = manta::get(manta::task(sample_of).resources(on_special).remote(huge), std::chrono::seconds(60));
    check(seen.size() == 4 && seen[0] == 100'000'000 && seen[2] == 7, "a 100 MB stored object is fetched by a node");
  }
  {
    // Tasks naming one large object are not held to the remote window by its
    // size (it goes once per node, not with each): two run at once.
    auto large = manta::put(std::vector<double>(18'750'000, 1.0));  // 150 MB
    auto a = manta::task(together).resources(on_special).remote(large, 2);
    auto b = manta::task(together).resources(on_special).remote(large, 2);
    check(manta::get(a, std::chrono::seconds(60)) == 2 && manta::get(b, std::chrono::seconds(60)) == 2,
          "two tasks naming one 150 MB object ran at once");
    // An actor killed while its call waits for an object: the call fails, nothing is left on the node.
    // A long call runs first, so the kill always lands before the waiting call could run.
    auto c = manta::actor<Counter>().resources(on_special).remote(0);
    manta::get(c.task(&Counter::add).remote(1));
    auto busy = c.task(&Counter::nap).remote(60'000);
    auto pending = manta::put(std::vector<double>(300'000, 1.0));
    auto waits = c.task(&Counter::absorb).remote(pending);
    manta::kill(c);
    try {
      manta::get(waits, std::chrono::seconds(30));
      check(false, "a call of a killed actor fails");
    } catch (const manta::actor_died_error& e) {
      check(true, std::string("a call of a killed actor fails: ") + e.what());
    }
  }
  check(wait_for([] { return total(objects_on_nodes()) == 0; }, std::chrono::seconds(20)),
        "once the driver drops its refs, no node holds a copy (" + std::to_string(total(objects_on_nodes())) + ")");
}

/// An actor on a killed node starts again on the other (max_restarts), its
/// call in flight failing; one without restarts is gone for good.
void actor_lost() {
  const std::map<std::string, double> on_special{{"special", 1}};
  auto kept = manta::actor<Counter>().resources(on_special).max_restarts(1).remote(7);
  const int kept_at = manta::get(kept.task(&Counter::host).remote());
  // The head spreads actors over the nodes: of two more, one shares the first's node.
  auto one = manta::actor<Counter>().resources(on_special).remote(7);
  auto two = manta::actor<Counter>().resources(on_special).remote(7);
  const int one_at = manta::get(one.task(&Counter::host).remote());
  const int two_at = manta::get(two.task(&Counter::host).remote());
  check(one_at != two_at && (one_at == kept_at || two_at == kept_at),
        "three actors were spread over the two nodes (" + std::to_string(kept_at) + ", " + std::to_string(one_at) +
            ", " + std::to_string(two_at) + ")");
  auto& gone = one_at == kept_at ? one : two;
  auto& other = one_at == kept_at ? two : one;
  check(manta::get(kept.task(&Counter::add).remote(1)) == 8, "the actor counts");
  auto in_flight = kept.task(&Counter::slow_host).remote(5000);
  const int first = first_mark();
  check(first == kept_at, "the slow call runs on the actor's node");
  ::kill(first, SIGKILL);
  try {
    manta::get(in_flight, std::chrono::seconds(30));
    check(false, "the call in flight on the killed node fails");
  } catch (const manta::actor_died_error& e) {
    check(true, std::string("the call in flight on the killed node fails: ") + e.what());
  }
  const int again = manta::get(kept.task(&Counter::host).remote(), std::chrono::seconds(30));
  check(again > 0 && again != first, "the actor started again on the other node (" + std::to_string(again) + ")");
  check(manta::get(kept.task(&Counter::add).remote(1)) == 8, "with its constructor's state, as after any restart");
  try {
    manta::get(gone.task(&Counter::add).remote(1), std::chrono::seconds(30));
    check(false, "an actor without restarts on the killed node is gone");
  } catch (const manta::actor_died_error& e) {
    check(std::string(e.what()).find("was lost with") != std::string::npos,
          std::string("an actor without restarts on the killed node is gone: ") + e.what());
  }
  check(manta::get(other.task(&Counter::add).remote(1)) == 8, "an actor on the other node lives on");
}

/// An actor with max_task_retries: the calls running or queued on its node
/// when the node is killed run again, in order, once it started again elsewhere.
void actor_call_retried() {
  auto r = manta::actor<Counter>().resources({{"special", 1}}).max_restarts(1).max_task_retries(1).remote(7);
  const int at = manta::get(r.task(&Counter::host).remote());
  check(manta::get(r.task(&Counter::add).remote(1)) == 8, "the actor counts");
  auto in_flight = r.task(&Counter::slow_host).remote(3000);
  auto behind = r.task(&Counter::add).remote(2);
  auto long_behind = add_ten_chunks(r);  // 9 MB: in parts, kept by the head too
  check(first_mark() == at, "the slow call runs on the actor's node");
  ::kill(at, SIGKILL);
  const int again = manta::get(in_flight, std::chrono::seconds(60));
  check(again > 0 && again != at, "the call running on the killed node ran again on the other (" +
                                      std::to_string(again) + ")");
  check(manta::get(behind, std::chrono::seconds(30)) == 9,
        "the call queued behind it ran again after it, on the constructor's state");
  check(manta::get(long_behind, std::chrono::seconds(30)) == 19, "so did a call of 9 MB, sent in parts");
  check(manta::get(r.task(&Counter::add).remote(1)) == 20, "later calls follow");
}

/// An actor whose constructor took refs starts again on another node, which
/// fetches what they name then (the driver dropped its own refs long before).
void actor_refs_lost() {
  auto holder = manta::actor<RefHolder>().resources({{"special", 1}}).max_restarts(1).remote(
      std::vector<doubles_ref>{manta::put(std::vector<double>(1000, 1.0)), manta::put(std::vector<double>(200'000, 0.5))});
  const double before = manta::get(holder.task(&RefHolder::total).remote(), std::chrono::seconds(30));
  const int at = manta::get(holder.task(&RefHolder::host).remote());
  ::kill(at, SIGKILL);
  // (A call made before the head saw the node go would fail with it.)
  check(wait_for([] { return alive_nodes() == 1; }, std::chrono::seconds(20)), "the killed node is lost");
  const int again = manta::get(holder.task(&RefHolder::host).remote(), std::chrono::seconds(30));
  check(again > 0 && again != at, "the actor started again on the other node");
  check(manta::get(holder.task(&RefHolder::total).remote(), std::chrono::seconds(30)) == before && before == 101'000,
        "and read its constructor's refs there");
}

/// An actor whose constructor took a long value starts again on another node.
void actor_lost_long() {
  // (Each asks for half of a node's "special": after the loss, the other node holds all three.)
  auto holder =
      manta::actor<Holder>().resources({{"special", 0.5}}).max_restarts(1).remote(std::vector<double>(1'000'000, 2.0));
  const int first = manta::get(holder.task(&Holder::host).remote());
  // An actor on the other node makes the two as busy, so the next goes to the first again (the first
  // of equals). Its constructor over 8 MiB goes in parts: the head keeps them too.
  auto filler = manta::actor<Counter>().resources({{"special", 0.5}}).remote(0);
  check(manta::get(filler.task(&Counter::host).remote()) != first, "an actor lives on the other node");
  auto longer =
      manta::actor<Holder>().resources({{"special", 0.5}}).max_restarts(1).remote(std::vector<double>(3'000'000, 2.0));
  check(manta::get(longer.task(&Holder::host).remote(), std::chrono::seconds(60)) == first,
        "an actor with a 24 MB constructor lives on the first node");
  ::kill(first, SIGKILL);
  // (A call sent before the head sees the loss goes to the dead node, and fails: wait for it.)
  check(wait_for([] { return alive_nodes() == 1; }, std::chrono::seconds(20)), "the head saw the node lost");
  check(manta::get(holder.task(&Holder::size).remote(), std::chrono::seconds(30)) == 1'000'000,
        "the actor started again with its 8 MB constructor argument");
  check(manta::get(holder.task(&Holder::host).remote()) != first, "on the other node");
  check(manta::get(longer.task(&Holder::size).remote(), std::chrono::seconds(60)) == 3'000'000,
        "the actor whose 24 MB constructor went in parts started again too");
}

/// A node asks for an object the driver spilled and cannot read back (its
/// arena full of objects in use): the task fails saying so; the driver goes on.
void spilled_fetch() {
  const std::map<std::string, double> on_special{{"special", 1}};
  auto x = manta::put(std::vector<double>(3'750'000, 1.0));  // 30 MB each, in a 64 MB arena
  auto y = manta::put(std::vector<double>(3'750'000, 2.0));
  auto y_view = manta::get_view(y);
  auto z = manta::put(std::vector<double>(3'750'000, 3.0));  // x spills
  auto z_view = manta::get_view(z);
  try {
    manta::get(manta::task(sum_on).resources(on_special).remote(x), std::chrono::seconds(30));
    check(false, "a task whose object cannot be read back fails");
  } catch (const manta::object_store_full& e) {
    check(std::string(e.what()).find("could not be fetched") != std::string::npos,
          std::string("a task whose object cannot be read back fails with object_store_full: ") + e.what());
  } catch (const manta::error& e) {
    check(false, std::string("a task whose object cannot be read back fails with object_store_full, not: ") + e.what());
  }
  check(manta::get(manta::task(sum_on).resources(on_special).remote(std::vector<double>(10, 1.0))) == 10.0,
        "the driver and the cluster go on");
}

/// Long values into nodes' 64 MB arenas: those that find no free room (a
/// quarter kept free) stay in their frames and are put as before; one larger
/// than the arena fails its task alone, saying why.
void small_arena() {
  const std::map<std::string, double> on_special{{"special", 1}};
  std::vector<manta::object_ref<double>> sums;
  for (int i = 1; i <= 2; ++i)
    sums.push_back(manta::task(sum_on).resources(on_special).remote(std::vector<double>(3'750'000, i)));  // 30 MB each
  const auto got = manta::get(sums, std::chrono::seconds(60));
  check(got == std::vector<double>{3'750'000.0, 7'500'000.0}, "two 30 MB arguments at once reach a node with a 64 MB arena");
  try {
    manta::get(manta::task(big_from).resources(on_special).remote(12'500'000), std::chrono::seconds(60));  // 100 MB
    check(false, "a result larger than the node's arena fails");
  } catch (const manta::error& e) {
    check(std::string(e.what()).find("object store") != std::string::npos,
          std::string("a result larger than the node's arena fails, saying why: ") + e.what());
  }
  const auto back = manta::get(manta::task(big_from).resources(on_special).remote(5'000'000), std::chrono::seconds(60));
  check(back.size() == 5'000'000 && back.back() == 0.25, "a 40 MB result comes back into a 64 MB arena");
  check(manta::get(manta::task(sum_on).resources(on_special).remote(std::vector<double>(10, 1.0))) == 10.0,
        "the driver and the cluster go on");
}

/// Whether the mark `name` is in CLUSTER_DIR, waiting for it up to `limit`.
bool marked(const std::string& name, std::chrono::seconds limit) {
  const std::string path = std::string(std::getenv("CLUSTER_DIR")) + "/" + name;
  return wait_for([&] { return std::filesystem::exists(path); }, limit);
}
void mark(const std::string& name) { std::ofstream(std::string(std::getenv("CLUSTER_DIR")) + "/" + name); }

/// Leaves while a task of its runs on a node, waiting for tasks it started on
/// the other node: the test sees them all end.
void leaves() {
  auto r = manta::task(fan).resources({{"special", 1}}).remote(6);
  check(marked("nested-running", std::chrono::seconds(60)), "the nested tasks run on the other node");
}

/// A named actor a task of this driver starts on a node ends when this driver
/// leaves (as Ray's non-detached actors end with their job)...
void scoped_first() {
  check(manta::get(manta::task(start_named).resources({{"special", 1}}).remote(std::string("job-scoped")),
                   std::chrono::seconds(60)) == 51,
        "a task on a node started a named actor");
  check(manta::get(manta::get_actor<Counter>("job-scoped").task(&Counter::add).remote(1)) == 52, "the driver calls it");
}
/// ...so the same program, run again, starts it afresh.
void scoped_second() {
  check(wait_for(
            [] {
              try {
                manta::get_actor<Counter>("job-scoped");
                return false;
              } catch (const manta::usage_error&) {
                return true;
              }
            },
            std::chrono::seconds(20)),
        "the named actor went with the driver whose task started it");
  check(manta::get(manta::task(start_named).resources({{"special", 1}}).remote(std::string("job-scoped")),
                   std::chrono::seconds(60)) == 51,
        "the same program, run again, starts it afresh");
}

/// Two drivers share a named actor that lives on a node: the owner starts it...
void named_owner() {
  const std::map<std::string, double> half{{"special", 0.5}};  // (the node has 2: every actor here fits at once)
  auto shared = manta::actor<Counter>().resources(half).name("shared").remote(0);
  check(manta::get(shared.task(&Counter::add).remote(1)) == 1, "the owner's named actor counts");
  auto victim = manta::actor<Counter>().resources(half).name("victim").remote(0);
  check(manta::get(victim.task(&Counter::add).remote(1)) == 1, "a second named actor counts");
  // Its 40 MB constructor goes in parts: the other driver's lookup waits until it went whole.
  auto big = manta::actor<Holder>().resources(half).name("big").remote(std::vector<double>(5'000'000, 1.0));
  // A named actor on this driver's own node is named in the cluster too.
  auto home = manta::actor<Counter>().name("home").remote(0);
  check(manta::get(home.task(&Counter::host).remote()) == ::getpid(), "a named actor lives on the driver's node");
  check(manta::get(manta::task(add_by_name).resources(half).remote(std::string("home"), 1), std::chrono::seconds(30)) == 1,
        "a task on a node finds it by its name and calls it");
  const std::vector<manta::object_ref<int>> mine{manta::put(41)};
  check(manta::get(shared.task(&Counter::keep).remote(mine), std::chrono::seconds(30)) == 1,
        "the shared actor keeps a ref of this driver's");
  mark("owner-ready");
  check(marked("user-done", std::chrono::seconds(60)), "the other driver used them");
  check(manta::get(shared.task(&Counter::add).remote(0)) == 11,
        "the owner sees the other driver's calls, and the actor outlived its handles there");
  check(manta::get(home.task(&Counter::add).remote(0)) == 11, "the other driver called the named actor on this node");
  try {
    manta::get(victim.task(&Counter::add).remote(1), std::chrono::seconds(30));
    check(false, "a call on an actor another driver killed fails");
  } catch (const manta::actor_died_error& e) {
    check(std::string(e.what()).find("elsewhere in the cluster") != std::string::npos,
          std::string("a call on an actor another driver killed fails: ") + e.what());
  }
  auto again = manta::actor<Counter>().resources(half).name("victim").remote(7);
  check(manta::get(again.task(&Counter::add).remote(1), std::chrono::seconds(30)) == 8, "its name can be used again");
  check(manta::get(big.task(&Holder::size).remote()) == 5'000'000, "the long-constructed actor lives");
}

/// ... and the user finds it by name.
/// Refs inside the arguments of tasks that run on a node: the node fetches
/// what they name from the driver, made already or not.
void refs_inside() {
  const std::map<std::string, double> on_special{{"special", 1}};
  std::vector<doubles_ref> refs{manta::put(std::vector<double>(10, 1.0)),              // small: inline
                                manta::put(std::vector<double>(300'000, 0.5))};         // large: in the arena
  refs.push_back(manta::task(slow_doubles).remote(400, 1000));                          // not made yet
  auto out = manta::get(manta::task(sum_refs).resources(on_special).remote(refs), std::chrono::seconds(60));
  check(out.size() == 2 && out[0] == 10 + 150'000 + 2000 && out[1] != ::getpid(),
        "a task on a node read a list of refs, one not made when it was sent (sum " + std::to_string(out[0]) + ")");
  // The same refs again, and within a value of the user's type.
  check(manta::get(manta::task(sum_refs).resources(on_special).remote(refs))[0] == out[0],
        "a second task on a node reads the same refs");
  check(manta::get(manta::task(sum_scaled).resources(on_special).remote(scaled_ref{refs[1], 2.0})) == 300'000,
        "a ref inside a value of the user's type is read on a node");
  check(manta::get(manta::task(nested_sum).resources(on_special).remote(refs), std::chrono::seconds(60)) == out[0],
        "a task on a node passes its refs on to a nested task there, and stores them in a value");
  // A stored list of refs, passed by its own ref: refs inside what an argument names.
  auto stored = manta::put(refs);
  check(manta::get(manta::task(sum_refs).resources(on_special).remote(stored))[0] == out[0],
        "a stored list of refs, passed by ref, is read on a node");
  // A ref whose producer fails: the task on the node reading it fails with
  // that error, as here (not as if a node had died); one not reading it runs.
  auto failed = manta::task(failing_doubles).remote();
  try {
    manta::get(manta::task(sum_refs).resources(on_special).remote(std::vector<doubles_ref>{failed}),
               std::chrono::seconds(30));
    check(false, "a task whose ref's producer failed fails");
  } catch (const manta::task_error& e) {
    check(std::string(e.what()).find("no doubles today") != std::string::npos &&
              e.remote_type() == "std::runtime_error",
          std::string("a task reading a ref whose producer failed fails with its error, as here: ") + e.what());
  } catch (const manta::error& e) {
    check(false, std::string("a task reading a ref whose producer failed fails with its error, not: ") + e.what());
  }
  check(manta::get(manta::task(count_unread).resources(on_special).remote(std::vector<doubles_ref>{failed, refs[0]}),
                   std::chrono::seconds(30)) == 2,
        "a task on a node holding that ref without reading it runs, as here");
  // Handles of an actor here travel inside a list.
  auto c = manta::actor<Counter>().remote(0);
  check(manta::get(manta::task(count_handles).resources(on_special).remote(std::vector{c, c}),
                   std::chrono::seconds(30)) == 2,
        "a task on a node takes a list of handles of an actor on the driver's node");
  check(manta::get(c.task(&Counter::add).remote(2)) == 2, "the actor still works");
  refs.clear();
  stored = {};
  failed = {};
  check(wait_for([] { return total(objects_on_nodes()) == 0; }, std::chrono::seconds(20)),
        "the nodes' copies (the failed one's too) went with the driver's refs");
}

/// Results of tasks on a node that hold refs: the objects they name, made on
/// that node, come back with them; the driver reads them, passes them on (to a
/// node again), and frees them.
void refs_back() {
  const std::map<std::string, double> on_special{{"special", 1}};
  auto sum = [](const std::vector<std::vector<double>>& vs) {
    double s = 0;
    for (const auto& v : vs) s += std::accumulate(v.begin(), v.end(), 0.0);
    return s;
  };
  auto made = manta::get(manta::task(made_here).resources(on_special).remote(), std::chrono::seconds(60));
  check(made.size() == 3 && sum(manta::get(made, std::chrono::seconds(30))) == 6 + 150'000 + 200,
        "refs a task on a node returns name its objects (small, large, a nested task's), read here");
  auto list = manta::get(manta::task(refs_in_a_ref).resources(on_special).remote(), std::chrono::seconds(60));
  check(sum(manta::get(manta::get(list), std::chrono::seconds(30))) == 200'000 + 4,
        "a ref to a list of refs, all made on a node, is read here");
  std::vector<doubles_ref> mine{manta::put(std::vector<double>{7}), manta::put(std::vector<double>(300'000, 1.0))};
  auto mixed = manta::get(manta::task(given_and_made).resources(on_special).remote(mine), std::chrono::seconds(60));
  check(mixed.size() == 3 && sum(manta::get(mixed)) == 7 + 300'000 + 5,
        "a result holding the driver's refs and one of the node's");
  // Passed on to tasks on the nodes: one of them made these objects (its own ids come back to it).
  std::set<int> ran_on;
  for (int i = 0; i < 6; ++i) {
    auto out = manta::get(manta::task(sum_refs).resources(on_special).remote(made), std::chrono::seconds(60));
    check(out[0] == 6 + 150'000 + 200, "refs a node made, passed to a node again, are read there");
    ran_on.insert(static_cast<int>(out[1]));
  }
  std::printf("the refs went back to %zu node(s)\n", ran_on.size());
  {
    // Back to the node that made it (an actor's calls all run there), after
    // its own copy went: it keeps the driver's under the id it gave it.
    auto holder = manta::actor<RefHolder>().resources(on_special).remote(std::vector<doubles_ref>{});
    auto own = manta::get(holder.task(&RefHolder::make).remote(300'000), std::chrono::seconds(60));
    check(manta::get(holder.task(&RefHolder::read).remote(own), std::chrono::seconds(60)) == 300'010,
          "an object a node made, sent back to that node by the driver, is read there");
  }
  check(manta::get(manta::task(nested_sum).resources(on_special).remote(mixed), std::chrono::seconds(60)) ==
            7 + 300'000 + 5,
        "refs from a node's result, mixed with the driver's, go on to nested tasks on a node");
  // What failed inside fails when read, saying why; the result itself is fine.
  auto failed = manta::get(manta::task(failed_inside).resources(on_special).remote(), std::chrono::seconds(60));
  try {
    manta::get(failed.at(0), std::chrono::seconds(30));
    check(false, "a ref to a task that failed on a node fails when read");
  } catch (const manta::error& e) {
    check(std::string(e.what()).find("no doubles today") != std::string::npos,
          std::string("a ref to a task that failed on a node fails when read, saying why: ") + e.what());
  }
  auto handed = manta::get(manta::task(handle_back).resources(on_special).remote(), std::chrono::seconds(60));
  check(handed.size() == 1 && manta::get(handed[0].task(&Counter::add).remote(1), std::chrono::seconds(30)) == 2,
        "a result holding the handle of an actor its task started comes back, and the driver calls it");
  handed.clear();
  check(manta::get(manta::task(add_one).resources(on_special).remote(1)) == 2, "the cluster goes on");
  made.clear();
  list = {};
  mixed.clear();
  mine.clear();
  failed.clear();
  check(wait_for([] { return total(objects_on_nodes()) == 0; }, std::chrono::seconds(20)),
        "the nodes' copies went with the driver's refs");
}

/// Tasks on a node reach the rest of the cluster: a nested task needing what
/// only another node has runs there, get_actor finds a named actor on another
/// node, and objects made on a node or given to it go on to another.
void from_nodes() {
  const std::map<std::string, double> on_special{{"special", 1}};
  auto hopped = manta::get(manta::task(hop).resources(on_special).remote(), std::chrono::seconds(60));
  check(hopped.size() == 2 && hopped[0] != ::getpid() && hopped[1] != ::getpid() && hopped[0] != hopped[1],
        "a task on a node submitted one that only the other node could run, and it ran there");
  auto meter = manta::actor<Counter>().resources(on_rare).name("meter").remote(10);
  check(manta::get(manta::task(add_by_name).resources(on_special).remote(std::string("meter"), 5),
                   std::chrono::seconds(60)) == 15,
        "a task on a node found a named actor on another node and called it");
  check(manta::get(meter.task(&Counter::add).remote(1)) == 16, "the driver sees that call's effect");
  try {
    manta::get(manta::task(add_by_name).resources(on_special).remote(std::string("nobody"), 1), std::chrono::seconds(60));
    check(false, "get_actor of an unknown name on a node fails");
  } catch (const manta::error& e) {
    check(std::string(e.what()).find("nobody") != std::string::npos,
          std::string("get_actor of an unknown name on a node fails, saying why: ") + e.what());
  }
  auto given = manta::put(std::vector<double>(200'000, 0.5));
  auto sums = manta::get(manta::task(pass_on).resources(on_special).remote(given), std::chrono::seconds(60));
  check(sums.size() == 2 && sums[0] == 300'000 && sums[1] == 100'000,
        "objects made on a node, and the driver's given to it, go on to a task on another node");
  // Handles of actors that live on nodes travel inside arguments, to tasks and constructors.
  auto tally = manta::actor<Counter>().resources(on_rare).remote(100);
  check(manta::get(manta::task(add_through).resources(on_special).remote(tally, 5), std::chrono::seconds(60)) == 105,
        "a task on a node called an actor on another node through the handle it was given");
  check(manta::get(manta::task(count_handles).resources(on_special).remote(std::vector{tally, meter}),
                   std::chrono::seconds(60)) == 2,
        "a list of handles reaches a node");
  auto relay = manta::actor<Relay>().resources(on_special).remote(tally);
  check(manta::get(relay.task(&Relay::add).remote(1), std::chrono::seconds(60)) == 106 &&
            manta::get(relay.task(&Relay::add).remote(1), std::chrono::seconds(60)) == 107,
        "an actor on a node built with a handle of an actor on another node calls it");
  check(manta::get(tally.task(&Counter::add).remote(0)) == 107, "the driver sees those calls");
  auto echoed = manta::get(manta::task(echo_handles).resources(on_special).remote(std::vector{tally}),
                           std::chrono::seconds(60));
  check(echoed.size() == 1 && echoed[0] == tally, "a task on a node returns the handle it was given");
  echoed.clear();
  tally = {};  // the relay's constructor still holds the actor
  check(manta::get(relay.task(&Relay::add).remote(1), std::chrono::seconds(60)) == 108,
        "an actor built with a handle keeps that actor alive after the driver dropped its own");
  auto victim = manta::actor<Counter>().resources(on_rare).remote(0);
  check(manta::get(victim.task(&Counter::add).remote(1)) == 1, "a second actor on the other node counts");
  manta::get(manta::task(kill_it).resources(on_special).remote(victim), std::chrono::seconds(60));
  check(wait_for(
            [&] {
              try {
                manta::get(victim.task(&Counter::add).remote(1), std::chrono::seconds(30));
                return false;
              } catch (const manta::actor_died_error&) {
                return true;
              }
            },
            std::chrono::seconds(20)),
        "a task on a node killed an actor through the handle it was given");
  // A dead actor's handle still travels: the task runs, and only its calls on it fail.
  check(manta::get(manta::task(count_handles).resources(on_special).remote(std::vector{victim}),
                   std::chrono::seconds(60)) == 1,
        "a task given a dead actor's handle runs");
  try {
    manta::get(manta::task(add_through).resources(on_special).remote(victim, 1), std::chrono::seconds(60));
    check(false, "a call through a dead actor's handle on a node fails");
  } catch (const manta::actor_died_error& e) {
    check(true, std::string("a call through a dead actor's handle on a node fails: ") + e.what());
  }
  auto here = manta::actor<Counter>().remote(0);  // on the driver's node
  check(manta::get(manta::task(add_through).resources(on_special).remote(here, 1), std::chrono::seconds(60)) == 1,
        "a worker on a node calls an actor on the driver's own node");
  // A named actor a task on a node starts is known by its name everywhere.
  check(manta::get(manta::task(start_named).resources(on_special).remote(std::string("from-node")),
                   std::chrono::seconds(60)) == 51,
        "a task on a node started a named actor");
  check(manta::get(manta::get_actor<Counter>("from-node").task(&Counter::add).remote(1), std::chrono::seconds(30)) == 52,
        "the driver finds a named actor a task on a node started");
  check(manta::get(manta::task(add_by_name).resources(on_rare).remote(std::string("from-node"), 1),
                   std::chrono::seconds(60)) == 53,
        "a task on the other node finds it too");
  try {
    manta::get(manta::task(start_named).resources(on_rare).remote(std::string("from-node")), std::chrono::seconds(60));
    check(false, "a second actor of that name, started on the other node, is refused");
  } catch (const manta::error& e) {
    check(std::string(e.what()).find("taken") != std::string::npos,
          std::string("a second actor of that name, started on the other node, is refused: ") + e.what());
  }
  manta::kill(manta::get_actor<Counter>("from-node"));
  auto started = manta::get(manta::task(actor_from_node).resources(on_special).remote(), std::chrono::seconds(60));
  check(started.size() == 3 && started[0] == 7 && started[1] == hopped[1] && started[2] == hopped[0],
        "a task on a node started an actor on the other node and called it");
  try {
    manta::get(manta::task(relay_node_died).resources(on_special).remote(), std::chrono::seconds(60));
    check(false, "a task failing with its nested task's node_died_error fails");
  } catch (const manta::error& e) {
    check(std::string(e.what()).find("a node it needed is gone") != std::string::npos,
          std::string("a task failing with its nested task's node_died_error fails, saying why: ") + e.what());
  }
  check(manta::get(manta::task(where).resources(on_special).remote(), std::chrono::seconds(30)) == hopped[0] &&
            alive_nodes() == 2,
        "its node did not take that error for its own loss: it serves on");
}

/// Whether process `pid` is gone (the nodes run on this machine).
bool process_gone(int pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

/// Actors a task on a node starts and returns: the driver calls them where
/// they live, passes them on, kills them, and ends them by dropping its handles.
void handles_back() {
  const std::map<std::string, double> on_special{{"special", 1}};
  auto hopped = manta::get(manta::task(hop).resources(on_special).remote(), std::chrono::seconds(60));
  auto back = manta::get(manta::task(actors_back).resources(on_special).remote(10), std::chrono::seconds(60));
  check(back.size() == 3, "a task on a node returned three actor handles");
  if (back.size() != 3) return;
  auto call = [](manta::actor_handle<Counter>& c, int x) {
    return manta::get(c.task(&Counter::add).remote(x), std::chrono::seconds(30));
  };
  auto host = [](manta::actor_handle<Counter>& c) {
    return manta::get(c.task(&Counter::host).remote(), std::chrono::seconds(30));
  };
  check(host(back[0]) == hopped[0] && host(back[1]) == hopped[0],
        "the actors it started on its own node live there, and the driver calls them");
  check(host(back[2]) == hopped[1], "the one it started on the other node lives there");
  check(call(back[0], 1) == 11 && call(back[0], 1) == 12 && call(back[1], 1) == 61 && call(back[2], 1) == 111,
        "each keeps its state after the task that started it returned");
  check(manta::get(manta::task(add_through).resources(on_rare).remote(back[0], 5), std::chrono::seconds(60)) == 17,
        "a task on the other node calls a handed-back actor through the handle the driver passed on");
  check(manta::get(manta::task(add_through).resources(on_special).remote(back[0], 1), std::chrono::seconds(60)) == 18,
        "so does a task on the node where it lives");
  auto wrapped = manta::get(manta::task(actor_in_a_ref).resources(on_special).remote(7), std::chrono::seconds(60));
  auto inner = manta::get(wrapped, std::chrono::seconds(30));
  check(call(inner, 1) == 8, "a handle inside an object a task on a node made comes back with it");
  // Killed by the driver: its calls fail, on either node.
  const int killed_process = manta::get(back[1].task(&Counter::process).remote(), std::chrono::seconds(30));
  manta::kill(back[1]);
  manta::kill(back[2]);
  auto fails = [&](manta::actor_handle<Counter>& c) {
    return wait_for(
        [&] {
          try {
            call(c, 1);
            return false;
          } catch (const manta::actor_died_error&) {
            return true;
          }
        },
        std::chrono::seconds(20));
  };
  check(fails(back[1]) && fails(back[2]), "the driver killed handed-back actors on both nodes");
  check(wait_for([&] { return process_gone(killed_process); }, std::chrono::seconds(20)),
        "the killed actor's process on the node is gone");
  // Dropped by the driver: the actor ends on its node once the task's own handle went too.
  const int dropped_process = manta::get(back[0].task(&Counter::process).remote(), std::chrono::seconds(30));
  back.clear();
  check(wait_for([&] { return process_gone(dropped_process); }, std::chrono::seconds(20)),
        "an actor handed back ends on its node once the driver dropped its handles");
  const int inner_process = manta::get(inner.task(&Counter::process).remote(), std::chrono::seconds(30));
  check(!process_gone(inner_process), "the one held through a ref lives on");
  inner = {};
  wrapped = {};
  check(wait_for([&] { return process_gone(inner_process); }, std::chrono::seconds(20)),
        "and ends once its handle and the ref holding one are gone");
  // Handed on twice: from the node with "rare" to a task on the other, then to the driver.
  auto via = manta::get(manta::task(actor_via_rare).resources(on_special).remote(30), std::chrono::seconds(60));
  check(host(via) == hopped[1] && call(via, 1) == 31,
        "an actor handed back twice (to a task on the other node, then to the driver) lives where it started");
  const int via_process = manta::get(via.task(&Counter::process).remote(), std::chrono::seconds(30));
  via = {};
  check(wait_for([&] { return process_gone(via_process); }, std::chrono::seconds(20)),
        "and ends once the driver dropped it");
  check(manta::get(manta::task(add_one).resources(on_special).remote(1)) == 2, "the cluster goes on");
}

void named_user() {
  const std::map<std::string, double> half{{"special", 0.5}};
  check(marked("owner-ready", std::chrono::seconds(60)), "the owner started its actor");
  {
    auto found = manta::get_actor<Counter>("shared");
    check(manta::get(found.task(&Counter::add).remote(5)) == 6 && manta::get(found.task(&Counter::add).remote(5)) == 11,
          "get_actor finds another driver's actor on the cluster, and its calls run there");
    try {
      manta::get(found.task(&Counter::kept_refs).remote(), std::chrono::seconds(30));
      check(false, "a result holding another driver's ref is refused");
    } catch (const manta::error& e) {
      check(std::string(e.what()).find("task 'Counter::kept_refs'") != std::string::npos &&
                std::string(e.what()).find("which this driver does not hold") != std::string::npos,
            std::string("a result holding another driver's ref is refused, naming the call: ") + e.what());
    }
  }
  try {
    manta::get_actor<Counter>("nobody");
    check(false, "an unknown name is refused");
  } catch (const manta::usage_error& e) {
    check(true, std::string("an unknown name is refused: ") + e.what());
  }
  try {
    manta::get_actor<Holder>("shared");
    check(false, "the wrong class is refused");
  } catch (const manta::usage_error& e) {
    check(std::string(e.what()).find("not a") != std::string::npos, std::string("the wrong class is refused: ") + e.what());
  }
  auto twin = manta::actor<Counter>().resources(half).name("shared").remote(0);
  try {
    manta::get(twin.task(&Counter::add).remote(1), std::chrono::seconds(30));
    check(false, "a second actor of the same name is refused");
  } catch (const manta::actor_died_error& e) {
    check(std::string(e.what()).find("taken in the cluster") != std::string::npos,
          std::string("a second actor of the same name is refused: ") + e.what());
  }
  {
    auto home = manta::get_actor<Counter>("home");
    check(manta::get(home.task(&Counter::add).remote(5), std::chrono::seconds(30)) == 6 &&
              manta::get(home.task(&Counter::add).remote(5), std::chrono::seconds(30)) == 11,
          "get_actor finds a named actor on another driver's own node, and its calls run there");
  }
  {
    // A name taken in the cluster: an actor of this node named so is refused
    // there before its constructor runs (which would leave a slow-<pid> mark).
    auto local_twin = manta::actor<Slow>().name("shared").remote(0);
    try {
      manta::get(local_twin.task(&Slow::host).remote(), std::chrono::seconds(30));
      check(false, "an actor on this node named like one on a node is refused by the cluster");
    } catch (const manta::actor_died_error& e) {
      check(std::string(e.what()).find("taken in the cluster") != std::string::npos,
            std::string("an actor on this node named like one on a node is refused by the cluster: ") + e.what());
    }
    check(!std::filesystem::exists(std::string(std::getenv("CLUSTER_DIR")) + "/slow-" + std::to_string(::getpid())),
          "its constructor never ran");
  }
  {
    auto big = manta::get_actor<Holder>("big");
    check(manta::get(big.task(&Holder::size).remote(), std::chrono::seconds(60)) == 5'000'000,
          "an actor found while its 40 MB constructor was on its way answers");
    manta::kill(manta::get_actor<Counter>("victim"));
  }
  mark("user-done");
}

/// Tasks go to the node whose resources an actor does not hold for life.
void actor_holds() {
  auto holder = manta::actor<Counter>().resources({{"special", 2}}).remote(0);
  const int held_at = manta::get(holder.task(&Counter::host).remote());
  std::vector<manta::object_ref<int>> refs;
  for (int i = 0; i < 4; ++i) refs.push_back(manta::task(nap_where).resources({{"special", 2}}).remote(100));
  bool elsewhere = true;
  for (int w : manta::get(refs, std::chrono::seconds(30))) elsewhere = elsewhere && w != held_at;
  check(elsewhere, "4 tasks asking what an actor holds on one node all ran on the other");
}

/// Calls queued on slow actors do not hold up plain tasks on their nodes.
void actor_backlog() {
  std::vector<manta::actor_handle<Counter>> slow;
  std::vector<manta::object_ref<int>> naps;
  for (int a = 0; a < 2; ++a) {  // one on each node
    slow.push_back(manta::actor<Counter>().resources({{"special", 0.5}}).remote(0));
    for (int i = 0; i < 80; ++i) naps.push_back(slow.back().task(&Counter::nap).remote(150));
  }
  // 80 calls of 150 ms queue 12 s on each node, past the node's 64 tasks in its runtime.
  auto quick = manta::task(add_one).resources({{"special", 1}}).remote(1);
  check(manta::get(quick, std::chrono::seconds(8)) == 2, "a plain task runs at once beside 80 queued actor calls");
}

/// An actor started again on a node that is lost before it answered: its
/// driver hears (the actor is dead), and nothing of it is left behind.
void actor_restart_lost() {
  const std::map<std::string, double> on_special{{"special", 1}};
  auto x = manta::actor<Counter>().resources(on_special).remote(0);
  const int p = manta::get(x.task(&Counter::host).remote());
  const int q = manta::get(manta::task(where).resources(on_special).remote());
  check(p != q, "x lives on one node, a task ran on the other");
  // The driver holds x's handle alone once the results above are gone (the
  // scheduler lets go of a result just after sealing it, on its own thread:
  // counted at once, it may still be there).
  const std::size_t before = 1;
  check(wait_for([&] { return manta::detail::object_count() == before; }, std::chrono::seconds(20)),
        "before y, the driver holds x's handle alone (" + std::to_string(manta::detail::object_count()) + " objects)");
  ::kill(q, SIGSTOP);
  {
    auto y = manta::actor<Counter>().resources(on_special).max_restarts(1).remote(5);
    // The head places y on the node without an actor (q, frozen): wait until it lists it there.
    check(wait_for([&] { return actors_on_pid(q) == 1; },
                   std::chrono::seconds(20)),
          "y was placed on the frozen node");
    ::kill(p, SIGSTOP);
    ::kill(q, SIGKILL);  // y starts again on p, frozen too: lost by heartbeat before it answers
    try {
      manta::get(y.task(&Counter::add).remote(1), std::chrono::seconds(30));
      check(false, "a call on y fails");
    } catch (const manta::actor_died_error& e) {
      check(true, std::string("a call on y fails: ") + e.what());
    }
  }
  check(wait_for([&] { return manta::detail::object_count() == before; }, std::chrono::seconds(20)),
        "y's handle gone, nothing of it is left in the driver (" + std::to_string(manta::detail::object_count()) +
            " objects, " + std::to_string(before) + " before)");
  ::kill(p, SIGKILL);
}

/// How many workers left a mark (marked_nap) so far; `clear`: removes them.
int worker_marks(bool clear = false) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::getenv("CLUSTER_DIR")))
    if (e.path().filename().string().rfind("worker-", 0) == 0) {
      ++n;
      if (clear) std::filesystem::remove(e.path());
    }
  return n;
}

/// The only node that can hold an actor is lost: the actor waits at the head
/// for a node that has what it asks (the head runs with --node-wait 4),
/// starts again on the one the driver starts, and runs the calls made
/// meanwhile in order; so does a task that was running there. Lost again with
/// no node joining, both are gone once the wait is over.
void work_waits_for_node() {
  const std::map<std::string, double> on_special{{"special", 1}};
  auto x = manta::actor<Counter>().resources(on_special).max_restarts(2).remote(10);
  const int first = manta::get(x.task(&Counter::host).remote());
  check(manta::get(x.task(&Counter::add).remote(1)) == 11, "the actor runs on the only node");
  auto running = manta::task(marked_nap).resources(on_special).remote(2000);
  check(wait_for([] { return worker_marks() == 1; }, std::chrono::seconds(20)), "a task runs there too");
  // Plain tasks spill to the node while this driver's one worker is busy.
  // Lost with it, they come back here at once (this node can run them)
  // instead of waiting at the head for a node.
  auto busy = manta::task(nap_where).remote(2000);
  std::vector<manta::object_ref<int>> spilled;
  for (int i = 0; i < 3; ++i) spilled.push_back(manta::task(nap_marked_where).remote(1000, i));
  const std::string at_first = std::string(std::getenv("CLUSTER_DIR")) + "/at-" + std::to_string(first) + "-";
  int there = -1;  // which of them runs on the node
  check(wait_for(
            [&] {
              for (int i = 0; i < 3; ++i)
                if (std::filesystem::exists(at_first + std::to_string(i))) there = i;
              return there >= 0;
            },
            std::chrono::seconds(20)),
        "a plain task spilled to the node");
  ::kill(first, SIGKILL);
  check(wait_for([] { return alive_nodes() == 0; }, std::chrono::seconds(20)), "its node is lost");
  auto a = x.task(&Counter::add).remote(1);
  auto long_call = add_ten_chunks(x);  // 9 MB: in parts, held at the head as they come
  auto b = x.task(&Counter::add).remote(2);
  try {
    manta::get(a, std::chrono::milliseconds(500));
    check(false, "a call waits while no node can hold its actor");
  } catch (const manta::timeout_error&) {
    check(true, "a call waits while no node can hold its actor");
  }
  // New work that only such a node can take waits for one too (it is not refused at remote()).
  auto fresh_task = manta::task(where).resources(on_special).remote();
  auto fresh_actor = manta::actor<Counter>().resources(on_special).remote(3);
  auto fresh_call = fresh_actor.task(&Counter::add).remote(1);
  // A node like the lost one, with room for the new actor too, joins (started as users do, in the background).
  char self[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  check(n > 0, "the program knows its path");
  const std::string dir = std::getenv("CLUSTER_DIR");
  const std::string start = std::string("env -u MANTA_ADDRESS ") + std::getenv("CLUSTER_CLI") + " start --log-dir " +
                            dir + " --num-workers 2 -- " + self + " special4 > " + dir + "/start.out 2>&1";
  check(std::system(start.c_str()) == 0, "a new node joined");
  check(manta::get(a, std::chrono::seconds(30)) == 11 && manta::get(long_call, std::chrono::seconds(30)) == 21 &&
            manta::get(b, std::chrono::seconds(30)) == 23,
        "the calls made while it waited (one of 9 MB, in parts) ran, in order, from its constructor's state");
  const int second = manta::get(x.task(&Counter::host).remote(), std::chrono::seconds(30));
  check(second != 0 && second != first, "it lives on the node that joined");
  check(manta::get(fresh_task, std::chrono::seconds(30)) == second, "a task made while no node could take it ran on the node that joined");
  check(manta::get(fresh_call, std::chrono::seconds(30)) == 4, "so did an actor made then, and its call");
  check(manta::get(running, std::chrono::seconds(30)) == 0 && worker_marks() == 2,
        "the task lost with the first node ran again on the one that joined");
  check(manta::get(busy) == ::getpid() && manta::get(spilled[there], std::chrono::seconds(30)) == ::getpid(),
        "the plain task spilled to the lost node ran here, not on the node that joined");

  worker_marks(/*clear=*/true);
  auto stranded = manta::task(marked_nap).resources(on_special).remote(60'000);
  check(wait_for([] { return worker_marks() == 1; }, std::chrono::seconds(20)), "another task runs there");
  ::kill(second, SIGKILL);
  check(wait_for([] { return alive_nodes() == 0; }, std::chrono::seconds(20)), "that node is lost too");
  auto orphan = manta::task(where).resources(on_special).remote();
  try {
    manta::get(orphan, std::chrono::seconds(30));
    check(false, "a new task no node comes for fails once the wait is over");
  } catch (const manta::node_died_error& e) {
    check(std::string(e.what()).find("could not be placed") != std::string::npos &&
              std::string(e.what()).find("joined within 4000 ms") != std::string::npos,
          std::string("a new task no node comes for fails once the wait is over: ") + e.what());
  }
  try {
    manta::get(stranded, std::chrono::seconds(30));
    check(false, "with no node joining, a task lost with it fails once the wait is over");
  } catch (const manta::node_died_error& e) {
    check(std::string(e.what()).find("joined within 4000 ms") != std::string::npos,
          std::string("with no node joining, a task lost with it fails once the wait is over: ") + e.what());
  }
  auto c = x.task(&Counter::add).remote(1);
  try {
    manta::get(c, std::chrono::seconds(30));
    check(false, "with no node joining, its call fails once the wait is over");
  } catch (const manta::actor_died_error& e) {
    check(std::string(e.what()).find("joined within 4000 ms") != std::string::npos,
          std::string("with no node joining, its call fails once the wait is over: ") + e.what());
  }
  try {
    manta::get(x.task(&Counter::add).remote(1), std::chrono::seconds(30));
    check(false, "a later call fails at once");
  } catch (const manta::actor_died_error& e) {
    check(std::string(e.what()).find("joined within") != std::string::npos,
          std::string("a later call fails at once: ") + e.what());
  }

  // An actor lost while its constructor ran waits too; killed meanwhile, its
  // start is answered, and nothing of it is left in the driver.
  check(std::system(start.c_str()) == 0, "a third node joined");
  const std::size_t before = settled_object_count();
  {
    auto slow = manta::actor<Slow>().resources(on_special).max_restarts(1).remote(60'000);
    int third = 0;
    check(wait_for(
              [&] {
                for (const auto& e : std::filesystem::directory_iterator(dir))
                  if (e.path().filename().string().rfind("slow-", 0) == 0)
                    third = std::atoi(e.path().filename().string().c_str() + 5);
                return third != 0;
              },
              std::chrono::seconds(20)),
          "a slow constructor runs on the third node");
    ::kill(third, SIGKILL);
    check(wait_for([] { return alive_nodes() == 0; }, std::chrono::seconds(20)), "the third node is lost");
    manta::kill(slow);
  }
  check(wait_for([&] { return manta::detail::object_count() == before; }, std::chrono::seconds(20)),
        "the actor killed while it waited left nothing in the driver (" +
            std::to_string(manta::detail::object_count()) + " objects, " + std::to_string(before) + " before)");
}

/// An actor on the driver's own node, its handle passed to tasks and an
/// actor on the nodes: they call it (through the head, to this driver), kill
/// it, and lose it when its handles here are gone.
void driver_actor_from_nodes() {
  const std::map<std::string, double> on_special{{"special", 1}};
  auto tally = manta::actor<Counter>().remote(0);  // it fits here: it lives here
  check(manta::get(tally.task(&Counter::host).remote()) == ::getpid(), "the actor lives on the driver's node");
  std::vector<manta::object_ref<std::vector<int>>> calls;
  for (int i = 0; i < 8; ++i) calls.push_back(manta::task(add_where).resources(on_special).remote(tally, 1));
  std::set<int> seen, nodes;
  for (const auto& r : manta::get(calls, std::chrono::seconds(60))) {
    seen.insert(r[0]);
    nodes.insert(r[1]);
  }
  check(seen == std::set<int>{1, 2, 3, 4, 5, 6, 7, 8} && nodes.size() == 2 && !nodes.count(::getpid()),
        "8 tasks on both nodes called it once each (" + std::to_string(seen.size()) + " values, " +
            std::to_string(nodes.size()) + " nodes)");
  check(manta::get(tally.task(&Counter::add).remote(0)) == 8, "the driver sees their calls");
  check(manta::get(manta::task(absorb_through).resources(on_special).remote(tally, 500'000),
                   std::chrono::seconds(60)) == 500'008,
        "a 4 MB object stored on a node goes to it by value");
  std::vector<manta::object_ref<int>> ints{manta::put(20), manta::put(22)};
  check(manta::get(manta::task(count_through).resources(on_special).remote(tally, ints), std::chrono::seconds(30)) == 42,
        "refs to the driver's objects go from a node to the actor on the driver's node");
  {
    auto relay = manta::actor<Relay>().resources(on_special).remote(tally);
    check(manta::get(relay.task(&Relay::add).remote(2), std::chrono::seconds(30)) == 500'010,
          "an actor on a node built with its handle calls it");
  }
  check(manta::get(manta::task(kill_it).resources(on_special).remote(tally), std::chrono::seconds(30)) == 1,
        "a task on a node kills it");
  std::string why;  // (the kill reaches this driver through the head, soon after)
  const bool died = wait_for(
      [&] {
        try {
          manta::get(tally.task(&Counter::add).remote(0), std::chrono::seconds(10));
          return false;
        } catch (const manta::actor_died_error& e) {
          why = e.what();
          return true;
        }
      },
      std::chrono::seconds(20));
  check(died && why.find("elsewhere in the cluster") != std::string::npos,
        "its calls fail once a task on a node killed it: " + why);
  try {
    manta::get(manta::task(add_where).resources(on_special).remote(tally, 1), std::chrono::seconds(30));
    check(false, "a call from a node of the killed actor fails");
  } catch (const manta::error& e) {
    const std::string what = e.what();
    check(what.find("killed") != std::string::npos || what.find("ended") != std::string::npos,
          "a call from a node of the killed actor fails: " + what);
  }
  auto second = manta::actor<Counter>().remote(5);
  check(manta::get(manta::task(add_where).resources(on_special).remote(second, 1), std::chrono::seconds(30))[0] == 6,
        "a second actor here is called from a node, and the nodes work on");
}

/// Objects made on nodes reach actors on the driver's node (and on another
/// node's) inside the arguments of their calls: refs in a vector, a queue's
/// items (a long one in parts), a stream's. Nodes "special" and "rare".
void objects_to_hosts() {
  const std::map<std::string, double> on_special{{"special", 1}};
  auto tally = manta::actor<Counter>().remote(0);  // it fits here: it lives here
  check(manta::get(manta::task(count_made_here).resources(on_special).remote(tally, 20, 22),
                   std::chrono::seconds(30)) == 42,
        "refs in a vector to objects put on a node reach the actor on the driver's node");
  check(manta::get(manta::task(count_made_here).resources(on_rare).remote(tally, 1, 2), std::chrono::seconds(30)) == 3,
        "and from the other node");
  manta::queue<int> q;
  auto producer = manta::task(fill).resources(on_special).remote(q, 0, 10);
  bool in_order = true;
  for (int i = 0; i < 10; ++i) in_order = in_order && q.get(std::chrono::seconds(30)) == i;
  check(in_order && manta::get(producer, std::chrono::seconds(30)) == 10,
        "a queue made here gets, in order, what a task on a node put");
  manta::queue<std::vector<double>> long_items;
  auto long_producer = manta::task(fill_long).resources(on_rare).remote(long_items, 3'000'000, 0.5);
  const std::vector<double> item = long_items.get(std::chrono::seconds(60));
  check(item.size() == 3'000'000 && std::accumulate(item.begin(), item.end(), 0.0) == 1'500'000.0 &&
            manta::get(long_producer, std::chrono::seconds(30)) == 3'000'000,
        "a 24 MB item a node put comes whole");
  std::vector<int> streamed;
  for (auto& r : manta::task(count_up).resources(on_special).remote(5)) streamed.push_back(manta::get(r));
  check(streamed == std::vector<int>{0, 1, 4, 9, 16}, "a stream whose task runs on a node reaches the driver");
  check(manta::get(manta::task(queue_across).resources(on_special).remote(), std::chrono::seconds(60)) == 15,
        "a queue made by a task on one node gets what a task on the other put");
  check(manta::get(manta::task(add_after_lost).resources(on_special).remote(tally, 5), std::chrono::seconds(60)) == 5,
        "a call whose object failed before it came fails saying why, and the next call of its actor runs");
  check(manta::get(manta::task(add_after_cancel).resources(on_rare).remote(tally, 2), std::chrono::seconds(60)) == 7,
        "a call waiting for its object is cancelled, and the next call of its actor runs");
  check(manta::get(tally.task(&Counter::add).remote(0)) == 7, "the actor here still works");
}

/// The pid of `parent`'s child named `comm` (0 if none).
int child_named(int parent, const std::string& comm) {
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::ifstream stat(e.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    auto open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    int ppid = 0;
    char state;
    std::istringstream(line.substr(close + 2)) >> state >> ppid;
    if (ppid == parent && line.substr(open + 1, close - open - 1) == comm) return std::atoi(line.c_str());
  }
  return 0;
}

/// A node whose processes are lost (its zygote killed) leaves; its task runs on the other.
void zygote_lost() {
  auto ref = manta::task(slow_where).resources({{"special", 1}}).remote(3000);
  int first = first_mark();
  int zygote = child_named(first, "manta-zygote");
  check(zygote > 0, "the node running the task has a zygote (" + std::to_string(zygote) + ")");
  ::kill(zygote, SIGKILL);
  int second = manta::get(ref, std::chrono::seconds(60));
  check(second > 0 && second != first, "the task ran again on the other node after the first lost its processes");
}

/// How often thread `tid` of process `pid` went to sleep so far.
long sleeps_of(int pid, int tid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("voluntary_ctxt_switches:", 0) == 0) return std::stol(line.substr(24));
  return -1;
}

/// While a node's task runs, the node's serving thread (its main thread)
/// sleeps until the result is sealed: the scheduler's seal wakes it, it does
/// not wake every few milliseconds to look.
void service_sleeps() {
  auto ref = manta::task(slow_where).resources({{"special", 1}}).remote(4000);
  const int node = first_mark();
  check(node > 0, "the task started on a node");
  const long before = sleeps_of(node, node);
  std::this_thread::sleep_for(std::chrono::seconds(1));  // (the window counted in, not a synchronisation)
  const long after = sleeps_of(node, node);
  check(before >= 0 && after >= 0, "the node's serving thread was there to count");
  check(after - before < 100, "the serving thread slept " + std::to_string(after - before) +
                                  " times in a second while its one task ran (it polls)");
  check(manta::get(ref, std::chrono::seconds(60)) == node, "the task's result came back");
}

/// The tasks the head counts as running on nodes (`manta status --json`).
int tasks_on_nodes() { return total(objects_on_nodes("tasks_running")); }

/// A task cancelled while it waits on its node behind 64 others (not yet in
/// the node's runtime) is answered by the node at once, though nothing there
/// finishes for half a minute: the head stops counting it. (The driver fails
/// it at once itself; the node's answer is what frees the head's route.)
void cancel_waiting() {
  std::vector<manta::object_ref<int>> refs;
  for (int i = 0; i < 66; ++i) refs.push_back(manta::task(slow_where).resources({{"special", 1}}).remote(30'000));
  check(first_mark() > 0, "the first tasks started on the node");
  check(wait_for([] { return tasks_on_nodes() == 66; }, std::chrono::seconds(20)), "the head placed the 66 tasks");
  manta::cancel(refs.back());  // (the 66th: past the 64 the node puts into its runtime)
  check(wait_for([] { return tasks_on_nodes() == 65; }, std::chrono::seconds(10)),
        "the node answered a task cancelled while it waited there within 10 s (the head counts " +
            std::to_string(tasks_on_nodes()) + " running)");
  for (auto& r : refs) manta::cancel(r);
}

/// A frozen node (SIGSTOP) is lost within the heartbeat limit, and nobody else waits on it.
void frozen() {
  auto ref = manta::task(slow_where).resources({{"special", 1}}).remote(2000);
  int first = first_mark();
  ::kill(first, SIGSTOP);
  auto stopped = std::chrono::steady_clock::now();
  bool seen = wait_for([] { return alive_nodes() == 1; }, std::chrono::seconds(10));
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - stopped).count();
  check(seen, "the frozen node was declared lost after " + std::to_string(static_cast<int>(ms)) + " ms");
  int second = manta::get(ref, std::chrono::seconds(60));
  check(second > 0 && second != first, "its task ran again on the other node");
  check(manta::get(manta::task(where).resources({{"special", 1}}).remote()) == second,
        "the cluster goes on with the other node");
  ::kill(first, SIGCONT);  // it finds itself dropped, and exits
}

/// @param doubles  its argument's length: 5M (40 MB, in parts the head sends
///                 again) or 80M (640 MB: more than a peer's queue may hold, sent again all the same)
void node_lost(std::size_t doubles = 5'000'000) {
  auto ref = manta::task(slow_sum_where).resources({{"special", 1}}).remote(std::vector<double>(doubles, 2.0), 3000);
  int first = first_mark();
  check(first > 0, "the task started on a node");
  ::kill(first, SIGKILL);
  auto got = manta::get(ref, std::chrono::seconds(60));
  const int second = static_cast<int>(got[1]);
  check(second > 0 && second != first,
        "the task was run again on another node (" + std::to_string(second) + ") after " + std::to_string(first) +
            " was killed");
  check(got[0] == 2.0 * static_cast<double>(doubles),
        "its " + std::to_string(doubles * 8 / 1000000) + " MB argument reached the other node whole");
  check(wait_for([] { return alive_nodes() == 1; }, std::chrono::seconds(10)), "nodes() shows the lost node dead");
}

/// A gigabyte to a node and a gigabyte back.
void gigabyte() {
  const std::uint64_t n = std::uint64_t{1} << 30;
  const std::map<std::string, double> on_special{{"special", 1}};
  {
    std::vector<std::uint8_t> bytes(n, 5);
    bytes.back() = 7;
    auto stored = manta::put(bytes);
    bytes = {};
    auto t0 = std::chrono::steady_clock::now();
    auto seen = manta::get(manta::task(sample_of).resources(on_special).remote(stored), std::chrono::seconds(120));
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    check(seen == std::vector<std::uint64_t>{n, 5, 5, 7},
          "a 1 GiB argument reached the node whole (" + std::to_string(s) + " s)");
  }
  auto t0 = std::chrono::steady_clock::now();
  auto back = manta::task(bytes_of).resources(on_special).remote(n);
  manta::wait(std::vector{back}, 1, std::chrono::seconds(120));
  const auto view = manta::get_view(back);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  check(view.size() == n && view[0] == 3 && view[n / 2] == 3 && view[n - 1] == 9,
        "a 1 GiB result came back whole (" + std::to_string(s) + " s)");
}

/// Many long tasks at once, both ways: 12 arguments and 12 results of 50 MB.
void many_long() {
  const std::map<std::string, double> on_special{{"special", 1}};
  std::vector<manta::object_ref<std::vector<double>>> outs;
  std::vector<manta::object_ref<double>> sums;
  for (int i = 0; i < 12; ++i) {
    auto arg = manta::put(std::vector<double>(6'250'000, static_cast<double>(i)));
    sums.push_back(manta::task(sum_on).resources(on_special).remote(arg));
    outs.push_back(manta::task(big_from).resources(on_special).remote(6'250'000));
  }
  auto got = manta::get(sums, std::chrono::seconds(120));
  bool right = true;
  for (int i = 0; i < 12; ++i) right = right && got[static_cast<std::size_t>(i)] == 6'250'000.0 * i;
  check(right, "12 long arguments at once each reached a node whole");
  auto back = manta::get(outs, std::chrono::seconds(120));
  right = true;
  for (const auto& v : back) right = right && v.size() == 6'250'000 && v.back() == 0.25;
  check(right, "12 long results at once each came back whole");
  auto stored = manta::put(std::vector<double>(300'000, 1.0));
  const double mixed = manta::get(manta::task(mixed_args)
                                      .resources(on_special)
                                      .remote(5, std::vector<double>(1'250'000, 2.0), stored, std::string(70'000, 't')),
                                  std::chrono::seconds(60));
  check(mixed == 5 + 2'500'000 + 300'000 + 70'000,
        "a long task's small, large, stored and string arguments each reached the node right");
  auto made = manta::get(manta::task(made_long).resources(on_special).remote(), std::chrono::seconds(60));
  const auto values = manta::get(made.plain, std::chrono::seconds(30));
  check(values.size() == 2 && values[0].size() == 1'500'000 && values[0].back() == 2.0 && values[1] == std::vector<double>{3},
        "a long result's refs name the objects made on the node, each read here whole");
  const padded_ref padded = manta::get(made.padded, std::chrono::seconds(30));
  check(padded.pad.size() == 20'000 && manta::get(padded.data, std::chrono::seconds(30)) == std::vector<double>{4, 5},
        "a large object it carries holds its own ref, still readable here");
}

/// Sends a gigabyte to a node and dies while it streams out.
void dies_mid_send() {
  auto stored = manta::put(std::vector<std::uint8_t>(std::uint64_t{1} << 30, 1));
  auto ref = manta::task(sample_of).resources({{"special", 1}}).remote(stored);
  // Not a synchronisation: a gigabyte takes seconds through the head, and this
  // kills the driver during it (had it finished, the test would still pass).
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::printf("dying mid-send\n");
  std::fflush(stdout);
  ::kill(::getpid(), SIGKILL);
}

/// After another driver died mid-send: the node still takes long tasks.
void after_abort() {
  auto long_arg = manta::put(std::vector<double>(9'000'000, 0.5));  // 72 MB, in parts
  check(manta::get(manta::task(sum_on).resources({{"special", 1}}).remote(long_arg), std::chrono::seconds(60)) ==
            4'500'000.0,
        "a long task reaches the node after a driver died mid-send");
}

void head_lost() {
  auto far = manta::actor<Counter>().resources({{"special", 1}}).remote(0);
  check(manta::get(far.task(&Counter::add).remote(1)) == 1, "an actor lives on the node");
  auto ref = manta::task(slow_where).resources({{"special", 1}}).remote(5000);
  check(first_mark() > 0, "the task started on a node");
  ::kill(std::atoi(std::getenv("CLUSTER_HEAD_PID")), SIGKILL);
  try {
    manta::get(ref, std::chrono::seconds(60));
    check(false, "a task on a cluster whose head is lost fails");
  } catch (const manta::node_died_error& e) {
    check(true, std::string("a task on a cluster whose head is lost fails: ") + e.what());
  }
  try {
    manta::task(where).resources({{"special", 1}}).remote();
    check(false, "later remote tasks are refused");
  } catch (const manta::usage_error& e) {
    check(std::string(e.what()).find("cluster is gone") != std::string::npos,
          std::string("later remote tasks are refused: ") + e.what());
  }
  check(manta::get(manta::task(add_one).remote(1)) == 2, "local tasks still run");
  auto named_after = manta::actor<Counter>().name("after-the-head").remote(5);
  check(manta::get(named_after.task(&Counter::add).remote(1), std::chrono::seconds(30)) == 6 &&
            manta::get(manta::get_actor<Counter>("after-the-head").task(&Counter::add).remote(1),
                       std::chrono::seconds(30)) == 7,
        "a named actor made now lives here, and get_actor finds it");
  try {
    manta::get(far.task(&Counter::add).remote(1), std::chrono::seconds(30));
    check(false, "a call on an actor that lived on the cluster fails");
  } catch (const manta::actor_died_error& e) {
    check(std::string(e.what()).find("gone with the cluster") != std::string::npos,
          std::string("a call on an actor that lived on the cluster fails: ") + e.what());
  }
}

}  // namespace

int launch_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return -1;
}

int main(int argc, char** argv) {
  ::setenv("CLUSTER_NODE_PID", std::to_string(::getpid()).c_str(), 1);
  const std::string first = argc > 1 ? argv[1] : "";
  if (std::getenv("MANTA_NODE") || (first == "launched" && launch_rank() > 0)) {
    manta::options o{.num_workers = 2};
    if (first == "special" || first == "launched") o.resources = {{"special", 2}};
    if (first == "rare") o.resources = {{"rare", 4}};  // (some held by actors, the rest for tasks)
    if (first == "special4") o.resources = {{"special", 4}};  // (room for two actors and two tasks)
    manta::init(o);  // serves; never returns
    return 99;
  }
  if (argc != 3) return 2;
  manta::options o{.num_workers = 1};
  if (const char* mb = std::getenv("CLUSTER_STORE_MB")) o.object_store_bytes = std::strtoull(mb, nullptr, 10) << 20;
  struct sigaction segv_before {};
  ::sigaction(SIGSEGV, nullptr, &segv_before);
  manta::init(o);
  struct sigaction segv_after {};
  ::sigaction(SIGSEGV, nullptr, &segv_after);
  check(segv_after.sa_handler == segv_before.sa_handler, "init kept the program's SIGSEGV handler");
  const std::size_t want = std::strtoul(argv[2], nullptr, 10);
  // basic: its nodes joined before it started, and init returns knowing them.
  if (std::string(argv[1]) != "basic" && !wait_for([&] { return alive_nodes() >= want; }, std::chrono::seconds(20))) {
    std::printf("FAILED: %zu nodes never joined\n", want);
    return 1;
  }
  const std::string scenario = argv[1];
  if (scenario == "basic") basic();
  else if (scenario == "node_lost") node_lost();
  else if (scenario == "node_lost_long") node_lost(80'000'000);
  else if (scenario == "spill") spill();
  else if (scenario == "zygote_lost") zygote_lost();
  else if (scenario == "frozen") frozen();
  else if (scenario == "service_sleeps") service_sleeps();
  else if (scenario == "cancel_waiting") cancel_waiting();
  else if (scenario == "launched") launched(want);
  else if (scenario == "head_lost") head_lost();
  else if (scenario == "gigabyte") gigabyte();
  else if (scenario == "many_long") many_long();
  else if (scenario == "objects_to_hosts") objects_to_hosts();
  else if (scenario == "dies_mid_send") dies_mid_send();
  else if (scenario == "after_abort") after_abort();
  else if (scenario == "actors") actors();
  else if (scenario == "actor_lost") actor_lost();
  else if (scenario == "objects") objects();
  else if (scenario == "actor_holds") actor_holds();
  else if (scenario == "actor_backlog") actor_backlog();
  else if (scenario == "actor_restart_lost") actor_restart_lost();
  else if (scenario == "work_waits_for_node") work_waits_for_node();
  else if (scenario == "driver_actor_from_nodes") driver_actor_from_nodes();
  else if (scenario == "actor_lost_long") actor_lost_long();
  else if (scenario == "spilled_fetch") spilled_fetch();
  else if (scenario == "small_arena") small_arena();
  else if (scenario == "named_owner") named_owner();
  else if (scenario == "named_user") named_user();
  else if (scenario == "refs_inside") refs_inside();
  else if (scenario == "refs_back") refs_back();
  else if (scenario == "actor_call_retried") actor_call_retried();
  else if (scenario == "leaves") leaves();
  else if (scenario == "scoped_first") scoped_first();
  else if (scenario == "scoped_second") scoped_second();
  else if (scenario == "from_nodes") from_nodes();
  else if (scenario == "handles_back") handles_back();
  else if (scenario == "actor_refs_lost") actor_refs_lost();
  else if (scenario == "exit_streaming") {
    // Returns from main (exit() stops the runtime) while long results still
    // stream in from a node: the threads landing them must not park.
    std::vector<manta::object_ref<std::vector<char>>> results;
    for (int i = 0; i < 60; ++i) results.push_back(manta::task(eight_mib).resources({{"special", 0.1}}).remote(i));
    check(manta::get(results[0], std::chrono::seconds(60)).size() == std::size_t{8} << 20, "the first came");
    std::fflush(stdout);
    return failures == 0 ? 0 : 1;
  } else return 2;
  manta::shutdown();
  return failures == 0 ? 0 : 1;
}

// manta_bench: Google Benchmark suites for the figures of design.md section 7,
// each beside a baseline (a plain fork+pipe round trip, the sequential loop).
//
//   build/bench/manta_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include <benchmark/benchmark.h>

#include <manta/manta.hpp>

#include "kernels.hpp"

namespace {

int identity(int x) { return x; }
long inc(long x) { return x + 1; }
double sum_span(std::span<const double> xs) { return std::accumulate(xs.begin(), xs.end(), 0.0); }
/// steady_clock now, in µs (the same clock in every process of the node).
double now_us(int) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

using manta_bench::moving_average_rows;
using manta_bench::n;
using manta_bench::random_matrix;
manta::buffer<double> moving_average_block(std::span<const double> m, int first, int rows) {
  auto out = manta::make_buffer<double>(static_cast<std::size_t>(rows) * n);
  moving_average_rows(m.data(), first, rows, out.data());
  return out;
}
MANTA_REMOTE(identity, inc, sum_span, now_us, moving_average_block);

void ensure_runtime() {
  if (!manta::is_initialized()) manta::init({.num_workers = 2});
}

// ---- start and stop

void init_shutdown(benchmark::State& state) {
  manta::shutdown();
  for (auto _ : state) {
    manta::init({.num_workers = 2});
    manta::shutdown();
  }
}
BENCHMARK(init_shutdown)->UseRealTime()->Unit(benchmark::kMillisecond);

// ---- one task, submit and get

void baseline_fork_pipe_round_trip(benchmark::State& state) {
  int to[2], from[2];
  if (::pipe(to) || ::pipe(from)) state.SkipWithError("pipe");
  pid_t child = ::fork();
  if (child == 0) {
    ::close(to[1]);
    ::close(from[0]);
    int v;
    while (::read(to[0], &v, sizeof v) == sizeof v)
      if (::write(from[1], &v, sizeof v) != sizeof v) break;
    ::_exit(0);
  }
  ::close(to[0]);
  ::close(from[1]);
  int v = 0;
  for (auto _ : state) {
    if (::write(to[1], &v, sizeof v) != sizeof v || ::read(from[0], &v, sizeof v) != sizeof v)
      state.SkipWithError("io");
  }
  ::close(to[1]);  // the child sees EOF and exits
  ::waitpid(child, nullptr, 0);
  ::close(from[0]);
}
BENCHMARK(baseline_fork_pipe_round_trip)->Unit(benchmark::kMicrosecond);

void task_round_trip(benchmark::State& state) {
  ensure_runtime();
  int i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(manta::get(manta::task(identity).remote(i++)));
}
BENCHMARK(task_round_trip)->UseRealTime()->Unit(benchmark::kMicrosecond);

// ---- many tasks, submitted one by one, then gathered

/// Submits state.range(0) tasks made by `submit(i)` one by one, then gets them all.
template <typename Submit>
void submitted_then_gathered(benchmark::State& state, Submit submit) {
  ensure_runtime();
  const int count = static_cast<int>(state.range(0));
  std::vector<manta::object_ref<int>> refs;
  refs.reserve(static_cast<std::size_t>(count));
  for (auto _ : state) {
    refs.clear();
    for (int i = 0; i < count; ++i) refs.push_back(submit(i));
    long s = 0;
    for (auto& r : refs) s += manta::get(r);
    benchmark::DoNotOptimize(s);
  }
  state.SetItemsProcessed(state.iterations() * count);
}

void tasks_in_bulk(benchmark::State& state) {
  submitted_then_gathered(state, [](int i) { return manta::task(identity).remote(i); });
}
BENCHMARK(tasks_in_bulk)->Arg(100000)->UseRealTime()->Unit(benchmark::kMillisecond);

// The same asking half a CPU: no longer default tasks, each waits for a free
// worker and lets later ones pass (the dispatch scan of the ready queue).
void tasks_asking_half_a_cpu_in_bulk(benchmark::State& state) {
  submitted_then_gathered(state, [](int i) { return manta::task(identity).num_cpus(0.5).remote(i); });
}
BENCHMARK(tasks_asking_half_a_cpu_in_bulk)->Arg(20000)->UseRealTime()->Unit(benchmark::kMillisecond);

// ---- tasks submitting tasks

/// Submits `count` children from inside a task, then gathers them.
long fan_out(int count) {
  std::vector<manta::object_ref<int>> refs;
  refs.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) refs.push_back(manta::task(identity).remote(i));
  long s = 0;
  for (auto& r : refs) s += manta::get(r);
  return s;
}
/// How long a child takes to start while its parent keeps computing (spins).
double child_start_us() {
  auto t0 = std::chrono::steady_clock::now();
  auto child = manta::task(now_us).remote(0);
  // Busy for 2 ms without calling manta, as a parent doing its own share would.
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(2)) {
  }
  return manta::get(child) - std::chrono::duration<double, std::micro>(t0.time_since_epoch()).count();
}
MANTA_REMOTE(fan_out, child_start_us);

void nested_fan_out(benchmark::State& state) {
  ensure_runtime();
  const int count = static_cast<int>(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(manta::get(manta::task(fan_out).remote(count)));
  state.SetItemsProcessed(state.iterations() * count);
}
BENCHMARK(nested_fan_out)->Arg(10000)->UseRealTime()->Unit(benchmark::kMillisecond);

void nested_child_start(benchmark::State& state) {
  ensure_runtime();
  double total = 0;
  for (auto _ : state) total += manta::get(manta::task(child_start_us).remote());
  state.counters["child_start_us"] = total / static_cast<double>(state.iterations());
}
BENCHMARK(nested_child_start)->UseRealTime()->Unit(benchmark::kMillisecond);

// ---- objects

// Put into arena pages touched before (steady state). The first touch of shared
// pages runs at 1.5-2 GB/s here (page faults); see W5 in manta_workloads.
void put(benchmark::State& state) {
  ensure_runtime();
  std::vector<char> value(static_cast<std::size_t>(state.range(0)), 'x');
  manta::put(value);  // warm-up
  for (auto _ : state) benchmark::DoNotOptimize(manta::put(value));
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(put)->Arg(1 << 10)->Arg(1 << 20)->Arg(100 << 20)->Unit(benchmark::kMicrosecond);

void get_view(benchmark::State& state) {
  ensure_runtime();
  auto ref = manta::put(std::vector<char>(static_cast<std::size_t>(state.range(0)), 'x'));
  for (auto _ : state) {
    auto v = manta::get_view(ref);
    benchmark::DoNotOptimize(v.data());
  }
}
BENCHMARK(get_view)->Arg(1 << 10)->Arg(1 << 20)->Arg(100 << 20)->Unit(benchmark::kMicrosecond);

// ---- pool.map over a million trivial items, beside the sequential loop

void baseline_sequential_map(benchmark::State& state) {
  std::vector<long> xs(1000000);
  std::iota(xs.begin(), xs.end(), 0L);
  for (auto _ : state) {
    std::vector<long> ys(xs.size());
    std::transform(xs.begin(), xs.end(), ys.begin(), inc);
    benchmark::DoNotOptimize(ys.data());
  }
  state.SetItemsProcessed(state.iterations() * 1000000);
}
BENCHMARK(baseline_sequential_map)->Unit(benchmark::kMillisecond);

void pool_map(benchmark::State& state) {
  ensure_runtime();
  manta::pool p;
  std::vector<long> xs(1000000);
  std::iota(xs.begin(), xs.end(), 0L);
  for (auto _ : state) benchmark::DoNotOptimize(p.map(inc, xs));
  state.SetItemsProcessed(state.iterations() * 1000000);
}
BENCHMARK(pool_map)->UseRealTime()->Unit(benchmark::kMillisecond);

// ---- moving average, 1000 x 1000, beside the sequential loop

void baseline_sequential_moving_average(benchmark::State& state) {
  auto m = random_matrix();
  std::vector<double> out(m.size());  // allocated once: the fastest sequential loop
  for (auto _ : state) {
    moving_average_rows(m.data(), 0, n, out.data());
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(baseline_sequential_moving_average)->Unit(benchmark::kMillisecond);

void moving_average(benchmark::State& state) {
  ensure_runtime();
  auto shared = manta::put(random_matrix());
  for (auto _ : state) {
    auto a = manta::task(moving_average_block).remote(shared, 0, n / 2);
    auto b = manta::task(moving_average_block).remote(shared, n / 2, n / 2);
    auto va = manta::get_view(a);
    auto vb = manta::get_view(b);
    benchmark::DoNotOptimize(va.data());
    benchmark::DoNotOptimize(vb.data());
  }
}
BENCHMARK(moving_average)->UseRealTime()->Unit(benchmark::kMillisecond);

// ---- actors

class Counter {
 public:
  int increment() { return ++value_; }
  int add(int n) { return value_ += n; }
  double sum(std::span<const double> xs) const { return std::accumulate(xs.begin(), xs.end(), 0.0); }

 private:
  int value_ = 0;
};
MANTA_ACTOR(Counter, &Counter::increment, &Counter::add, &Counter::sum);

/// Calls its own actor `calls` times, then gathers (one caller of n:n).
int call_own_actor(manta::actor_handle<Counter> c, int calls) {
  std::vector<manta::object_ref<int>> refs;
  refs.reserve(static_cast<std::size_t>(calls));
  for (int i = 0; i < calls; ++i) refs.push_back(c.task(&Counter::increment).remote());
  return manta::get(refs.back());
}
MANTA_REMOTE(call_own_actor);

// Creating an actor: its process forked by the zygote, its constructor run, one call answered.
void actor_creation(benchmark::State& state) {
  ensure_runtime();
  for (auto _ : state) {
    auto c = manta::actor<Counter>().remote();
    benchmark::DoNotOptimize(manta::get(c.task(&Counter::increment).remote()));
  }
}
BENCHMARK(actor_creation)->UseRealTime()->Unit(benchmark::kMicrosecond);

void actor_round_trip(benchmark::State& state) {
  ensure_runtime();
  auto c = manta::actor<Counter>().remote();
  for (auto _ : state) benchmark::DoNotOptimize(manta::get(c.task(&Counter::increment).remote()));
}
BENCHMARK(actor_round_trip)->UseRealTime()->Unit(benchmark::kMicrosecond);

// 1:1 and 1:n: one caller, calls in bulk to one actor or spread over n, then gathered.
void actor_calls_in_bulk(benchmark::State& state) {
  ensure_runtime();
  const int actors = static_cast<int>(state.range(0)), calls = 100000;
  std::vector<manta::actor_handle<Counter>> cs;
  for (int i = 0; i < actors; ++i) cs.push_back(manta::actor<Counter>().remote());
  std::vector<manta::object_ref<int>> refs;
  refs.reserve(calls);
  for (auto _ : state) {
    refs.clear();
    for (int i = 0; i < calls; ++i) refs.push_back(cs[i % actors].task(&Counter::increment).remote());
    long s = 0;
    for (auto& r : refs) s += manta::get(r);
    benchmark::DoNotOptimize(s);
  }
  state.SetItemsProcessed(state.iterations() * calls);
}
BENCHMARK(actor_calls_in_bulk)->Arg(1)->Arg(4)->UseRealTime()->Unit(benchmark::kMillisecond);

// n:n: n caller tasks, each calling its own actor.
void actor_calls_n_to_n(benchmark::State& state) {
  ensure_runtime();
  const int n = static_cast<int>(state.range(0)), calls = 20000;
  std::vector<manta::actor_handle<Counter>> cs;
  for (int i = 0; i < n; ++i) cs.push_back(manta::actor<Counter>().remote());
  for (auto _ : state) {
    std::vector<manta::object_ref<int>> callers;
    for (int i = 0; i < n; ++i) callers.push_back(manta::task(call_own_actor).remote(cs[i], calls));
    benchmark::DoNotOptimize(manta::get(callers));
  }
  state.SetItemsProcessed(state.iterations() * n * calls);
}
BENCHMARK(actor_calls_n_to_n)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// A call whose argument is a stored 1 MB array, read in place by the actor.
void actor_call_with_ref(benchmark::State& state) {
  ensure_runtime();
  auto c = manta::actor<Counter>().remote();
  auto data = manta::put(std::vector<double>(1 << 17, 1.0));
  for (auto _ : state) benchmark::DoNotOptimize(manta::get(c.task(&Counter::sum).remote(data)));
}
BENCHMARK(actor_call_with_ref)->UseRealTime()->Unit(benchmark::kMicrosecond);

// ---- spilling: a 64 MiB arena kept full of 16 MiB objects, so each put writes
// the least recently used one to the spill file and each get_view of the oldest
// reads it back (and spills another).

void spill_put_and_restore(benchmark::State& state) {
  manta::shutdown();
  manta::init({.num_workers = 2, .object_store_bytes = 64 << 20, .log_dir = "/tmp/manta-bench"});
  std::vector<char> value(16 << 20, 'x');
  std::vector<manta::object_ref<std::vector<char>>> refs;
  for (int i = 0; i < 8; ++i) refs.push_back(manta::put(value));  // half of them on disk
  std::size_t oldest = 0;
  for (auto _ : state) {
    refs.push_back(manta::put(value));  // spills one
    auto v = manta::get_view(refs[oldest++]);  // spilled: restores it, spilling another
    benchmark::DoNotOptimize(v.data());
  }
  state.SetBytesProcessed(state.iterations() * 2 * std::int64_t{16 << 20});
  manta::shutdown();
}
BENCHMARK(spill_put_and_restore)->UseRealTime()->Unit(benchmark::kMillisecond);

// ---- 1 GB last: it makes the driver large, which makes later forks slower

void put_1gb(benchmark::State& state) {
  ensure_runtime();
  std::vector<char> value(std::size_t{1} << 30, 'x');
  manta::put(value);  // warm-up, as for put above
  for (auto _ : state) benchmark::DoNotOptimize(manta::put(value));
  state.SetBytesProcessed(state.iterations() * (std::int64_t{1} << 30));
}
BENCHMARK(put_1gb)->Unit(benchmark::kMillisecond)->Iterations(5);

void get_view_1gb(benchmark::State& state) {
  ensure_runtime();
  auto ref = manta::put(std::vector<char>(std::size_t{1} << 30, 'x'));
  for (auto _ : state) {
    auto v = manta::get_view(ref);
    benchmark::DoNotOptimize(v.data());
  }
}
BENCHMARK(get_view_1gb)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  manta::shutdown();
}

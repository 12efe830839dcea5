// wire_codec: the bridge's task frame through its own codec (task_wire.hpp:
// fixed-width fields, a bounds-checked reader) and through cereal's binary
// archive, the alternative issue 31 names. Same fields, same task; each side
// encodes a body and decodes it back, as a driver and a node do per task.
//   build/bench/manta_wire_codec --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <cstdint>
#include <istream>
#include <sstream>
#include <streambuf>
#include <string>

#include <benchmark/benchmark.h>
#include <cereal/archives/binary.hpp>
#include <cereal/types/map.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>

#include "bridge/task_wire.hpp"

namespace manta::bridge {

// cereal's view of the same fields (non-intrusive, found by ADL).
template <class Archive>
void serialize(Archive& a, remote_task::handle& h) {
  a(h.id, h.key, h.class_tag, h.label);
}

template <class Archive>
void serialize(Archive& a, remote_task& t) {
  a(t.id, t.function, t.name, t.mode, t.num_returns, t.arg_count, t.num_cpus, t.num_gpus, t.resources, t.memory,
    t.max_retries, t.retry_exceptions, t.timeout_ns, t.max_calls, t.actor, t.max_restarts, t.max_task_retries,
    t.max_concurrency, t.actor_name, t.class_tag, t.objects, t.handles, t.origin, t.spilled, t.node, t.object, t.args);
}

}  // namespace manta::bridge

namespace {

using manta::bridge::remote_task;

/// A small task as the cluster benchmark sends them: a plain call, one small
/// argument, no refs (`objects` > 0: that many refs to other drivers' objects).
remote_task a_task(int objects) {
  remote_task t;
  t.id = 123456;
  t.function = 0x9e3779b97f4a7c15ull;
  t.name = "add_one";
  t.num_cpus = 1;
  t.origin = "driver-3";
  t.arg_count = 1;
  t.args = std::string(24, 'a');  // (an int's blob: header and value)
  for (int i = 0; i < objects; ++i) t.objects.push_back("driver-3/" + std::string(32, 'f'));
  return t;
}

/// Reads a string in place: the input cereal reads from, no copy of the body.
struct view_buffer : std::streambuf {
  explicit view_buffer(const std::string& s) {
    char* p = const_cast<char*>(s.data());
    setg(p, p, p + s.size());
  }
};

void own_codec(benchmark::State& state) {
  const remote_task t = a_task(static_cast<int>(state.range(0)));
  std::size_t bytes = 0;
  for (auto _ : state) {
    std::string body = manta::bridge::encode_task(t);
    bytes = body.size();
    remote_task back = manta::bridge::decode_task(std::move(body));
    benchmark::DoNotOptimize(back);
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}

void cereal_binary(benchmark::State& state) {
  const remote_task t = a_task(static_cast<int>(state.range(0)));
  std::size_t bytes = 0;
  for (auto _ : state) {
    std::ostringstream out;
    {
      cereal::BinaryOutputArchive archive(out);
      archive(t);
    }
    const std::string body = std::move(out).str();
    bytes = body.size();
    view_buffer in(body);
    std::istream stream(&in);
    remote_task back;
    {
      cereal::BinaryInputArchive archive(stream);
      archive(back);
    }
    benchmark::DoNotOptimize(back);
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}

BENCHMARK(own_codec)->Arg(0)->Arg(8);
BENCHMARK(cereal_binary)->Arg(0)->Arg(8);

}  // namespace

BENCHMARK_MAIN();

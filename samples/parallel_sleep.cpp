// parallel_sleep: four tasks that each sleep one second run at the same time on
// four workers, so the whole batch takes about one second, not four.
#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>
#include <vector>

#include <manta/manta.hpp>

using clock_type = std::chrono::steady_clock;

/// Sleeps one second; returns when it started and ended (ns on the shared steady clock).
std::pair<long long, long long> sleep_one_second(int) {
  auto start = clock_type::now().time_since_epoch().count();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  return {start, clock_type::now().time_since_epoch().count()};
}
MANTA_REMOTE(sleep_one_second);

int main() {
  manta::init({.num_workers = 4});
  auto t0 = clock_type::now();
  std::vector<manta::object_ref<std::pair<long long, long long>>> refs;
  for (int i = 0; i < 4; ++i) refs.push_back(manta::task(sleep_one_second).remote(i));
  auto spans = manta::get(refs);
  double elapsed = std::chrono::duration<double>(clock_type::now() - t0).count();
  // They ran in parallel if every task started before any of them ended.
  long long last_start = 0, first_end = spans[0].second;
  for (auto& [s, e] : spans) {
    last_start = std::max(last_start, s);
    first_end = std::min(first_end, e);
  }
  std::printf("4 tasks of 1 s on 4 workers took %.2f s\n", elapsed);
  std::printf("ran in parallel: %s\n", last_start < first_end ? "yes" : "no");
  manta::shutdown();
  return last_start < first_end ? 0 : 1;
}

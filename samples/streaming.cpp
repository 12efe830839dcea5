// streaming: results that arrive while the work runs. A streaming task emits a
// Monte-Carlo estimate of pi batch by batch (Ray's streaming generators); the
// driver prints each one as it comes. Then two tasks feed a manta::queue that
// the driver drains as a consumer would.
#include <cmath>
#include <cstdio>
#include <random>

#include <manta/manta.hpp>

struct estimate {
  long inside = 0, total = 0;
  template <class Archive>
  void serialize(Archive& archive) {
    archive(inside, total);
  }
};

// Emits the running count after each batch of `per_batch` random points.
void estimate_pi(manta::emitter<estimate>& out, int batches, long per_batch, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  estimate e;
  for (int b = 0; b < batches; ++b) {
    for (long i = 0; i < per_batch; ++i) {
      double x = u(rng), y = u(rng);
      e.inside += x * x + y * y <= 1;
    }
    e.total += per_batch;
    out.emit(e);
  }
}

// Puts the squares of [first, first + n) on the queue.
int produce_squares(manta::queue<long> q, long first, int n) {
  for (long i = first; i < first + n; ++i) q.put(i * i);
  return n;
}
MANTA_REMOTE(estimate_pi, produce_squares);

int main() {
  manta::init({.num_workers = 2});
  bool ok = true;

  int seen = 0;
  double pi = 0;
  for (auto& r : manta::task(estimate_pi).remote(5, 200000L, 42u)) {
    estimate e = manta::get(r);
    pi = 4.0 * static_cast<double>(e.inside) / static_cast<double>(e.total);
    std::printf("after %7ld points: pi ~ %.4f\n", e.total, pi);
    ++seen;
  }
  ok = ok && seen == 5 && std::abs(pi - M_PI) < 0.01;

  manta::queue<long> q(16);  // bounded: producers wait while the driver is behind
  auto a = manta::task(produce_squares).remote(q, 0L, 50);
  auto b = manta::task(produce_squares).remote(q, 50L, 50);
  long sum = 0;
  for (int i = 0; i < 100; ++i) sum += q.get(std::chrono::seconds(30));
  std::printf("queue: 100 squares from 2 producers, sum %ld\n", sum);
  ok = ok && manta::get(a) + manta::get(b) == 100 && sum == 328350;

  manta::shutdown();
  std::printf("results %s\n", ok ? "match" : "DIFFER");
  return ok ? 0 : 1;
}

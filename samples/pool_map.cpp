// pool_map: manta::pool as a drop-in for multiprocessing.Pool: map over a million
// small inputs (chunked, so it costs little more than the work), starmap over
// pairs, and imap_unordered to consume results as they finish.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <tuple>
#include <vector>

#include <manta/manta.hpp>

long square(long x) { return x * x; }
double hypotenuse(double a, double b) { return std::sqrt(a * a + b * b); }
bool is_prime(long n) {
  if (n < 2) return false;
  for (long d = 2; d * d <= n; ++d)
    if (n % d == 0) return false;
  return true;
}
MANTA_REMOTE(square, hypotenuse, is_prime);

int main() {
  manta::init({.num_workers = 2});
  manta::pool pool;

  std::vector<long> xs(1000000);
  std::iota(xs.begin(), xs.end(), 0L);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<long> squares = pool.map(square, xs);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  bool ok = squares.size() == xs.size() && squares[999999] == 999999L * 999999L;
  std::printf("map: %zu squares in %.1f ms (%.1f M items/s)\n", squares.size(), s * 1e3,
              squares.size() / s / 1e6);

  std::vector<std::tuple<double, double>> sides{{3, 4}, {5, 12}, {8, 15}};
  auto h = pool.starmap(hypotenuse, sides);
  std::printf("starmap: %g %g %g\n", h[0], h[1], h[2]);
  ok = ok && h[0] == 5 && h[1] == 13 && h[2] == 17;

  std::vector<long> candidates(200000);
  std::iota(candidates.begin(), candidates.end(), 1L);
  long primes = 0;
  for (bool p : pool.imap_unordered(is_prime, candidates)) primes += p;
  std::printf("imap_unordered: %ld primes below 200001\n", primes);
  ok = ok && primes == 17984;
  manta::shutdown();
  std::printf("results %s\n", ok ? "match" : "DIFFER");
  return ok ? 0 : 1;
}

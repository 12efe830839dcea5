// first_touch: how fast a sequence of large puts runs when each lands on arena
// pages never written before, against what the machine allows.
//
//   memcpy, fresh mapping   a plain memcpy into a new shared mapping: every page
//                           faults in (the machine's fault limit)
//   memcpy, touched         the same copy again: memory speed
//   put, back to back       manta::put of one vector after another, all kept
//                           alive, so each lands beyond the last (warming on/off)
//   put, idle between       the same with the program busy elsewhere for a while
//                           after each put (the runtime idle meanwhile)
//
// Each round starts a new runtime (a new arena) per put variant; the variants
// rotate their order from round to round. Prints the median GB/s per variant.
//
//   manta_first_touch [mb=100] [puts=6] [rounds=5] [idle_ms=100]
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <manta/manta.hpp>

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct variant {
  std::string name;
  std::function<std::vector<double>()> run;  // GB/s of each copy
  std::vector<double> rates;
};

}  // namespace

int main(int argc, char** argv) {
  const std::size_t mb = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 100;
  const int puts = argc > 2 ? std::atoi(argv[2]) : 6;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  const int idle_ms = argc > 4 ? std::atoi(argv[4]) : 100;
  const std::size_t bytes = mb << 20;
  std::vector<char> source(bytes);
  for (std::size_t i = 0; i < bytes; ++i) source[i] = static_cast<char>(i * 131);

  auto memcpy_fresh = [&](bool twice) {
    std::vector<double> rates;
    for (int i = 0; i < puts; ++i) {
      int fd = ::memfd_create("first-touch", MFD_CLOEXEC);
      if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) std::abort();
      void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      ::close(fd);
      if (p == MAP_FAILED) std::abort();
      auto start = clock_type::now();
      std::memcpy(p, source.data(), bytes);
      if (twice) {
        start = clock_type::now();
        std::memcpy(p, source.data(), bytes);
      }
      rates.push_back(static_cast<double>(bytes) / seconds_since(start) / 1e9);
      ::munmap(p, bytes);
    }
    return rates;
  };
  auto puts_in_new_runtime = [&](bool warming, int idle) {
    ::setenv("MANTA_ARENA_WARM_MB", warming ? "256" : "0", 1);
    manta::options o;
    o.num_workers = 1;
    manta::init(o);
    std::vector<manta::object_ref<std::vector<char>>> kept;
    std::vector<double> rates;
    for (int i = 0; i < puts; ++i) {
      // The program computes elsewhere meanwhile (a sleep stands for it): the
      // runtime is idle, as it is between the steps of a real job.
      if (idle > 0) std::this_thread::sleep_for(std::chrono::milliseconds(idle));
      auto start = clock_type::now();
      kept.push_back(manta::put(source));
      rates.push_back(static_cast<double>(bytes) / seconds_since(start) / 1e9);
    }
    kept.clear();
    manta::shutdown();
    return rates;
  };

  std::vector<variant> variants = {
      {"memcpy, fresh mapping", [&] { return memcpy_fresh(false); }, {}},
      {"memcpy, touched", [&] { return memcpy_fresh(true); }, {}},
      {"put, back to back, warming off", [&] { return puts_in_new_runtime(false, 0); }, {}},
      {"put, back to back, warming on", [&] { return puts_in_new_runtime(true, 0); }, {}},
      {"put, idle between, warming off", [&] { return puts_in_new_runtime(false, idle_ms); }, {}},
      {"put, idle between, warming on", [&] { return puts_in_new_runtime(true, idle_ms); }, {}},
  };
  for (int r = 0; r < rounds; ++r)
    for (std::size_t k = 0; k < variants.size(); ++k) {
      variant& v = variants[(k + static_cast<std::size_t>(r)) % variants.size()];
      for (double rate : v.run()) v.rates.push_back(rate);
    }

  std::printf("%zu MB per copy, %d copies in a row, %d rounds, idle %d ms between puts; medians\n\n", mb,
              puts, rounds, idle_ms);
  const double limit = median(variants[0].rates);
  std::printf("| variant | GB/s | / fault limit | first copy of a sequence GB/s |\n|---|---|---|---|\n");
  for (auto& v : variants) {
    std::vector<double> firsts;
    for (std::size_t i = 0; i < v.rates.size(); i += static_cast<std::size_t>(puts)) firsts.push_back(v.rates[i]);
    std::printf("| %s | %.2f | %.2f | %.2f |\n", v.name.c_str(), median(v.rates), median(v.rates) / limit,
                median(firsts));
  }
}

// differential: one compute-bound kernel run four ways in the same process, in
// alternating order, so that their ratios are measured side by side:
//
//   threads   N std::threads in this process, one block of rows each
//   forked    N processes forked by hand before the runtime starts, reading the
//             matrix from a shared mapping and told what to do over pipes (the
//             least any multi-process runtime can cost)
//   manta/N   N manta tasks, one block each (span in, buffer out)
//   manta/100 100 manta tasks of row blocks
//
// Beside the wall time it prints where the time went: the kernel's own time
// summed over blocks against the sequential loop's (a slower kernel in a worker
// shows here), the lag before the first block starts and after the last one
// ends, and the CPU time the driver and the other processes used.
//
//   manta_differential [workers=2] [rounds=11] [rows=4000] [cols=1000] [window=100] [only=name]
//
// `only` keeps the threads and one other variant (to profile it alone).
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <manta/manta.hpp>

#include "kernels.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

double now_ns() {
  return static_cast<double>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now().time_since_epoch()).count());
}

constexpr int trailer = 4;  // entry, start, end, pid

/// One block's output followed by its start and end (steady-clock ns, exact
/// below 2^53) and the pid of the process that ran it.
manta::buffer<double> block_task(std::span<const double> m, int cols, int win, int first, int rows) {
  const double entry = now_ns();
  auto out = manta::make_buffer<double>(static_cast<std::size_t>(rows) * cols + trailer);
  double t0 = now_ns();
  manta_bench::window_average_rows(m.data(), cols, win, first, rows, out.data());
  out[out.size() - 4] = entry;
  out[out.size() - 3] = t0;
  out[out.size() - 2] = now_ns();
  out[out.size() - 1] = ::getpid();
  return out;
}
MANTA_REMOTE(block_task);

struct span_ns {
  double start, end;
  double pid = 0;  ///< where it ran, when known
  double entry = 0;  ///< when the function was entered (before its output was allocated)
};

/// CPU seconds (user + system) used so far by this process.
double self_cpu_s() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto s = [](timeval t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

/// CPU seconds used so far by every live descendant of this process (workers,
/// zygote, forked children), read from /proc.
double descendants_cpu_s() {
  std::map<int, int> parent;
  std::map<int, double> cpu;
  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  for (const auto& d : std::filesystem::directory_iterator("/proc")) {
    const std::string name = d.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(d.path() / "stat");
    std::string line;
    if (!std::getline(f, line)) continue;
    auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    // Fields after the command: state ppid ... utime(14) stime(15), counted from 1.
    std::vector<std::string> fields;
    std::size_t at = close + 2;
    while (at < line.size()) {
      auto space = line.find(' ', at);
      if (space == std::string::npos) space = line.size();
      fields.push_back(line.substr(at, space - at));
      at = space + 1;
    }
    if (fields.size() < 13) continue;
    int pid = std::stoi(name);
    parent[pid] = std::stoi(fields[1]);
    cpu[pid] = (std::stod(fields[11]) + std::stod(fields[12])) / tick;
  }
  const int self = ::getpid();
  double sum = 0;
  for (auto& [pid, c] : cpu) {
    for (int p = parent[pid]; p > 1; p = parent.count(p) ? parent[p] : 0)
      if (p == self) {
        sum += c;
        break;
      }
  }
  return sum;
}

/// N processes forked before the runtime's threads exist. Each reads a command
/// (first row, rows, slot) from its pipe, computes into the shared output, records
/// its timings in the shared table and answers with one byte.
class forked_pool {
 public:
  struct command {
    int first, rows, slot;
  };

  forked_pool(int workers, const std::vector<double>& matrix, int cols, int win) : cols_(cols) {
    bytes_ = matrix.size() * sizeof(double);
    void* p = ::mmap(nullptr, 2 * bytes_ + 4096 * sizeof(span_ns), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) std::perror("mmap"), std::exit(1);
    in_ = static_cast<double*>(p);
    out_ = in_ + matrix.size();
    spans_ = reinterpret_cast<span_ns*>(out_ + matrix.size());
    std::memcpy(in_, matrix.data(), bytes_);
    std::memset(out_, 0, bytes_);  // touched once, like the threads' output
    for (int w = 0; w < workers; ++w) {
      int down[2], up[2];
      if (::pipe(down) != 0 || ::pipe(up) != 0) std::perror("pipe"), std::exit(1);
      pid_t pid = ::fork();
      if (pid == 0) {
        for (auto& c : children_) ::close(c.to), ::close(c.from);  // or the others never see EOF
        ::close(down[1]);
        ::close(up[0]);
        command c;
        while (::read(down[0], &c, sizeof c) == sizeof c) {
          spans_[c.slot].start = now_ns();
          manta_bench::window_average_rows(in_, cols, win, c.first, c.rows,
                                           out_ + static_cast<std::size_t>(c.first) * cols);
          spans_[c.slot].end = now_ns();
          char one = 1;
          if (::write(up[1], &one, 1) != 1) ::_exit(1);
        }
        ::_exit(0);
      }
      ::close(down[0]);
      ::close(up[1]);
      children_.push_back({pid, down[1], up[0]});
    }
  }

  ~forked_pool() {
    for (auto& c : children_) ::close(c.to), ::close(c.from);
    for (auto& c : children_) ::waitpid(c.pid, nullptr, 0);
  }

  /// Block b of `blocks` goes to child b % N; waits for all of them.
  void run(int rows, int blocks) {
    for (int b = 0; b < blocks; ++b) {
      command c{b * rows / blocks, (b + 1) * rows / blocks - b * rows / blocks, b};
      if (::write(children_[b % children_.size()].to, &c, sizeof c) != sizeof c) std::exit(1);
    }
    for (int b = 0; b < blocks; ++b) {
      char one;
      if (::read(children_[b % children_.size()].from, &one, 1) != 1) std::exit(1);
    }
  }

  const double* out() const { return out_; }
  const span_ns* spans() const { return spans_; }

 private:
  struct child {
    pid_t pid;
    int to, from;
  };
  int cols_;
  std::size_t bytes_;
  double *in_, *out_;
  span_ns* spans_;
  std::vector<child> children_;
};

struct sample {
  double wall_ms, kernel_ms, start_lag_us, end_lag_us, gap_us, driver_cpu_ms, others_cpu_ms;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int workers = argc > 1 ? std::atoi(argv[1]) : 2;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 11;
  const int rows = argc > 3 ? std::atoi(argv[3]) : 4000;
  const int cols = argc > 4 ? std::atoi(argv[4]) : 1000;
  const int win = argc > 5 ? std::atoi(argv[5]) : 100;
  const int many = std::min(100, rows);
  const std::string only = argc > 6 ? argv[6] : "";

  const auto matrix = manta_bench::random_matrix(static_cast<std::size_t>(rows) * cols);
  std::vector<double> expect(matrix.size()), threads_out(matrix.size());
  forked_pool forked(workers, matrix, cols, win);  // before any thread exists
  manta::init({.num_workers = workers});
  auto shared = manta::put(matrix);

  auto block = [&](int b, int blocks) {
    int first = b * rows / blocks;
    return std::pair{first, (b + 1) * rows / blocks - first};
  };

  // Each variant runs once and returns the block spans it saw; check() compares
  // its output with the sequential loop's.
  struct variant {
    std::string name;
    std::function<std::vector<span_ns>()> run;
    std::function<bool()> check;
    std::vector<sample> samples;
  };
  std::vector<manta::view<std::vector<double>>> views;  // manta's last results, kept to check them
  auto manta_run = [&](int blocks) {
    views.clear();  // the previous run's extents go back to the arena first
    std::vector<manta::object_ref<std::vector<double>>> parts;
    for (int b = 0; b < blocks; ++b) {
      auto [first, count] = block(b, blocks);
      parts.push_back(manta::task(block_task).remote(shared, cols, win, first, count));
    }
    for (auto& p : parts) views.push_back(manta::get_view(p));
    std::vector<span_ns> spans;
    for (auto& v : views) spans.push_back({v[v.size() - 3], v[v.size() - 2], v[v.size() - 1], v[v.size() - 4]});
    return spans;
  };
  auto manta_check = [&] {
    std::size_t at = 0;
    for (auto& v : views)
      for (std::size_t i = 0; i + trailer < v.size(); ++i)
        if (v[i] != expect[at++]) return false;
    return at == expect.size();
  };
  std::vector<variant> variants;
  variants.push_back({"threads", [&] {
                        std::vector<span_ns> spans(workers);
                        std::vector<std::thread> ts;
                        for (int b = 0; b < workers; ++b)
                          ts.emplace_back([&, b] {
                            auto [first, count] = block(b, workers);
                            spans[b].start = now_ns();
                            manta_bench::window_average_rows(matrix.data(), cols, win, first, count,
                                                             threads_out.data() + std::size_t(first) * cols);
                            spans[b].end = now_ns();
                          });
                        for (auto& t : ts) t.join();
                        return spans;
                      },
                      [&] { return threads_out == expect; }});
  variants.push_back({"forked", [&] {
                        forked.run(rows, workers);
                        return std::vector<span_ns>(forked.spans(), forked.spans() + workers);
                      },
                      [&] { return std::equal(expect.begin(), expect.end(), forked.out()); }});
  variants.push_back({"manta/" + std::to_string(workers), [&] { return manta_run(workers); }, manta_check});
  variants.push_back({"manta/" + std::to_string(many), [&] { return manta_run(many); }, manta_check});

  if (!only.empty())
    std::erase_if(variants, [&](const variant& v) { return v.name != "threads" && v.name != only; });

  std::vector<double> seq_ms;
  auto sequential = [&] {
    auto t0 = clock_type::now();
    manta_bench::window_average_rows(matrix.data(), cols, win, 0, rows, expect.data());
    seq_ms.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
  };
  sequential();  // warm-up of everything, checked once
  for (auto& v : variants) {
    v.run();
    if (!v.check()) {
      std::fprintf(stderr, "%s: results differ from the sequential loop\n", v.name.c_str());
      return 1;
    }
  }
  seq_ms.clear();

  // Rounds alternate the order (rotate by one each round) so drift hits all alike.
  std::vector<std::vector<double>> ratio_to_threads(variants.size()), speedup(variants.size());
  for (int r = 0; r < rounds; ++r) {
    sequential();
    const double seq = seq_ms.back();
    std::vector<double> wall(variants.size());
    for (std::size_t k = 0; k < variants.size(); ++k) {
      std::size_t i = (k + static_cast<std::size_t>(r)) % variants.size();
      auto& v = variants[i];
      const double others0 = descendants_cpu_s();  // reading /proc costs the driver milliseconds
      const double cpu0 = self_cpu_s();
      const double t0 = now_ns();
      auto spans = v.run();
      const double t1 = now_ns();
      const double cpu1 = self_cpu_s();
      const double others1 = descendants_cpu_s();
      sample s{};
      s.wall_ms = (t1 - t0) / 1e6;
      double first = spans[0].start, last = spans[0].end;
      for (auto& sp : spans) {
        s.kernel_ms += (sp.end - sp.start) / 1e6;
        first = std::min(first, sp.start);
        last = std::max(last, sp.end);
      }
      s.start_lag_us = (first - t0) / 1e3;
      // The median idle time of a process between two blocks it ran.
      std::map<double, std::vector<span_ns>> by_pid;
      for (auto& sp : spans)
        if (sp.pid != 0) by_pid[sp.pid].push_back(sp);
      std::vector<double> gaps;
      for (auto& [pid, list] : by_pid) {
        std::sort(list.begin(), list.end(), [](auto& a, auto& b) { return a.start < b.start; });
        for (std::size_t j = 1; j < list.size(); ++j) {
          gaps.push_back((list[j].start - list[j - 1].end) / 1e3);
          if (std::getenv("DIFF_GAPS") && gaps.back() > 500)
            std::fprintf(stderr, "  gap %.0f µs on %.0f at %.2f ms (its %zu-th block)\n", gaps.back(), pid,
                         (list[j - 1].end - t0) / 1e6, j);
        }
      }
      s.gap_us = median(gaps);
      if (std::getenv("DIFF_GAPS") && !gaps.empty()) {
        std::sort(gaps.begin(), gaps.end());
        std::fprintf(stderr, "%s gaps: n=%zu p50 %.0f p90 %.0f p99 %.0f max %.0f sum %.0f µs; per pid:", v.name.c_str(),
                     gaps.size(), gaps[gaps.size() / 2], gaps[gaps.size() * 9 / 10], gaps[gaps.size() * 99 / 100],
                     gaps.back(), std::accumulate(gaps.begin(), gaps.end(), 0.0));
        for (auto& [pid, list] : by_pid) {
          double k = 0;
          for (auto& sp : list) k += (sp.end - sp.start) / 1e6;
          std::fprintf(stderr, " %zu (kernel %.1f ms, %.0f..%.0f ms)", list.size(), k, (list.front().entry - t0) / 1e6,
                       (list.back().end - t0) / 1e6);
        }
        std::vector<double> allocs, entries;
        for (auto& [pid, list] : by_pid)
          for (std::size_t j = 0; j < list.size(); ++j) {
            allocs.push_back((list[j].start - list[j].entry) / 1e3);
            if (j) entries.push_back((list[j].entry - list[j - 1].end) / 1e3);
          }
        std::sort(allocs.begin(), allocs.end());
        std::sort(entries.begin(), entries.end());
        std::fprintf(stderr, "; make_buffer p50 %.0f p90 %.0f max %.0f sum %.0f; end to next entry p50 %.0f p90 %.0f max %.0f sum %.0f",
                     allocs[allocs.size() / 2], allocs[allocs.size() * 9 / 10], allocs.back(),
                     std::accumulate(allocs.begin(), allocs.end(), 0.0), entries[entries.size() / 2],
                     entries[entries.size() * 9 / 10], entries.back(), std::accumulate(entries.begin(), entries.end(), 0.0));
        std::fprintf(stderr, "\n");
      }
      s.end_lag_us = (t1 - last) / 1e3;
      s.driver_cpu_ms = (cpu1 - cpu0) * 1e3;
      s.others_cpu_ms = (others1 - others0) * 1e3;
      v.samples.push_back(s);
      wall[i] = s.wall_ms;
      speedup[i].push_back(seq / s.wall_ms);
    }
    for (std::size_t i = 0; i < variants.size(); ++i) ratio_to_threads[i].push_back(wall[0] / wall[i]);
  }
  bool ok = true;
  for (auto& v : variants) ok = ok && v.check();

  std::printf("window average, %d x %d, window %d, %d workers, medians of %d rounds (order rotated)\n", rows,
              cols, win, workers, rounds);
  std::printf("sequential: %.2f ms\n\n", median(seq_ms));
  std::printf("| variant | wall ms | speed-up | threads' wall / this | kernel time / sequential | "
              "first start lag µs | last end lag µs | gap between blocks µs | driver CPU ms | "
              "other processes' CPU ms |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (std::size_t i = 0; i < variants.size(); ++i) {
    auto& v = variants[i];
    auto col = [&](double sample::*m) {
      std::vector<double> xs;
      for (auto& s : v.samples) xs.push_back(s.*m);
      return median(xs);
    };
    std::vector<double> slowdown;
    for (std::size_t r = 0; r < v.samples.size(); ++r) slowdown.push_back(v.samples[r].kernel_ms / seq_ms[r]);
    std::printf("| %s | %.2f | %.2fx | %.3f | %.3f | %.0f | %.0f | %.0f | %.1f | %.1f |\n", v.name.c_str(),
                col(&sample::wall_ms), median(speedup[i]), median(ratio_to_threads[i]), median(slowdown),
                col(&sample::start_lag_us), col(&sample::end_lag_us), col(&sample::gap_us), col(&sample::driver_cpu_ms),
                col(&sample::others_cpu_ms));
  }
  std::printf("\nresults %s\n", ok ? "match" : "DIFFER");
  views.clear();
  manta::shutdown();
  return ok ? 0 : 1;
}

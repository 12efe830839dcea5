// options.hpp: the settings of manta::init.
#pragma once

#include <cstddef>
#include <map>
#include <string>

namespace manta {

/// Settings for `manta::init`; an aggregate, so `manta::init({.num_workers = 4})` works.
/// Fields are declared in the order design.md gives.
struct options {
  /// Worker processes in the local pool; 0 means one per CPU.
  int num_workers = 0;
  /// Size of the shared-memory object arena; 0 means 30% of RAM, capped by /dev/shm.
  std::size_t object_store_bytes = 0;
  /// GPUs this node offers; -1 means detect.
  int num_gpus = -1;
  /// Custom resources this node offers, e.g. {{"sensor", 2}}. "CPU" overrides the CPU count.
  std::map<std::string, double> resources;
  /// Head address to join a cluster (HOST:PORT); empty runs a single node.
  std::string address;
  /// Where logs and spilled objects go; empty means /tmp/manta.
  std::string log_dir;
  /// Make a second `init` a no-op instead of a usage_error.
  bool ignore_reinit = false;
  /// Run every task and actor method in the driver's process, on the thread
  /// that submits it, at once and one at a time: no worker process starts, so
  /// task code can be stepped through in a debugger (joblib's n_jobs=1). The
  /// API, the errors, resources and named actors keep their meaning.
  bool local_mode = false;
  /// Run once in every worker and actor host before its first task (as
  /// Pool(initializer=)); must be registered with MANTA_REMOTE. If it throws,
  /// every task sent to that process fails with a task_error saying so (an
  /// actor's constructor too), and the process is not restarted in a loop.
  void (*worker_setup)() = nullptr;
  /// Fraction of the machine's memory (or of the cgroup's limit) above which
  /// the runtime kills the process of the most recently started task, retriable
  /// ones first, before the kernel's OOM killer picks the driver; the task is
  /// retried under max_retries, then fails with out_of_memory_error. 0: off.
  double memory_threshold = 0.95;
  /// Long waits in the driver (get and wait of many refs, pool.map, imap) draw
  /// a progress bar on stderr: done/total, rate, elapsed time and ETA. Only
  /// while stderr is a terminal, and only once a wait has lasted 0.3 s; never
  /// in workers. MANTA_PROGRESS=1 turns it on too.
  bool progress = false;
};

}  // namespace manta

// runtime/spiller.hpp: the object store's disk work for the scheduler, on a
// thread of its own. A worker's request for room that only spilling can meet,
// and an object a task or a worker needs read back from the spill file, are
// posted here by the scheduler (under its lock, which the disk's work must not
// hold: a multi-gigabyte write stalled every API call, dispatch and worker
// message); the answer goes back through a callback that takes the lock.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ipc/messages.hpp"

namespace manta::runtime {

class object_store;
struct object_entry;

class spiller {
 public:
  struct job {
    enum class kind { room, restore };
    kind what = kind::room;
    // room: for the worker in `slot` (its process `generation`), its request.
    int slot = -1;
    std::uint64_t generation = 0, request = 0, size = 0;
    /// restore: the objects to read back and hold together (a task's stored
    /// arguments: one at a time, each brought back could spill the other); the
    /// job holds one count of each.
    std::vector<object_entry*> entries;
  };
  struct outcome {
    /// room: the extent taken for the request (no_offset: none). restore: 0
    /// when every entry was read back and pinned for the scheduler to take over.
    std::uint64_t offset = ipc::no_offset;
    std::size_t failed_at = 0;  ///< restore: the entry that could not be (none is pinned then)
    std::string error;  ///< why not (object_store_full's text, a read error)
    bool disk_failed = false;  ///< room: writing to the spill file failed (a full disk)
  };
  /// Called on the spiller's thread with each job done; it owns the outcome
  /// (an extent to hand on or give back, a pin and a count to drop).
  using answer_fn = std::function<void(const job&, const outcome&)>;

  spiller(object_store& store, answer_fn answer) : store_(store), answer_(std::move(answer)) {}
  ~spiller() { stop(); }
  /// Stops the thread (the job under way ends first, and is answered); jobs
  /// not done yet are dropped, and later posts too (their counts released).
  void stop();
  spiller(const spiller&) = delete;
  spiller& operator=(const spiller&) = delete;

  /// Queues `j` (the thread starts with the first: most programs never spill).
  /// Never waits for the disk.
  void post(job j);

 private:
  void run();

  object_store& store_;
  const answer_fn answer_;
  std::mutex mu_;
  std::condition_variable posted_;
  std::deque<job> jobs_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace manta::runtime

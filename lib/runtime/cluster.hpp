// runtime/cluster.hpp: this runtime's part in a cluster of several nodes (the
// TCP bridge, lib/bridge).
//
// A driver (MANTA_ADDRESS, or options.address) joins the head as a driver and
// keeps the node table the head sends. A task its own node cannot run (it asks
// for a resource only other nodes have) is sent to the head once its arguments
// are sealed, each argument as a value; the head places it on a node, and its
// outcome comes back through node_runtime::remote_finished.
//
// A node (MANTA_NODE) joins as a node and serves: each task the head sends is
// submitted to this runtime like any other (large arguments put into its own
// arena first), and its results are sent back once sealed.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <manta/detail/task_request.hpp>
#include <manta/nodes.hpp>

#include "bridge/membership.hpp"
#include "bridge/task_wire.hpp"
#include "ipc/failure.hpp"

namespace manta::runtime {

class node_runtime;

class cluster_driver {
 public:
  /// Joins the head at `address` as a driver.
  /// @throws bridge::join_error saying why it could not
  cluster_driver(node_runtime& rt, const std::string& address, const std::string& token,
                 std::map<std::string, double> resources);
  /// Leaves the cluster (the head drops this driver's tasks); waits for its threads.
  ~cluster_driver();
  cluster_driver(const cluster_driver&) = delete;
  cluster_driver& operator=(const cluster_driver&) = delete;

  /// Why no node of the cluster can run a task asking `o` (empty: one can). Any thread.
  std::string lacking(const detail::task_options& o) const;
  /// CPUs of the alive nodes that could run a task asking `o`, as joined
  /// (what runs there is not counted: the caller counts what it sent). Any thread.
  double spare_cpus(const detail::task_options& o) const;
  /// Queues `t` for the head; never blocks (called under the scheduler's mutex).
  /// @returns false once the cluster is gone (lost() says why)
  bool send(bridge::remote_task t);
  /// The nodes of the cluster, as the head last described them.
  std::vector<manta::node_info> nodes() const;
  /// Why the cluster is gone (its head lost, or the cluster stopped), or empty.
  std::string lost() const;

 private:
  void on_frame(bridge::frame&& f);
  void on_end(const std::string& why);
  void send_loop();

  node_runtime& rt_;
  mutable std::mutex mu_;  // table_, version_, lost_, queue_, stopping_
  std::condition_variable cv_;
  std::vector<manta::node_info> table_;
  std::uint64_t version_ = 0;
  std::string lost_;
  std::deque<bridge::remote_task> queue_;
  bool stopping_ = false;
  std::unique_ptr<bridge::node_link> link_;
  std::thread sender_;
};

/// MANTA_NODE: serves the cluster at `address` with `rt` until the cluster
/// stops (returns "") or the head is lost (returns why).
/// @throws bridge::join_error if it cannot join
std::string serve_as_node(node_runtime& rt, const std::string& address, const std::string& token);

/// A failure from another node as this one stores it.
ipc::error_info from_remote(const bridge::remote_error& e);

}  // namespace manta::runtime

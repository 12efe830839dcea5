// nodes.hpp: the nodes a program runs on. One node today; the TCP bridge fills
// in the others when several machines form a cluster.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace manta {

/// One node of the cluster, as `nodes()` lists it.
struct node_info {
  std::string id;       ///< as node_id() returns it on that node
  std::string address;  ///< the machine's host name (with a port once nodes are bridged)
  std::map<std::string, double> resources;  ///< its totals: CPU, GPU, custom
  bool alive = true;
};

/// The id of the node the caller runs on: the same in the driver and in every
/// task and actor of its runtime, new with every `init`.
/// @throws usage_error outside a runtime.
std::string node_id();

/// Every node of the cluster (one on a single machine), the caller's first.
/// @throws usage_error outside a runtime.
std::vector<node_info> nodes();

}  // namespace manta

// runtime/cluster_entry.hpp: how init finds the cluster layer (lib/cluster),
// which the runtime does not link. The layer defines manta_cluster_layer();
// a build without it (MANTA_ENABLE_BRIDGE=OFF) has the runtime's own
// definition (no_cluster_layer.cpp), which answers none: a single-node
// runtime that refuses a cluster's settings by name.
#pragma once

#include <memory>
#include <string>

#include <manta/options.hpp>

namespace manta::runtime {

class node_runtime;

/// What init does for a process that takes part in a cluster: a driver
/// (options.address, MANTA_ADDRESS), a node (MANTA_NODE), or a rank of a
/// launch (mpirun, srun). init calls these in this order.
class cluster_role {
 public:
  virtual ~cluster_role() = default;
  /// Why options.local_mode cannot go with this role.
  virtual std::string local_mode_refusal() const = 0;
  /// Under init's lock, before the runtime is made: what can be checked
  /// first (the cluster's token). @throws usage_error
  virtual void prepare(const options& opts) = 0;
  /// The runtime could not be made (`why`): tells whoever waits for this
  /// process (the other ranks of an MPI launch). Never throws.
  virtual void runtime_failed(const std::string& why) noexcept = 0;
  /// Joins the cluster, or leads the launch (`rt` made and current).
  /// @throws error (or usage_error) saying why it could not
  virtual void attach(node_runtime& rt) = 0;
  /// Whether this process serves as a node: init then never returns.
  virtual bool serves() const = 0;
  /// A node: serves until the cluster stops or its head is lost (saying
  /// why on stderr); the process's exit status.
  virtual int serve(node_runtime& rt) = 0;
  /// A node, after shutdown and before it exits.
  virtual void before_exit() noexcept = 0;
};

/// The cluster layer, as init sees it.
struct cluster_layer {
  /// What the environment and `opts` make of this process in a cluster, or
  /// null if nothing. Called before init's lock: a rank of a launch may wait
  /// here for rank 0. @throws usage_error
  std::unique_ptr<cluster_role> (*role_of)(const options& opts);
};

}  // namespace manta::runtime

/// The cluster layer linked into this program, or null in a build without
/// one. Nothing but the runtime names it, so `manta`'s link options ask the
/// linker for it from the start (-Wl,--undefined); a link without the layer
/// fails rather than run without the cluster.
extern "C" const manta::runtime::cluster_layer* manta_cluster_layer() noexcept;

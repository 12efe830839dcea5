// runtime/no_cluster_layer.cpp: a build without the cluster
// (MANTA_ENABLE_BRIDGE=OFF) has no layer: init refuses a cluster's settings.
// (With the cluster, lib/cluster/entry.cpp defines this, and a program that
// does not link it fails to link rather than lose its cluster.)
#include "runtime/cluster_entry.hpp"

extern "C" const manta::runtime::cluster_layer* manta_cluster_layer() noexcept { return nullptr; }

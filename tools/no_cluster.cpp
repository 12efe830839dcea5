// tools/no_cluster.cpp: the command line's cluster verbs in a manta built
// without the cluster (MANTA_ENABLE_BRIDGE=OFF): each says so.
#include <cstdio>

#include "tools/cluster.hpp"

namespace manta::tools {
namespace {
int no_cluster(const char* verb) {
  std::fprintf(stderr, "manta %s: this manta was built without the cluster (MANTA_ENABLE_BRIDGE=OFF)\n", verb);
  return 2;
}
}  // namespace

bool head_runs_in(const std::string&) { return false; }

int start_head(const cluster_options&) { return no_cluster("start"); }

int start_node(const cluster_options&, const std::vector<std::string>&, int) { return no_cluster("start"); }

int stop_cluster(const cluster_options&) { return no_cluster("stop"); }

int cluster_status(const cluster_options&) { return no_cluster("status --address HOST:PORT"); }

}  // namespace manta::tools

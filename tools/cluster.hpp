// tools/cluster.hpp: the command line's cluster verbs: `manta start --head`
// starts a head in the background, `manta stop` stops the cluster (every node
// and the head), `manta status --address HOST:PORT` lists the nodes.
#pragma once

#include <string>
#include <vector>

namespace manta::tools {

struct cluster_options {
  std::string log_dir;     ///< where the head's log, address file and token go
  std::string token_file;  ///< --token-file; else MANTA_TOKEN_FILE; else <log_dir>/cluster.token
  std::string address;     ///< HOST:PORT of the head; else <log_dir>/head.address
  std::string bind = "127.0.0.1";
  std::string tls_cert, tls_key;  ///< a head's TLS certificate and key (PEM), or neither
  unsigned short port = 0;
  /// --node-wait: how long work lost with its node waits for a node that can take it (seconds)
  double node_wait_s = 60;
  bool json = false;
};

/// True for "HOST:PORT" (a head), false for a socket path or a pid (a local runtime).
inline bool is_head_address(const std::string& address) {
  auto colon = address.rfind(':');
  return colon != std::string::npos && colon + 1 < address.size() &&
         address.find_first_not_of("0123456789", colon + 1) == std::string::npos && address.find('/') == std::string::npos;
}

/// True if `manta start --head` recorded a head in `log_dir` that still runs.
bool head_runs_in(const std::string& log_dir);

int start_head(const cluster_options& o);
/// `manta start --address A -- ./app args`: starts the program as a node of the
/// cluster (MANTA_NODE), in the background, its output in <log_dir>/node-<pid>.log;
/// returns once the head lists it (or says why not).
int start_node(const cluster_options& o, const std::vector<std::string>& command, int num_workers);
int stop_cluster(const cluster_options& o);
int cluster_status(const cluster_options& o);

}  // namespace manta::tools

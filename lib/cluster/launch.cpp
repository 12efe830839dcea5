// cluster/launch.cpp: processes that a launcher (mpirun, srun) started together.
#include "cluster/cluster.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include <manta/errors.hpp>
#include <manta/registry.hpp>

#include "bridge/socket_io.hpp"
#include "bridge/token.hpp"
#include "bridge/wire.hpp"
#include "observe/log.hpp"
#include "observe/thread_name.hpp"
#include "process/args_blob.hpp"
#include "process/context.hpp"
#include "runtime/directory.hpp"
#include "cluster/landing.hpp"
#include "runtime/node_runtime.hpp"
#include "cluster/remote_jobs.hpp"

namespace manta::runtime {


namespace {
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}
std::string env_string(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}
}  // namespace

std::optional<launch> launched() {
  launch l;
  if (const char* rank = std::getenv("OMPI_COMM_WORLD_RANK")) {
    l.launcher = "mpirun";
    l.rank = std::atoi(rank);
    l.size = env_int("OMPI_COMM_WORLD_SIZE", 1);
    l.job = env_string("PMIX_NAMESPACE");
    if (l.job.empty()) l.job = env_string("OMPI_MCA_ess_base_jobid");
  } else if (const char* rank = std::getenv("SLURM_PROCID")) {
    l.launcher = "srun";
    l.rank = std::atoi(rank);
    l.size = env_int("SLURM_NTASKS", env_int("SLURM_NPROCS", 1));
    l.job = env_string("SLURM_JOB_ID");
    if (!l.job.empty() && std::getenv("SLURM_STEP_ID")) {  // (in steps: GCC 12 warns falsely of "." + std::string)
      l.job += '.';
      l.job += env_string("SLURM_STEP_ID");
    }
  } else {
    return std::nullopt;
  }
  if (l.size <= 1) return std::nullopt;  // one process: a single node, as without a launcher
  if (l.rank < 0 || l.rank >= l.size)
    throw usage_error("manta: " + l.launcher + " says this is rank " + std::to_string(l.rank) + " of " +
                      std::to_string(l.size));
  if (l.job.empty() || l.job.find('/') != std::string::npos || l.job.find('\0') != std::string::npos)
    throw usage_error("manta: started by " + l.launcher + " with no job id to meet the other ranks by; "
                      "set MANTA_ADDRESS (rank 0's head) or MANTA_NODE instead");
  return l;
}

launch_head::launch_head(const launch& l, const std::string& dir)
    : token_(bridge::new_token()),
      token_file_(dir.empty() ? "" : dir + "/launch-" + l.job + ".token"),
      address_file_(dir.empty() ? "" : dir + "/launch-" + l.job + ".address") {
  // Files an earlier run with this job id left (its rank 0 killed) go first:
  // the other ranks must not take that run's head for this one's.
  if (!dir.empty()) {
    std::remove(address_file_.c_str());
    std::remove(token_file_.c_str());
  }
  std::string bind = env_string("MANTA_BIND");
  if (bind.empty()) bind = "127.0.0.1";  // loopback unless told: one machine
  // TLS as manta start --head --tls-cert/--tls-key, from the environment every rank shares.
  const std::string cert = env_string("MANTA_TLS_CERT"), key = env_string("MANTA_TLS_KEY");
  if (cert.empty() != key.empty())
    throw usage_error("manta: under " + l.launcher + ", MANTA_TLS_CERT and MANTA_TLS_KEY go together (one is unset)");
  std::shared_ptr<bridge::tls_context> tls;
  if (!cert.empty()) tls = bridge::tls_context::for_head(cert, key);
  if (!tls)
    if (const std::string warning = bridge::plain_tcp_warning(bind); !warning.empty()) MANTA_WARN << warning;
  head_ = std::make_unique<bridge::head>(bridge::head::config{.bind = bind, .token = token_, .tls = tls});
  const std::string host = bind == "0.0.0.0" || bind == "::" ? host_name() : bind;
  address_ = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(head_->port());
  if (dir.empty()) return;
  bridge::write_token_file(token_file_, token_);
  // The address last, through a renamed file: a rank that sees it finds the token there too.
  const std::string fresh = address_file_ + ".new";
  {
    std::ofstream out(fresh, std::ios::trunc);
    out << address_ << "\n";
    if (!out.flush()) throw usage_error("manta: cannot write " + fresh);
  }
  if (std::rename(fresh.c_str(), address_file_.c_str()) != 0) throw usage_error("manta: cannot write " + address_file_);
}

launch_head::~launch_head() {
  head_.reset();  // every node is told to stop
  if (address_file_.empty()) return;
  std::remove(address_file_.c_str());
  std::remove(token_file_.c_str());
}

std::pair<std::string, std::string> wait_for_launch_head(const launch& l, const std::string& dir) {
  const std::string address_file = dir + "/launch-" + l.job + ".address";
  const int limit = env_int("MANTA_LAUNCH_TIMEOUT", 60);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(limit);
  std::string address, stale;
  while (address.empty()) {
    std::ifstream(address_file) >> address;
    // A head that does not answer is an earlier run's (its rank 0 was
    // killed and left the file): this run's rank 0 replaces it.
    if (!address.empty()) {  // (asked again each time: this run's head may get the same port)
      try {
        auto [host, port] = bridge::split_address(address);
        ::close(bridge::connect_to(host, port, std::chrono::seconds(2)));
        break;
      } catch (const std::exception&) {
        stale = address;
      }
    }
    address.clear();
    if (std::chrono::steady_clock::now() > until)
      throw usage_error("manta: rank " + std::to_string(l.rank) + " of " + l.launcher + " saw no head within " +
                        std::to_string(limit) + " s (" + address_file +
                        (stale.empty() ? " never appeared; on several machines, set MANTA_LAUNCH_DIR to a shared "
                                         "directory)"
                                       : " names " + stale + ", where no head answers: left by an earlier run?)"));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  try {
    return {address, bridge::read_token_file(dir + "/launch-" + l.job + ".token")};
  } catch (const bridge::token_error& e) {
    throw usage_error(std::string("manta: ") + e.what());
  }
}

}  // namespace manta::runtime

// cluster/entry.cpp: what init does in a cluster (runtime/cluster_entry.hpp):
// a driver joins the head, rank 0 of a launch hosts it, a node serves it.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <tuple>

#include <manta/errors.hpp>

#include "bridge/token.hpp"
#include "cluster/cluster.hpp"
#include "cluster/cluster_member.hpp"
#include "observe/log.hpp"
#include "runtime/cluster_entry.hpp"
#include "runtime/node_runtime.hpp"

namespace manta::runtime {
namespace {

/// Where the ranks of a launch meet: MANTA_LAUNCH_DIR, else the log_dir (private, made if missing).
std::string launch_dir(const options& opts) {
  if (const char* v = std::getenv("MANTA_LAUNCH_DIR"); v && *v) return v;
  const std::string dir = opts.log_dir.empty() ? observe::default_log_dir() : opts.log_dir;
  std::error_code ec;
  if (std::filesystem::create_directories(dir, ec))
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
  return dir;
}

/// The token a member proves: options.log_dir's (or MANTA_TOKEN_FILE).
std::string cluster_token(const options& opts) {
  const std::string dir = opts.log_dir.empty() ? observe::default_log_dir() : opts.log_dir;
  try {
    return bridge::read_token_file(bridge::default_token_file(dir));
  } catch (const bridge::token_error& e) {
    throw usage_error(std::string("manta: joining a cluster needs its token: ") + e.what());
  }
}

/// One process's part: a node (MANTA_NODE, or a rank of a launch other than
/// 0), a driver (options.address, MANTA_ADDRESS), or rank 0 of a launch.
class member_role final : public cluster_role {
 public:
  std::string served;  ///< the head this node serves
  std::string driven;  ///< the head this driver sends tasks to
  std::string token;
  std::optional<launch> lead;      ///< rank 0 of a launch: hosts the head
  std::optional<launch> over_mpi;  ///< another rank, told its head over MPI once its zygote is forked
  std::string dir;                 ///< where the ranks of a launch meet

  std::string local_mode_refusal() const override {
    return lead ? "manta: options.local_mode runs everything in this process; it cannot lead a launch"
                : "manta: options.local_mode runs everything in this process; it cannot join a cluster";
  }

  void prepare(const options& opts) override {
    if (token.empty() && (!served.empty() || !driven.empty())) token = cluster_token(opts);
  }

  void runtime_failed(const std::string& why) noexcept override {
    // The other ranks of an MPI launch wait in its broadcast: rank 0 tells
    // them why no head comes; another rank still takes its part.
    try {
      if (lead && launch_over_mpi(*lead))
        send_launch_over_mpi(*lead, "", "", why);
      else if (over_mpi)
        receive_launch_over_mpi(*over_mpi);
    } catch (const std::exception&) {  // (the first error says more)
    }
  }

  void attach(node_runtime& rt) override {
    try {
      if (!driven.empty()) rt.attach_cluster(std::make_unique<cluster_member>(rt, driven, token, false));
      if (lead) rt.attach_cluster(cluster_member::lead_launch(rt, *lead, dir));
      if (over_mpi) std::tie(served, token) = receive_launch_over_mpi(*over_mpi);
    } catch (const std::exception& e) {
      if (over_mpi) throw;  // it says which rank and why
      throw error(lead ? std::string("manta: could not lead the cluster of ") + lead->launcher + ": " + e.what()
                       : "manta: could not join the cluster at " + driven + ": " + e.what());
    }
  }

  bool serves() const override { return !served.empty() || over_mpi.has_value(); }

  int serve(node_runtime& rt) override {
    try {
      std::string why = serve_as_node(rt, served, token);
      if (why.empty()) return 0;
      std::fprintf(stderr, "manta: this node ends: %s\n", why.c_str());
      return 3;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "manta: could not serve the cluster at %s: %s\n", served.c_str(), e.what());
      return 2;
    }
  }

  void before_exit() noexcept override { finalize_programs_mpi(); }
};

std::unique_ptr<cluster_role> role_of(const options& opts) {
  auto r = std::make_unique<member_role>();
  if (const char* v = std::getenv("MANTA_NODE"); v && *v) r->served = v;
  if (!opts.address.empty()) r->driven = opts.address;
  else if (const char* v = std::getenv("MANTA_ADDRESS"); v && *v) r->driven = v;
  if (!r->served.empty()) r->driven.clear();  // a node takes tasks; it does not drive
  if (r->served.empty() && r->driven.empty()) {
    std::optional<launch> l = launched();
    if (!l) return nullptr;
    if ((std::getenv("MANTA_TLS") || std::getenv("MANTA_TLS_CA")) && !std::getenv("MANTA_TLS_CERT"))
      throw usage_error("manta: MANTA_TLS / MANTA_TLS_CA are set, but the head that rank 0 of " + l->launcher +
                        " hosts speaks TLS only with MANTA_TLS_CERT and MANTA_TLS_KEY set (for every rank); "
                        "set them, or unset MANTA_TLS / MANTA_TLS_CA");
    // A node of a launch learns rank 0's head from its files before it starts
    // (no thread of manta's runs yet), or over MPI once its zygote is forked
    // (MPI starts threads of its own).
    if (l->rank == 0) {
      r->lead = l;
      r->dir = launch_dir(opts);
    } else if (launch_over_mpi(*l)) {
      r->over_mpi = l;
    } else {
      std::tie(r->served, r->token) = wait_for_launch_head(*l, launch_dir(opts));
    }
  }
  return r;
}

const cluster_layer layer{role_of};

}  // namespace
}  // namespace manta::runtime

extern "C" const manta::runtime::cluster_layer* manta_cluster_layer() noexcept { return &manta::runtime::layer; }

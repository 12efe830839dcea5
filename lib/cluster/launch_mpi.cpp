// cluster/launch_mpi.cpp: under mpirun, rank 0 passes its head's address and
// the cluster token to the other ranks over MPI, when manta is built with it
// (MANTA_HAVE_MPI): the ranks then need no directory they all see. Without
// MPI, or under srun, they meet through files (launch.cpp).
#include <signal.h>

#include <array>
#include <string>
#include <utility>

#include <manta/errors.hpp>

#include "cluster/cluster.hpp"

#if defined(MANTA_HAVE_MPI)
#include <mpi.h>
#endif

namespace manta::runtime {

#if defined(MANTA_HAVE_MPI)
namespace {
/// MPI for one exchange: initialised unless the program did it, then finalised
/// again, so that the program may not notice. MPI_Init installs handlers for
/// SIGSEGV and others (Open MPI prints stacks there); the runtime's own
/// handling of crashes needs the ones the program had, so they are put back.
class mpi_session {
 public:
  explicit mpi_session(const launch& l) : launcher_(l.launcher) {
    int finalized = 0, initialized = 0;
    MPI_Finalized(&finalized);
    if (finalized)
      throw usage_error("manta: MPI was finalized before manta::init; under " + launcher_ +
                        " the ranks learn rank 0's head over MPI (finalize after manta::shutdown)");
    MPI_Initialized(&initialized);
    if (initialized) return;
    for (int s = 1; s < NSIG; ++s) saved_ok_[s] = s != SIGKILL && s != SIGSTOP && ::sigaction(s, nullptr, &saved_[s]) == 0;
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
      throw usage_error("manta: MPI_Init failed under " + launcher_);
    owned_ = true;
  }
  ~mpi_session() {
    if (!owned_) return;
    MPI_Finalize();
    for (int s = 1; s < NSIG; ++s)
      if (saved_ok_[s]) ::sigaction(s, &saved_[s], nullptr);
  }
  mpi_session(const mpi_session&) = delete;
  mpi_session& operator=(const mpi_session&) = delete;

  /// Rank 0's `message` on every rank, over a communicator of its own (a
  /// program's collectives on MPI_COMM_WORLD cannot match it).
  std::string broadcast(std::string message) {
    MPI_Comm comm;
    check(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    unsigned long long size = message.size();
    int rc = MPI_Bcast(&size, 1, MPI_UNSIGNED_LONG_LONG, 0, comm);
    if (rc == MPI_SUCCESS) {
      message.resize(size);
      rc = MPI_Bcast(message.data(), static_cast<int>(size), MPI_CHAR, 0, comm);
    }
    MPI_Comm_free(&comm);
    check(rc);
    return message;
  }

 private:
  void check(int rc) const {
    if (rc != MPI_SUCCESS) throw usage_error("manta: an MPI broadcast failed under " + launcher_);
  }
  std::string launcher_;
  bool owned_ = false;
  std::array<struct sigaction, NSIG> saved_{};
  std::array<bool, NSIG> saved_ok_{};
};

// One message: "ok\n<address>\n<token>" or "failed\n<why>".
constexpr std::string_view ok_word = "ok\n", failed_word = "failed\n";
}  // namespace

bool launch_over_mpi(const launch& l) noexcept { return l.launcher == "mpirun"; }

void finalize_programs_mpi() noexcept {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

void send_launch_over_mpi(const launch& l, const std::string& address, const std::string& token,
                          const std::string& failure) {
  mpi_session mpi(l);
  mpi.broadcast(failure.empty() ? std::string(ok_word) + address + "\n" + token : std::string(failed_word) + failure);
}

std::pair<std::string, std::string> receive_launch_over_mpi(const launch& l) {
  const std::string m = mpi_session(l).broadcast({});
  const std::size_t line = m.find('\n', ok_word.size());
  if (m.starts_with(ok_word) && line != std::string::npos)
    return {m.substr(ok_word.size(), line - ok_word.size()), m.substr(line + 1)};
  if (m.starts_with(failed_word))
    throw usage_error("manta: rank 0 of " + l.launcher + " could not host the head: " + m.substr(failed_word.size()));
  throw usage_error("manta: rank 0 of " + l.launcher + " sent no head over MPI");
}
#else
bool launch_over_mpi(const launch&) noexcept { return false; }

void finalize_programs_mpi() noexcept {}

void send_launch_over_mpi(const launch& l, const std::string&, const std::string&, const std::string&) {
  throw usage_error("manta: built without MPI; the ranks of " + l.launcher + " meet through files");
}

std::pair<std::string, std::string> receive_launch_over_mpi(const launch& l) {
  throw usage_error("manta: built without MPI; the ranks of " + l.launcher + " meet through files");
}
#endif

}  // namespace manta::runtime

#pragma once
// Starting a distributed run, and failing one cleanly.
//
//   int main(int argc, char** argv) {
//     return tide::run_ranks([&] {
//       auto world = tide::init_distributed();   // size 1 without mpirun, no MPI calls then
//       ...
//     });
//   }
//
// init_distributed() looks for the variables mpirun sets (OMPI_COMM_WORLD_SIZE; PMI_SIZE and
// PMIX_RANK for other launchers). Without them it returns a LocalProcessGroup of size 1 and never
// touches MPI, so a single-process run needs no launcher. With them it initialises MPI (once per
// process) and returns a duplicate of MPI_COMM_WORLD.
//
// run_ranks(fn) runs fn and turns an exception on any rank into a clean, fast failure of the
// whole job: it prints `rank R: <message>` to stderr and calls MPI_Abort, which makes mpirun
// kill every rank (otherwise the other ranks would wait forever in their next collective).

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tide/comm/process_group.h"
#include "tide/core/device.h"
#include "tide/core/error.h"

namespace tide {

// An error every rank raises identically, after a collective showed them all the same cause (the
// ranks disagree on the config). run_ranks lets it propagate instead of aborting the job, so
// every rank ends cleanly with exit code 1; only the rank with report() prints it.
class AgreedError : public Error {
 public:
  AgreedError(const std::string& message, bool report) : Error(message), report_(report) {}
  bool report() const { return report_; }

 private:
  bool report_;
};

// Runs `fn` on every rank of `world`, then has the ranks compare how it went (one fixed-size
// all-gather), so that an error in it ends the job with one line and exit code 1 on every rank
// instead of a line per rank and MPI_Abort. For the checks before a run starts (the config,
// the checkpoint to resume), which the ranks usually fail alike. `fn` must not talk to the
// other ranks: one may fail before a collective the others are waiting in. Throws, on every
// rank, when fn threw on any rank (agreed_error says what each rank reports). With one rank
// it simply runs fn.
void agree_on_errors(ProcessGroup& world, const std::function<void()>& fn);

// The error rank `rank` raises after the all-gather of agree_on_errors: `hashes[r]` is
// error_hash of rank r's message (0: fn returned there), `message` this rank's (empty if none).
// nullopt when no rank failed. Every rank failed with the same message: the message, reported
// by rank 0. Otherwise the lowest rank of each group of ranks with the same message reports
// "rank 1: <message>" ("ranks 1, 3: ..."); the ranks that did not fail report nothing.
std::optional<AgreedError> agreed_error(const std::vector<uint64_t>& hashes, int rank,
                                        const std::string& message);
// "1, 3, 4": ranks in a message, the first 8 and then " and N more".
std::string short_rank_list(const std::vector<int>& ranks);
// A hash of an error message, never 0.
uint64_t error_hash(const std::string& message);

struct DistributedOptions {
  CommAlgorithm algorithm = CommAlgorithm::Mpi;
};

// True when this process was started by an MPI launcher.
bool launched_by_mpirun();

// The world group: LocalProcessGroup without a launcher, MpiProcessGroup under mpirun. May be
// called more than once (each call returns a new group over the same world).
std::shared_ptr<ProcessGroup> init_distributed(const DistributedOptions& options = {});

// This process's rank in the world, for messages: from MPI once initialised, else from the
// launcher's environment, else 0.
int world_rank_for_messages();

// This rank's place among the ranks on its machine (the ranks whose hosts have the same name):
// how one rank per GPU picks its GPU, as torchrun's LOCAL_RANK, whatever the launcher.
struct NodeRank {
  int rank = 0;  // 0..size-1, in world order
  int size = 1;  // ranks on this machine
};
// Collective over `world`: one all-gather of a hash of each rank's host name.
NodeRank node_rank(ProcessGroup& world);
// The same from the gathered hashes (host_hashes[r]: rank r's), for rank `rank`.
NodeRank node_rank_from(const std::vector<uint64_t>& host_hashes, int rank);
// The device of a rank whose config says `device` (cpu, cuda, cuda:N, sim, sim:N): with more
// than one rank on its machine, "cuda" is the GPU of its place there (cuda:<node rank>), and
// cuda:N, one GPU for all of them, is refused. Everything else is the device named.
Device device_of_rank(const std::string& device, const NodeRank& node);

// Prints `rank R: message` to stderr and ends the whole job with exit code 1: MPI_Abort when MPI
// is running, exit(1) otherwise. Under MPI a rank other than 0 waits kAbortGraceSeconds before
// it prints: when rank 0 fails too (the same error, as a whole-job error usually is), rank 0's
// abort ends this rank first and the message is printed once.
inline constexpr int kAbortGraceSeconds = 2;
[[noreturn]] void abort_world(const std::string& message);

// Runs fn. Returns 0 if it returns; if it throws, prints `rank R: <what()>` and aborts the job
// (under mpirun) or returns 1 (single process). An AgreedError is rethrown as it is.
int run_ranks(const std::function<void()>& fn);

}  // namespace tide

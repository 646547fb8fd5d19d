#include "tide/comm/distributed.h"

#include <mpi.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "tide/comm/local_process_group.h"
#include "tide/comm/mpi_process_group.h"

namespace tide {

namespace {
// Set once MPI has been initialised by this process, so that the failure path below calls MPI
// only when MPI is running (a local run never calls MPI at all).
bool g_mpi_started = false;

const char* env(const char* name) {
  return std::getenv(name);
}
}  // namespace

bool launched_by_mpirun() {
  return env("OMPI_COMM_WORLD_SIZE") || env("PMI_SIZE") || env("PMIX_RANK");
}

std::shared_ptr<ProcessGroup> init_distributed(const DistributedOptions& options) {
  if (!launched_by_mpirun()) return std::make_shared<LocalProcessGroup>();
  auto world = MpiProcessGroup::world(options.algorithm);
  g_mpi_started = true;
  return world;
}

int world_rank_for_messages() {
  if (g_mpi_started) return mpi_engine()->world_rank();
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"})
    if (const char* v = env(name)) return std::atoi(v);
  return 0;
}

void abort_world(const std::string& message) {
  std::fflush(stdout);
  std::fprintf(stderr, "rank %d: %s\n", world_rank_for_messages(), message.c_str());
  std::fflush(stderr);
  // The SIGTERM that comes with the abort ends this process (not a polite stop request).
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
  // MPI_Abort kills every rank of the job, including those blocked in a collective with us.
  if (g_mpi_started) MPI_Abort(MPI_COMM_WORLD, 1);
  // Not yet in MPI: exiting non-zero makes mpirun end the job too.
  std::exit(1);
}

int run_ranks(const std::function<void()>& fn) {
  try {
    fn();
    return 0;
  } catch (const AgreedError&) {
    throw;  // every rank has it: no abort needed
  } catch (const std::exception& e) {
    if (launched_by_mpirun()) abort_world(e.what());
    std::fprintf(stderr, "rank 0: %s\n", e.what());
    return 1;
  }
}

}  // namespace tide

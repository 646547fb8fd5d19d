#include "tide/comm/distributed.h"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <unistd.h>

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
  // The SIGTERM that comes with the abort ends this process (not a polite stop request).
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
  // An error every rank hits (a shape, a memory limit) reaches the ranks at about the same
  // moment, and each would print it. Rank 0 reports at once; the others wait a moment first,
  // during which rank 0's MPI_Abort ends them, so such an error is read once. A rank that fails
  // alone still reports it (kAbortGraceSeconds later) and ends the job.
  const int rank = world_rank_for_messages();
  if (g_mpi_started && rank != 0)
    std::this_thread::sleep_for(std::chrono::seconds(kAbortGraceSeconds));
  std::fflush(stdout);
  std::fprintf(stderr, "rank %d: %s\n", rank, message.c_str());
  std::fflush(stderr);
  // MPI_Abort kills every rank of the job, including those blocked in a collective with us.
  if (g_mpi_started) MPI_Abort(MPI_COMM_WORLD, 1);
  // Not yet in MPI: exiting non-zero makes mpirun end the job too.
  std::exit(1);
}

std::string short_rank_list(const std::vector<int>& ranks) {
  constexpr size_t kShown = 8;
  std::string s;
  for (size_t k = 0; k < std::min(ranks.size(), kShown); ++k)
    s += (k ? ", " : "") + std::to_string(ranks[k]);
  if (ranks.size() > kShown) s += fmt::format(" and {} more", ranks.size() - kShown);
  return s;
}

NodeRank node_rank_from(const std::vector<uint64_t>& host_hashes, int rank) {
  NodeRank n{0, 0};
  for (size_t r = 0; r < host_hashes.size(); ++r) {
    if (host_hashes[r] != host_hashes[static_cast<size_t>(rank)]) continue;
    if (static_cast<int>(r) < rank) ++n.rank;
    ++n.size;
  }
  return n;
}

NodeRank node_rank(ProcessGroup& world) {
  char name[256] = {};
  TIDE_CHECK(gethostname(name, sizeof(name) - 1) == 0,
             "node_rank: gethostname failed; this rank cannot tell which machine it is on");
  uint64_t mine = error_hash(name);
  std::vector<uint64_t> all(static_cast<size_t>(world.size()));
  // Each hash travels as two 32-bit words (the groups move 4-byte elements).
  world.all_gather(Tensor(&mine, Shape{2}, DType::I32),
                   Tensor(all.data(), Shape{2 * static_cast<int64_t>(all.size())}, DType::I32));
  return node_rank_from(all, world.rank());
}

Device device_of_rank(const std::string& device, const NodeRank& node) {
  const Device d = parse_device(device);
  if (!d.is_cuda() || node.size == 1) return d;
  TIDE_CHECK(device == "cuda",
             "device={}: this machine runs {} ranks, and one GPU cannot hold them all (NCCL "
             "takes one rank per GPU); set device=cuda, and rank r of a machine uses its GPU r "
             "(CUDA_VISIBLE_DEVICES chooses which GPUs those are)",
             device, node.size);
  return Device::cuda(node.rank);
}

uint64_t error_hash(const std::string& message) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a: the same on every rank and every build
  for (unsigned char c : message) h = (h ^ c) * 1099511628211ull;
  return h == 0 ? 1 : h;
}

std::optional<AgreedError> agreed_error(const std::vector<uint64_t>& hashes, int rank,
                                        const std::string& message) {
  const uint64_t mine = hashes[static_cast<size_t>(rank)];
  std::vector<int> failed, same;
  for (size_t r = 0; r < hashes.size(); ++r) {
    if (hashes[r] != 0) failed.push_back(static_cast<int>(r));
    if (mine != 0 && hashes[r] == mine) same.push_back(static_cast<int>(r));
  }
  if (failed.empty()) return std::nullopt;
  if (failed.size() == hashes.size() && same.size() == hashes.size())
    return AgreedError(message, rank == 0);
  auto list = [](const std::vector<int>& ranks) {
    return (ranks.size() > 1 ? "ranks " : "rank ") + short_rank_list(ranks);
  };
  if (mine == 0) return AgreedError(list(failed) + " failed", false);
  return AgreedError(list(same) + ": " + message, rank == same.front());
}

void agree_on_errors(ProcessGroup& world, const std::function<void()>& fn) {
  if (world.size() == 1) {
    fn();
    return;
  }
  std::string message;
  try {
    fn();
  } catch (const std::exception& e) {
    message = *e.what() ? e.what() : "unknown error";
  } catch (...) {
    message = "unknown error";
  }
  const int n = world.size();
  uint64_t mine = message.empty() ? 0 : error_hash(message);
  std::vector<uint64_t> all(static_cast<size_t>(n));
  // 64-bit hashes moved bit for bit as pairs of 32-bit words.
  world.all_gather(Tensor(&mine, Shape{2}, DType::I32),
                   Tensor(all.data(), Shape{2 * int64_t{n}}, DType::I32));
  if (auto e = agreed_error(all, world.rank(), message)) throw *e;
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

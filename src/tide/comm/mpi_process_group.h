#pragma once
// MpiProcessGroup: collectives over host buffers with MPI (OpenMPI), run by the MpiEngine
// thread so that they progress while the caller computes.
//
// Two algorithms, chosen per group (sub-groups inherit it):
//   mpi   MPI's own non-blocking collectives (MPI_Iallreduce, MPI_Ireduce_scatter_block,
//         MPI_Iallgather, MPI_Ibcast). MPI hides its algorithm, so the byte counters record the
//         theoretical traffic of the ring algorithm for each call (ring_traffic.h).
//   ring  tide's explicit ring all-reduce / reduce-scatter / all-gather over MPI_Isend/Irecv;
//         the counters add up the messages actually posted. Tests check that the two agree,
//         which is what makes the mpi counters trustworthy. Broadcast, send/recv and barrier
//         are the same in both (MPI_Ibcast counted as a chain; point to point counted exactly).
//
// Reductions take f32, bf16 and f16 host tensors. MPI has no bf16/f16 sum, so the mpi algorithm
// reduces them with user-defined MPI_Ops (MpiEngine::sum_op) and the ring with the same
// arithmetic (core/dtype.h): each addition in f32, rounded to nearest-even into the dtype, as
// NCCL does. all_gather, broadcast and send/recv move any dtype.

#include <mpi.h>

#include <memory>
#include <vector>

#include "tide/comm/mpi_engine.h"
#include "tide/comm/process_group.h"
#include "tide/comm/watchdog.h"

namespace tide {

class MpiProcessGroup final : public ProcessGroup {
 public:
  // Takes ownership of `comm` (freed with the group); duplicates it once more for the ring
  // algorithm's messages. Collective over `comm`.
  MpiProcessGroup(std::shared_ptr<MpiEngine> engine, MPI_Comm comm, CommAlgorithm algorithm);
  // Waits for this group's outstanding work, then frees its communicators.
  ~MpiProcessGroup() override;

  // A group over MPI_COMM_WORLD (a duplicate of it).
  static std::shared_ptr<MpiProcessGroup> world(CommAlgorithm algorithm);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  CommAlgorithm algorithm() const { return algorithm_; }
  void set_algorithm(CommAlgorithm a) { algorithm_ = a; }
  MPI_Comm comm() const { return comm_; }
  // The world rank of each group rank (MPI_COMM_WORLD's numbering): the watchdog's messages
  // name ranks by world rank.
  const std::vector<int>& world_ranks() const { return world_ranks_; }

  WorkPtr all_reduce_async(Tensor buf, ReduceOp op) override;
  WorkPtr reduce_scatter_async(Tensor in, Tensor out, ReduceOp op) override;
  WorkPtr all_gather_async(Tensor in, Tensor out) override;
  WorkPtr broadcast_async(Tensor buf, int root) override;
  WorkPtr send_async(Tensor buf, int dst, int tag) override;
  WorkPtr recv_async(Tensor buf, int src, int tag) override;
  WorkPtr barrier_async() override;
  std::shared_ptr<ProcessGroup> split(int color, int key) override;

  // The watchdog (MpiEngine): a limit on every wait of the process, and the step it names.
  void set_timeout(double seconds) override { engine_->set_timeout(seconds); }
  void set_step(int64_t step) override { engine_->set_step(step); }
  WatchdogLink watchdog_link() override {
    return {engine_->work_watchdog(), world_ranks_, engine_->world_size()};
  }

  // Called by ring ops for each message they post (measured traffic).
  void add_traffic(uint64_t sent, uint64_t received) { count_bytes(sent, received); }

 private:
  WorkPtr submit(std::unique_ptr<MpiOp> op, std::string what);
  // " in the group of ranks 0, 2" for a collective of a sub-group ("" for the world).
  const std::string& in_group() const { return in_group_; }
  // The tag of the next ring op. Ops are issued in the same order on every rank, so the same
  // op gets the same tag everywhere and concurrent ring ops never match each other's messages.
  int next_ring_tag();

  std::shared_ptr<MpiEngine> engine_;
  MPI_Comm comm_ = MPI_COMM_NULL;       // MPI collectives and user send/recv
  MPI_Comm ring_comm_ = MPI_COMM_NULL;  // the ring algorithm's messages
  int rank_ = 0, size_ = 1;
  std::vector<int> world_ranks_;
  std::string in_group_;  // group_suffix(world_ranks_), made once
  CommAlgorithm algorithm_;
  int ring_seq_ = 0;
  std::vector<std::weak_ptr<MpiWork>> outstanding_;
};

}  // namespace tide

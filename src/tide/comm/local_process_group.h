#pragma once
// LocalProcessGroup: the world of a single process started without mpirun. It never calls MPI,
// so `tide train` on one CPU needs no MPI launcher. With one rank every collective is the
// identity: all_reduce and broadcast leave the buffer as is, reduce_scatter and all_gather copy
// input to output. Nothing is sent, so the byte counters stay zero (calls are still counted).

#include "tide/comm/process_group.h"

namespace tide {

class LocalProcessGroup final : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "local"; }

  WorkPtr all_reduce_async(Tensor buf, ReduceOp op) override;
  WorkPtr reduce_scatter_async(Tensor in, Tensor out, ReduceOp op) override;
  WorkPtr all_gather_async(Tensor in, Tensor out) override;
  WorkPtr broadcast_async(Tensor buf, int root) override;
  WorkPtr send_async(Tensor buf, int dst, int tag) override;
  WorkPtr recv_async(Tensor buf, int src, int tag) override;
  WorkPtr barrier_async() override;
  std::shared_ptr<ProcessGroup> split(int color, int key) override;
};

}  // namespace tide

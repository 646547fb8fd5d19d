#pragma once
// The explicit ring algorithms (algorithm = ring) as MpiOp state machines: each step posts one
// MPI_Isend to the right neighbour and one MPI_Irecv from the left, waits for both, reduces,
// and posts the next step. See ring_traffic.h for the chunk schedule. Reductions take f32, bf16
// and f16 (core/dtype.h: 16-bit sums round once per hop, as NCCL's do).

#include <memory>

#include "tide/comm/mpi_engine.h"
#include "tide/comm/process_group.h"

namespace tide {

class MpiProcessGroup;

// In place: buf (n) becomes the sum (or mean) over ranks. Any n.
std::unique_ptr<MpiOp> make_ring_all_reduce(MpiProcessGroup* g, MPI_Comm comm, int tag, Tensor buf,
                                            ReduceOp op);
// in (N*k) -> out (k): out is the reduced slice `rank` of in. `in` is not modified.
std::unique_ptr<MpiOp> make_ring_reduce_scatter(MpiProcessGroup* g, MPI_Comm comm, int tag,
                                                Tensor in, Tensor out, ReduceOp op);
// in (k) -> out (N*k). Any dtype (moved as bytes).
std::unique_ptr<MpiOp> make_ring_all_gather(MpiProcessGroup* g, MPI_Comm comm, int tag, Tensor in,
                                            Tensor out);

}  // namespace tide

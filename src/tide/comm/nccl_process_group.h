#pragma once
// NcclProcessGroup: collectives over device (CUDA) buffers with NCCL.
//
// - One NCCL communicator per group, on its own non-blocking CUDA stream (the communication
//   stream), so communication overlaps kernels running on the compute stream.
// - Ordering before: each call first makes the comm stream wait for an event recorded on the
//   compute stream, so the buffer holds the values the compute stream wrote before the call.
//   The compute stream is the one the ops run on: pass OpContext::stream (make_op_context) to
//   make_nccl_process_group or set_compute_stream. Left at nullptr it is the legacy default
//   stream, which a non-blocking stream such as an OpContext's does NOT wait for.
// - Ordering after: the Work records an event on the comm stream after the NCCL call.
//   wait_on(stream) makes a compute stream wait for it on the device (cudaStreamWaitEvent),
//   without blocking the host: the way to consume a result, e.g. reduced gradients before the
//   optimizer kernels. wait() blocks the host on it (cudaEventSynchronize), is_completed()
//   polls it (cudaEventQuery).
// - Bootstrap: rank 0 of `bootstrap` (the MPI world, or a LocalProcessGroup for a single
//   process) creates the ncclUniqueId and broadcasts it over `bootstrap`; the NCCL group has
//   the same ranks in the same order. split() splits the bootstrap group and makes a new NCCL
//   communicator over the piece.
// - Dtypes: reductions in f32, bf16, f16 (ReduceOp::Avg is ncclAvg); moves in any dtype.
// - Counters: NCCL picks its own algorithm (ring or tree), so like the MPI backend's `mpi`
//   algorithm the counters record ring theory (ring_traffic.h).
// - send/recv: NCCL has no tags; messages between two ranks match in issue order, so only
//   tag 0 is accepted.
//
// The group is in the CUDA module (core/cuda_module.h), compiled there only when NCCL was found
// (TIDE_HAVE_NCCL): the first make_nccl_process_group loads it; without NCCL it throws a clear
// error.

#include <memory>

#include "tide/comm/process_group.h"

namespace tide {

// True when tide was built with NCCL.
bool nccl_available();

// Collective over `bootstrap`: an NCCL group on CUDA device `device` with the ranks of
// `bootstrap`. compute_stream: the cudaStream_t the ops run on (OpContext::stream); nullptr is
// the legacy default stream. Groups made by split() inherit it.
std::shared_ptr<ProcessGroup> make_nccl_process_group(std::shared_ptr<ProcessGroup> bootstrap,
                                                      int device, void* compute_stream = nullptr);

// For an NCCL group: the CUDA stream (a cudaStream_t) whose work must finish before each
// collective reads its buffers; nullptr is the legacy default stream. Throws for other backends.
void set_compute_stream(ProcessGroup& group, void* cuda_stream);

}  // namespace tide

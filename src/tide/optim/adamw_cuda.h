#pragma once
// Fused AdamW on a GPU: one kernel launch per chunk. In tide all model data lives in flat
// fixed-size chunks (PatrickStar), so one launch covers every tensor of a chunk and the
// "multi-tensor apply" problem of per-tensor optimizers does not arise; with chunks of
// millions of elements the launch cost is negligible.
//
// Same semantics, same per-step scalars (adamw_scalars) and same operation order as the CPU
// paths, with explicitly rounded intrinsics (__fmul_rn, __fdiv_rn, __fsqrt_rn ...) so nvcc
// cannot contract into FMAs: results are bitwise equal to adamw_reference.
//
// Skipping without a host sync: grad_nonfinite_cuda ORs "some gradient is NaN/Inf" into a
// device int for every chunk of the step; adamw_cuda reads that int and writes nothing when
// it is set (as PyTorch's fused Adam does with found_inf). The host learns the verdict later,
// for the loss scaler, by copying the int back.
//
// The kernels are in the CUDA module (core/cuda_module.h), loaded by the first call; builds
// without CUDA throw. C++17-clean: no CUDA headers here.

#include <cstdint>

#include "tide/optim/adamw.h"

namespace tide {

// All pointers in the chunk are device pointers. stream: a cudaStream_t (nullptr: the default
// stream). skip_flag: a device int or nullptr; when it holds a non-zero value at kernel time,
// the step is skipped. Throws a tide::Error on bad arguments or a failed launch.
void adamw_cuda(const AdamWChunk& c, const AdamWHyper& h, const AdamWStep& s, const int* skip_flag,
                void* stream);

// Sets *flag (a device int) to 1 when any of the n gradients is NaN or Inf; never clears it.
void grad_nonfinite_cuda(const void* grad, DType dtype, int64_t n, int* flag, void* stream);

}  // namespace tide

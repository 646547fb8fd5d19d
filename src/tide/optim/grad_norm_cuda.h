#pragma once
// The gradient norm's sum of squares on a GPU, bitwise grad_norm_squared's (grad_norm.h). Why
// bitwise: the norm decides clipping and the fp16 skip, so a device run must take the CPU run's
// decisions; the CPU sum is a fixed blocked order, which a GPU can follow exactly: one group of
// 8 threads per kNormBlock block (thread j is the CPU's accumulator lane j, adding elements
// j, j+8, ... in order, with explicitly rounded f64 products and sums, never fused), the 8
// lanes combined pairwise as on the CPU, then one thread adds the block sums in order.
//
// In the CUDA module (core/cuda_module.h), through the optim floor's table; builds without CUDA
// throw. C++17-clean: no CUDA headers here.

#include <cstddef>
#include <cstdint>

#include "tide/core/dtype.h"

namespace tide {

// Device doubles grad_norm_squared_cuda needs as scratch for n elements.
int64_t grad_norm_scratch_doubles(int64_t n);
// Bytes of the one device arena that holds the per-tensor sums of `tensors` tensors and the
// scratch for the largest (`largest` elements), each aligned: what the executor allocates on a
// device (exec/policy_stack.cpp) and tide estimate counts.
size_t grad_sums_arena_bytes(int64_t tensors, int64_t largest);
// *out (a device double) = the sum of squares of x[0, n) (device memory, f32, bf16 or f16),
// queued on `stream` (a cudaStream_t); n = 0 writes 0. scratch: grad_norm_scratch_doubles(n)
// device doubles, free once the stream has run this.
void grad_norm_squared_cuda(const void* x, DType dtype, int64_t n, double* out, double* scratch,
                            void* stream);

}  // namespace tide

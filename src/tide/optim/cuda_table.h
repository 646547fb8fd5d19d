#pragma once
// What the CUDA module (core/cuda_module.h) offers the optim floor: the fused AdamW and the
// NaN/Inf check of adamw_cuda.h and the sum of squares of grad_norm_cuda.h, whose functions check
// their arguments and call these. Implemented by adamw_cuda.cu and grad_norm_cuda.cu. C++17-clean.

#include <cstddef>
#include <cstdint>

#include "tide/optim/adamw.h"

namespace tide {

struct CudaOptimTable {
  size_t size = sizeof(CudaOptimTable);
  void (*adamw)(const AdamWChunk& c, const AdamWHyper& h, const AdamWStep& s, const int* skip_flag,
                void* stream) = nullptr;
  void (*grad_nonfinite)(const void* grad, DType dtype, int64_t n, int* flag,
                         void* stream) = nullptr;
  void (*grad_norm_squared)(const void* x, DType dtype, int64_t n, int64_t block_elems, double* out,
                            double* scratch, void* stream) = nullptr;
};

// grad_norm_cuda.h's kernels (grad_norm_cuda.cu), after grad_norm_cuda.cpp's checks.
// block_elems: grad_norm.h's kNormBlock (not included here: that header is C++20).
void grad_norm_squared_kernels(const void* x, DType dtype, int64_t n, int64_t block_elems,
                               double* out, double* scratch, void* stream);

}  // namespace tide

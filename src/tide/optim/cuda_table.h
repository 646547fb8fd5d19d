#pragma once
// What the CUDA module (core/cuda_module.h) offers the optim floor: the fused AdamW and the
// NaN/Inf check of adamw_cuda.h, whose functions (adamw_cuda.cpp) check their arguments and call
// these. Implemented by adamw_cuda.cu. C++17-clean.

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
};

}  // namespace tide

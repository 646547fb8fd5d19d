#pragma once
// A gradient element of any storage dtype (f32, bf16, f16) widened to f32, exactly: the one
// load of the optim floor's CUDA kernels (adamw_cuda.cu, grad_norm_cuda.cu).
#include <cuda_fp16.h>

#include <cstdint>

#include "tide/core/dtype.h"

namespace tide {

template <DType G>
__device__ __forceinline__ float load_grad(const void* g, int64_t i) {
  if constexpr (G == DType::F32) {
    return static_cast<const float*>(g)[i];
  } else if constexpr (G == DType::BF16) {
    return __uint_as_float(static_cast<uint32_t>(static_cast<const uint16_t*>(g)[i]) << 16);
  } else {
    return __half2float(static_cast<const __half*>(g)[i]);
  }
}

}  // namespace tide

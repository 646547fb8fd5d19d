// SwiGLU on the GPU (same formulas as cpu/swiglu.cpp): out(N,I) = silu(gate) * up with gate
// and up the two halves of each (N,2I) input row. Why one thread per output element: the op is
// one pass over memory with no reduction, and the backward writes the two gradient halves of
// its element only.
#include <cmath>

#include "tide/kernels/cuda/common.cuh"
#include "tide/kernels/cuda/context.h"
#include "tide/kernels/cuda/cuda_ops.h"

namespace tide::cuda {

namespace {

constexpr int kBlock = 256;

template <typename T>
__global__ void swiglu_forward_kernel(T* out, const T* inp, int64_t N, int I) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= N * I) return;
  const int64_t n = idx / I, i = idx % I;
  const float g = to_f32(inp[n * 2 * I + i]), u = to_f32(inp[n * 2 * I + I + i]);
  out[idx] = from_f32<T>(g / (1.0f + expf(-g)) * u);
}

// d gate += dout * up * silu'(g), silu'(g) = s (1 + g (1 - s)); d up += dout * silu(g).
template <typename T>
__global__ void swiglu_backward_kernel(T* dinp, const T* dout, const T* inp, int64_t N, int I) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= N * I) return;
  const int64_t n = idx / I, i = idx % I;
  const int64_t gi = n * 2 * I + i, ui = gi + I;
  const float g = to_f32(inp[gi]), u = to_f32(inp[ui]), dy = to_f32(dout[idx]);
  const float e = 1.0f + expf(-g);
  const float s = 1.0f / e, silu = g / e;
  const float dsilu = s * (1.0f + g * (1.0f - s));
  dinp[gi] = from_f32<T>(to_f32(dinp[gi]) + dy * u * dsilu);
  dinp[ui] = from_f32<T>(to_f32(dinp[ui]) + dy * silu);
}

}  // namespace

void swiglu_forward(const OpContext& ctx, DType dtype, void* out, const void* inp, int64_t N,
                    int I) {
  if (N * I == 0) return;
  with_storage_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    swiglu_forward_kernel<T><<<ceil_div(N * I, kBlock), kBlock, 0, stream_of(ctx)>>>(
        static_cast<T*>(out), static_cast<const T*>(inp), N, I);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

void swiglu_backward(const OpContext& ctx, DType dtype, void* dinp, const void* dout,
                     const void* inp, int64_t N, int I) {
  if (N * I == 0) return;
  with_storage_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    swiglu_backward_kernel<T><<<ceil_div(N * I, kBlock), kBlock, 0, stream_of(ctx)>>>(
        static_cast<T*>(dinp), static_cast<const T*>(dout), static_cast<const T*>(inp), N, I);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

}  // namespace tide::cuda

// RMSNorm over the last dimension on the GPU (same math as cpu/rmsnorm.cpp), with the backward
// split into the input gradient (B) and the weight gradient (W).
//
// Why the layernorm kernels' shape: forward and input gradient are one warp per row (channels
// strided over the 32 lanes, combined with a shuffle tree); the weight gradient is a column
// reduction over the N rows, done deterministically in two passes (no atomics).
#include <cmath>

#include "tide/kernels/cuda/common.cuh"
#include "tide/kernels/cuda/context.h"
#include "tide/kernels/cuda/cuda_ops.h"

namespace tide::cuda {

namespace {

constexpr int kRowsPerBlock = 8;  // warps per block of the row kernels
// Rows summed by one thread in the first pass of the weight gradient: a constant, so that the
// summation order (and the result) is the same on every GPU.
constexpr int kRowsPerChunk = 64;
constexpr int kColumnBlock = 256;

// The mean square in double, like the CPU.
template <typename T>
__global__ void rmsnorm_forward_kernel(T* out, float* rstd, const T* inp, const T* weight,
                                       int64_t N, int C, float eps) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (n >= N) return;        // whole warps leave together, so the shuffles below stay full-warp
  const T* x = inp + n * C;  // (C)
  double sq = 0.0;
  for (int c = lane; c < C; c += kWarpSize) {
    const double v = to_f32(x[c]);
    sq += v * v;
  }
  sq = warp_sum(sq);
  const float s = static_cast<float>(1.0 / sqrt(sq / C + static_cast<double>(eps)));
  T* y = out + n * C;
  for (int c = lane; c < C; c += kWarpSize)
    y[c] = from_f32<T>(to_f32(x[c]) * s * to_f32(weight[c]));
  if (lane == 0) rstd[n] = s;
}

// dx += rstd * (g - xhat * mean(g * xhat)), xhat = x * rstd, g = dout * w.
template <typename T>
__global__ void rmsnorm_backward_input_kernel(T* dinp, const T* dout, const T* inp, const T* weight,
                                              const float* rstd, int64_t N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (n >= N) return;
  const T* x = inp + n * C;
  const T* dy = dout + n * C;
  T* dx = dinp + n * C;
  const float s = rstd[n];
  float gx_sum = 0.0f;
  for (int c = lane; c < C; c += kWarpSize)
    gx_sum += to_f32(dy[c]) * to_f32(weight[c]) * (to_f32(x[c]) * s);
  const float gx_mean = warp_sum(gx_sum) / C;
  for (int c = lane; c < C; c += kWarpSize) {
    const float xhat = to_f32(x[c]) * s;
    const float g = to_f32(dy[c]) * to_f32(weight[c]);
    dx[c] = from_f32<T>(to_f32(dx[c]) + (g - xhat * gx_mean) * s);
  }
}

// Pass 1 of the weight gradient: thread (chunk r, channel c) sums dout * xhat over rows
// [r*kRowsPerChunk, (r+1)*kRowsPerChunk) in row order (coalesced: neighbours read neighbours).
template <typename T>
__global__ void rmsnorm_weight_partials_kernel(float* partial_dw, const T* dout, const T* inp,
                                               const float* rstd, int64_t N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t r = blockIdx.y;
  if (c >= C) return;
  const int64_t n0 = r * kRowsPerChunk;
  const int64_t n1 = n0 + kRowsPerChunk < N ? n0 + kRowsPerChunk : N;
  float dw = 0.0f;
  for (int64_t n = n0; n < n1; ++n)
    dw += to_f32(dout[n * C + c]) * (to_f32(inp[n * C + c]) * rstd[n]);
  partial_dw[r * C + c] = dw;
}

// Pass 2: channel c adds its n_chunks partial sums, in chunk order, to the gradient.
template <typename G>
__global__ void rmsnorm_weight_finish_kernel(G* dweight, const float* partial_dw, int64_t n_chunks,
                                             int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float dw = 0.0f;
  for (int64_t r = 0; r < n_chunks; ++r) dw += partial_dw[r * C + c];
  dweight[c] = from_f32<G>(to_f32(dweight[c]) + dw);
}

}  // namespace

void rmsnorm_forward(const OpContext& ctx, DType dtype, void* out, float* rstd, const void* inp,
                     const void* weight, int64_t N, int C, float eps) {
  if (N == 0) return;
  with_storage_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    rmsnorm_forward_kernel<T>
        <<<ceil_div(N, kRowsPerBlock), kRowsPerBlock * kWarpSize, 0, stream_of(ctx)>>>(
            static_cast<T*>(out), rstd, static_cast<const T*>(inp), static_cast<const T*>(weight),
            N, C, eps);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

void rmsnorm_backward_input(const OpContext& ctx, DType dtype, void* dinp, const void* dout,
                            const void* inp, const void* weight, const float* rstd, int64_t N,
                            int C) {
  if (N == 0) return;
  with_storage_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    rmsnorm_backward_input_kernel<T>
        <<<ceil_div(N, kRowsPerBlock), kRowsPerBlock * kWarpSize, 0, stream_of(ctx)>>>(
            static_cast<T*>(dinp), static_cast<const T*>(dout), static_cast<const T*>(inp),
            static_cast<const T*>(weight), rstd, N, C);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

void rmsnorm_backward_weight(const OpContext& ctx, DType dtype, DType grad_dtype, void* dweight,
                             const void* dout, const void* inp, const float* rstd, int64_t N,
                             int C) {
  if (N == 0) return;
  const cudaStream_t stream = stream_of(ctx);
  const int64_t n_chunks = (N + kRowsPerChunk - 1) / kRowsPerChunk;
  TIDE_ASSERT(n_chunks <= 65535);  // the grid's y dimension: N up to 4M rows
  // Scratch: partial_dw (n_chunks, C).
  float* partial_dw = static_cast<float*>(handles_of(ctx).scratch(n_chunks * C * sizeof(float)));
  const dim3 grid(ceil_div(C, kColumnBlock), static_cast<unsigned int>(n_chunks));
  with_storage_types(dtype, grad_dtype, [&](auto tag, auto grad_tag) {
    using T = decltype(tag);
    using G = decltype(grad_tag);
    rmsnorm_weight_partials_kernel<T><<<grid, kColumnBlock, 0, stream>>>(
        partial_dw, static_cast<const T*>(dout), static_cast<const T*>(inp), rstd, N, C);
    TIDE_CUDA_CHECK_LAUNCH();
    rmsnorm_weight_finish_kernel<G><<<ceil_div(C, kColumnBlock), kColumnBlock, 0, stream>>>(
        static_cast<G*>(dweight), partial_dw, n_chunks, C);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

}  // namespace tide::cuda

// LayerNorm over the last dimension on the GPU (same math as cpu/layernorm.cpp), with the
// backward split into the input gradient (B) and the weight gradient (W).
//
// Forward and input gradient: one warp per row (the C channels of a row are strided over the
// 32 lanes, then combined with a shuffle tree). Weight gradient: a column reduction over the
// N rows, done deterministically in two passes (see layernorm_backward_weight).
#include <cmath>

#include "tide/kernels/cuda/common.cuh"
#include "tide/kernels/cuda/context.h"
#include "tide/kernels/cuda/cuda_ops.h"

namespace tide::cuda {

namespace {

constexpr float kEps = 1e-5f;
constexpr int kRowsPerBlock = 8;  // warps per block of the row kernels
// Rows summed by one thread in the first pass of the weight gradient. A constant (not a
// function of the GPU) so that the summation order, and so the result, is the same everywhere.
constexpr int kRowsPerChunk = 64;
constexpr int kColumnBlock = 256;

// Mean and variance in double, two passes (no E[x^2] - E[x]^2 cancellation), like the CPU.
// kResidual: the input row is first formed as res = inp + add, rounded to T and stored (the
// residual stream's next value), then normalised from those stored values: the bits of
// residual_forward then layernorm_forward, one pass over memory fewer. Each lane reads back
// only the channels it wrote, so no barrier is needed.
template <typename T, bool kResidual>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp,
                                         const T* weight, const T* bias, int64_t N, int C, T* res,
                                         const T* add) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (n >= N) return;        // whole warps leave together, so the shuffles below stay full-warp
  const T* x = inp + n * C;  // (C)
  double sum = 0.0;
  if constexpr (kResidual) {
    T* r = res + n * C;
    const T* b = add + n * C;
    for (int c = lane; c < C; c += kWarpSize) {
      r[c] = from_f32<T>(to_f32(x[c]) + to_f32(b[c]));
      sum += to_f32(r[c]);
    }
    x = r;
  } else {
    for (int c = lane; c < C; c += kWarpSize) sum += to_f32(x[c]);
  }
  const double m = warp_sum(sum) / C;
  double sq = 0.0;
  for (int c = lane; c < C; c += kWarpSize) {
    const double d = to_f32(x[c]) - m;
    sq += d * d;
  }
  sq = warp_sum(sq);
  const float mf = static_cast<float>(m);
  const float s = static_cast<float>(1.0 / sqrt(sq / C + static_cast<double>(kEps)));
  T* y = out + n * C;
  for (int c = lane; c < C; c += kWarpSize)
    y[c] = from_f32<T>((to_f32(x[c]) - mf) * s * to_f32(weight[c]) + to_f32(bias[c]));
  if (lane == 0) {
    mean[n] = mf;
    rstd[n] = s;
  }
}

// dx += rstd * (g - mean(g) - xhat * mean(g * xhat)), xhat = (x - mean) * rstd, g = dout * w.
template <typename T>
__global__ void layernorm_backward_input_kernel(T* dinp, const T* dout, const T* inp,
                                                const T* weight, const float* mean,
                                                const float* rstd, int64_t N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (n >= N) return;
  const T* x = inp + n * C;
  const T* dy = dout + n * C;
  T* dx = dinp + n * C;
  const float m = mean[n], s = rstd[n];
  float g_sum = 0.0f, gx_sum = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) {
    const float xhat = (to_f32(x[c]) - m) * s;
    const float g = to_f32(dy[c]) * to_f32(weight[c]);
    g_sum += g;
    gx_sum += g * xhat;
  }
  const float g_mean = warp_sum(g_sum) / C;
  const float gx_mean = warp_sum(gx_sum) / C;
  for (int c = lane; c < C; c += kWarpSize) {
    const float xhat = (to_f32(x[c]) - m) * s;
    const float g = to_f32(dy[c]) * to_f32(weight[c]);
    dx[c] = from_f32<T>(to_f32(dx[c]) + (g - g_mean - xhat * gx_mean) * s);
  }
}

// Pass 1 of the weight gradient: thread (chunk r, channel c) sums dout * xhat and dout over
// rows [r*kRowsPerChunk, (r+1)*kRowsPerChunk) in row order. Neighbouring threads read
// neighbouring channels of the same row, so the loads coalesce.
template <typename T>
__global__ void layernorm_weight_partials_kernel(float* partial_dw, float* partial_db,
                                                 const T* dout, const T* inp, const float* mean,
                                                 const float* rstd, int64_t N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t r = blockIdx.y;
  if (c >= C) return;
  const int64_t n0 = r * kRowsPerChunk;
  const int64_t n1 = n0 + kRowsPerChunk < N ? n0 + kRowsPerChunk : N;
  float dw = 0.0f, db = 0.0f;
  for (int64_t n = n0; n < n1; ++n) {
    const float dy = to_f32(dout[n * C + c]);
    dw += dy * ((to_f32(inp[n * C + c]) - mean[n]) * rstd[n]);
    db += dy;
  }
  partial_dw[r * C + c] = dw;
  partial_db[r * C + c] = db;
}

// Pass 2: channel c adds its n_chunks partial sums, in chunk order, to the gradients.
template <typename G>
__global__ void layernorm_weight_finish_kernel(G* dweight, G* dbias, const float* partial_dw,
                                               const float* partial_db, int64_t n_chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float dw = 0.0f, db = 0.0f;
  for (int64_t r = 0; r < n_chunks; ++r) {
    dw += partial_dw[r * C + c];
    db += partial_db[r * C + c];
  }
  dweight[c] = from_f32<G>(to_f32(dweight[c]) + dw);
  dbias[c] = from_f32<G>(to_f32(dbias[c]) + db);
}

}  // namespace

namespace {
// The forward's launch; kResidual: res = inp + add is formed, stored and normalised.
template <bool kResidual>
void launch_forward(const OpContext& ctx, DType dtype, void* out, float* mean, float* rstd,
                    const void* inp, const void* weight, const void* bias, int64_t N, int C,
                    void* res, const void* add) {
  if (N == 0) return;
  with_storage_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    layernorm_forward_kernel<T, kResidual>
        <<<ceil_div(N, kRowsPerBlock), kRowsPerBlock * kWarpSize, 0, stream_of(ctx)>>>(
            static_cast<T*>(out), mean, rstd, static_cast<const T*>(inp),
            static_cast<const T*>(weight), static_cast<const T*>(bias), N, C, static_cast<T*>(res),
            static_cast<const T*>(add));
  });
  TIDE_CUDA_CHECK_LAUNCH();
}
}  // namespace

void layernorm_forward(const OpContext& ctx, DType dtype, void* out, float* mean, float* rstd,
                       const void* inp, const void* weight, const void* bias, int64_t N, int C) {
  launch_forward<false>(ctx, dtype, out, mean, rstd, inp, weight, bias, N, C, nullptr, nullptr);
}

void residual_layernorm_forward(const OpContext& ctx, DType dtype, void* res, void* out,
                                float* mean, float* rstd, const void* a, const void* b,
                                const void* weight, const void* bias, int64_t N, int C) {
  launch_forward<true>(ctx, dtype, out, mean, rstd, a, weight, bias, N, C, res, b);
}

void layernorm_backward_input(const OpContext& ctx, DType dtype, void* dinp, const void* dout,
                              const void* inp, const void* weight, const float* mean,
                              const float* rstd, int64_t N, int C) {
  if (N == 0) return;
  with_storage_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    layernorm_backward_input_kernel<T>
        <<<ceil_div(N, kRowsPerBlock), kRowsPerBlock * kWarpSize, 0, stream_of(ctx)>>>(
            static_cast<T*>(dinp), static_cast<const T*>(dout), static_cast<const T*>(inp),
            static_cast<const T*>(weight), mean, rstd, N, C);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

void layernorm_backward_weight(const OpContext& ctx, DType dtype, DType grad_dtype, void* dweight,
                               void* dbias, const void* dout, const void* inp, const float* mean,
                               const float* rstd, int64_t N, int C) {
  if (N == 0) return;
  const cudaStream_t stream = stream_of(ctx);
  const int64_t n_chunks = (N + kRowsPerChunk - 1) / kRowsPerChunk;
  TIDE_ASSERT(n_chunks <= 65535);  // the grid's y dimension: N up to 4M rows
  // Scratch: partial_dw (n_chunks, C), partial_db (n_chunks, C).
  float* partial_dw =
      static_cast<float*>(handles_of(ctx).scratch(2 * n_chunks * C * sizeof(float)));
  float* partial_db = partial_dw + n_chunks * C;
  const dim3 grid(ceil_div(C, kColumnBlock), static_cast<unsigned int>(n_chunks));
  with_storage_types(dtype, grad_dtype, [&](auto tag, auto grad_tag) {
    using T = decltype(tag);
    using G = decltype(grad_tag);
    layernorm_weight_partials_kernel<T>
        <<<grid, kColumnBlock, 0, stream>>>(partial_dw, partial_db, static_cast<const T*>(dout),
                                            static_cast<const T*>(inp), mean, rstd, N, C);
    TIDE_CUDA_CHECK_LAUNCH();
    layernorm_weight_finish_kernel<G><<<ceil_div(C, kColumnBlock), kColumnBlock, 0, stream>>>(
        static_cast<G*>(dweight), static_cast<G*>(dbias), partial_dw, partial_db, n_chunks, C);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

}  // namespace tide::cuda

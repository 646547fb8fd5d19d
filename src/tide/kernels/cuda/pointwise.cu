// Element-wise ops on the GPU: GELU, residual add, inverted dropout. Same formulas as
// cpu/pointwise.cpp; one thread per element (per Philox block of a row for dropout).
#include <cmath>

#include "tide/kernels/cuda/common.cuh"
#include "tide/kernels/cuda/context.h"
#include "tide/kernels/cuda/cuda_ops.h"

namespace tide::cuda {

namespace {

constexpr int kBlock = 256;
// sqrt(2/pi) rounded to f32, the value cpu/pointwise.cpp computes as std::sqrt(2.0f / M_PI).
constexpr float kGeluScale = 0.7978845608028654f;

// The CPU kernel's tanh(u) = 1 - 2 / (1 + exp(2u)) (it avoids glibc's slow tanhf); the same
// form here keeps the two within a few ulp of each other. expf overflowing to inf gives 1.
__device__ __forceinline__ float tanh_via_exp(float u) {
  return 1.0f - 2.0f / (1.0f + expf(2.0f * u));
}

// gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float x = to_f32(inp[i]);
  const float u = kGeluScale * (x + 0.044715f * x * x * x);
  out[i] = from_f32<T>(0.5f * x * (1.0f + tanh_via_exp(u)));
}

// gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
template <typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* dout, const T* inp, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float x = to_f32(inp[i]);
  const float u = kGeluScale * (x + 0.044715f * x * x * x);
  const float th = tanh_via_exp(u);
  const float local = 0.5f * (1.0f + th) +
                      0.5f * x * (1.0f - th * th) * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
  dinp[i] = from_f32<T>(to_f32(dinp[i]) + local * to_f32(dout[i]));
}

template <typename T>
__global__ void residual_forward_kernel(T* out, const T* a, const T* b, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i]));
}

// __fdiv_rn: the correctly rounded quotient whatever the compiler's -prec-div, as the CPU's `/`.
template <typename T>
__global__ void divide_by_kernel(T* x, float divisor, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = from_f32<T>(__fdiv_rn(to_f32(x[i]), divisor));
}

template <typename T>
__global__ void residual_backward_kernel(T* da, T* db, const T* dout, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = to_f32(dout[i]);
  da[i] = from_f32<T>(to_f32(da[i]) + g);
  db[i] = from_f32<T>(to_f32(db[i]) + g);
}

// Dropout over (B,T,W), forward (kAccumulate = false: y = x * mult, y may alias x) or
// backward (kAccumulate = true: y += x * mult). The counters of row r = (b,t) are
// [c0, c0 + W), c0 = dropout_row_counter(b,t) (global coordinates, not aligned to 4). Slot k
// of the row takes Philox block c0/4 + k and the row's counters in it, so the generator runs
// once per four elements, as in cpu::dropout_multipliers; `slots` bounds the blocks a row can
// touch, and slots past the row's last block return at once.
template <typename T, bool kAccumulate>
__global__ void dropout_kernel(T* y, const T* x, int64_t rows, int Tn, int64_t W, int64_t slots,
                               DropoutParams d) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * slots) return;
  const int64_t r = idx / slots, k = idx % slots;
  const uint64_t c0 = dropout_row_counter(d, r / Tn, r % Tn);
  const uint64_t block = c0 / 4 + static_cast<uint64_t>(k);
  const uint64_t first = block * 4 > c0 ? block * 4 : c0;
  const uint64_t row_end = c0 + static_cast<uint64_t>(W);
  const uint64_t end = row_end < block * 4 + 4 ? row_end : block * 4 + 4;
  if (first >= end) return;
  const Philox4 rnd = philox_block(d.seed, d.stream, block);
  for (uint64_t c = first; c < end; ++c) {
    const int64_t i = r * W + static_cast<int64_t>(c - c0);
    // __fmul_rn: a product nvcc may not fuse with the add below into one FMA (its default,
    // --fmad=true), which rounds once where the CPU (-ffp-contract=off) rounds twice; the
    // backward then differed from the CPU by 1 ulp in a quarter of the elements (first GPU run).
    const float v = __fmul_rn(to_f32(x[i]), dropout_multiplier_of(d, rnd.v[c % 4]));
    y[i] = from_f32<T>(kAccumulate ? to_f32(y[i]) + v : v);
  }
}

// Philox blocks a row of W consecutive counters can touch, whatever its start: (W + 3)/4 + 1.
inline int64_t dropout_slots(int64_t W) {
  return (W + 3) / 4 + 1;
}

}  // namespace

void gelu_forward(const OpContext& ctx, DType dtype, void* out, const void* inp, int64_t n) {
  if (n == 0) return;
  with_storage_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    gelu_forward_kernel<T><<<ceil_div(n, kBlock), kBlock, 0, stream_of(ctx)>>>(
        static_cast<T*>(out), static_cast<const T*>(inp), n);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

void gelu_backward(const OpContext& ctx, DType dtype, void* dinp, const void* dout, const void* inp,
                   int64_t n) {
  if (n == 0) return;
  with_storage_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    gelu_backward_kernel<T><<<ceil_div(n, kBlock), kBlock, 0, stream_of(ctx)>>>(
        static_cast<T*>(dinp), static_cast<const T*>(dout), static_cast<const T*>(inp), n);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

void residual_forward(const OpContext& ctx, DType dtype, void* out, const void* a, const void* b,
                      int64_t n) {
  if (n == 0) return;
  with_storage_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    residual_forward_kernel<T><<<ceil_div(n, kBlock), kBlock, 0, stream_of(ctx)>>>(
        static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

void divide_by(const OpContext& ctx, DType dtype, void* x, float divisor, int64_t n) {
  if (n == 0) return;
  with_storage_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    divide_by_kernel<T>
        <<<ceil_div(n, kBlock), kBlock, 0, stream_of(ctx)>>>(static_cast<T*>(x), divisor, n);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

void residual_backward(const OpContext& ctx, DType dtype, void* da, void* db, const void* dout,
                       int64_t n) {
  if (n == 0) return;
  with_storage_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    residual_backward_kernel<T><<<ceil_div(n, kBlock), kBlock, 0, stream_of(ctx)>>>(
        static_cast<T*>(da), static_cast<T*>(db), static_cast<const T*>(dout), n);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

void dropout_forward(const OpContext& ctx, DType dtype, void* out, const void* inp, int64_t B,
                     int64_t T, int64_t W, const DropoutSpec& dropout) {
  const int64_t n = B * T * W;
  if (n == 0) return;
  const cudaStream_t stream = stream_of(ctx);
  if (!dropout.enabled()) {
    if (out != inp)
      TIDE_CUDA_CHECK(cudaMemcpyAsync(out, inp, static_cast<size_t>(n) * dtype_size(dtype),
                                      cudaMemcpyDeviceToDevice, stream));
    return;
  }
  const int64_t slots = dropout_slots(W);
  with_storage_type(dtype, [&](auto tag) {
    using S = decltype(tag);
    dropout_kernel<S, false><<<ceil_div(B * T * slots, kBlock), kBlock, 0, stream>>>(
        static_cast<S*>(out), static_cast<const S*>(inp), B * T, static_cast<int>(T), W, slots,
        dropout_params(dropout, T, W));
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

void dropout_backward(const OpContext& ctx, DType dtype, void* dinp, const void* dout, int64_t B,
                      int64_t T, int64_t W, const DropoutSpec& dropout) {
  const int64_t n = B * T * W;
  if (n == 0) return;
  if (!dropout.enabled()) {
    residual_forward(ctx, dtype, dinp, dinp, dout, n);  // dinp += dout
    return;
  }
  const int64_t slots = dropout_slots(W);
  with_storage_type(dtype, [&](auto tag) {
    using S = decltype(tag);
    dropout_kernel<S, true><<<ceil_div(B * T * slots, kBlock), kBlock, 0, stream_of(ctx)>>>(
        static_cast<S*>(dinp), static_cast<const S*>(dout), B * T, static_cast<int>(T), W, slots,
        dropout_params(dropout, T, W));
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

}  // namespace tide::cuda

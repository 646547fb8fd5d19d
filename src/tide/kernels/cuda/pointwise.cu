// Element-wise ops on the GPU: GELU, residual add, inverted dropout. Same formulas as
// cpu/pointwise.cpp; one thread per element (per four elements for dropout).
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

template <typename T>
__global__ void residual_backward_kernel(T* da, T* db, const T* dout, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = to_f32(dout[i]);
  da[i] = from_f32<T>(to_f32(da[i]) + g);
  db[i] = from_f32<T>(to_f32(db[i]) + g);
}

// Dropout, forward (kAccumulate = false: y = x * mult, y may alias x) or backward
// (kAccumulate = true: y += x * mult). Each thread takes the four elements of one Philox
// block, so the generator runs once per four elements, as in cpu::dropout_multipliers.
template <typename T, bool kAccumulate>
__global__ void dropout_kernel(T* y, const T* x, int64_t n, DropoutParams d) {
  const int64_t i0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
  if (i0 >= n) return;
  const Philox4 r = philox_block(d.seed, d.stream, static_cast<uint64_t>(i0) / 4);
  for (int k = 0; k < 4 && i0 + k < n; ++k) {
    const int64_t i = i0 + k;
    const float v = to_f32(x[i]) * dropout_multiplier_of(d, r.v[k]);
    y[i] = from_f32<T>(kAccumulate ? to_f32(y[i]) + v : v);
  }
}

}  // namespace

void gelu_forward(int device, float* out, const float* inp, int64_t n) {
  if (n == 0) return;
  const DeviceContext& ctx = context(device);
  gelu_forward_kernel<float><<<ceil_div(n, kBlock), kBlock, 0, ctx.stream()>>>(out, inp, n);
  TIDE_CUDA_CHECK_LAUNCH();
}

void gelu_backward(int device, float* dinp, const float* dout, const float* inp, int64_t n) {
  if (n == 0) return;
  const DeviceContext& ctx = context(device);
  gelu_backward_kernel<float><<<ceil_div(n, kBlock), kBlock, 0, ctx.stream()>>>(dinp, dout, inp, n);
  TIDE_CUDA_CHECK_LAUNCH();
}

void residual_forward(int device, float* out, const float* a, const float* b, int64_t n) {
  if (n == 0) return;
  const DeviceContext& ctx = context(device);
  residual_forward_kernel<float><<<ceil_div(n, kBlock), kBlock, 0, ctx.stream()>>>(out, a, b, n);
  TIDE_CUDA_CHECK_LAUNCH();
}

void residual_backward(int device, float* da, float* db, const float* dout, int64_t n) {
  if (n == 0) return;
  const DeviceContext& ctx = context(device);
  residual_backward_kernel<float>
      <<<ceil_div(n, kBlock), kBlock, 0, ctx.stream()>>>(da, db, dout, n);
  TIDE_CUDA_CHECK_LAUNCH();
}

void dropout_forward(int device, float* out, const float* inp, int64_t n,
                     const DropoutSpec& dropout) {
  if (n == 0) return;
  const DeviceContext& ctx = context(device);
  if (!dropout.enabled()) {
    if (out != inp)
      TIDE_CUDA_CHECK(cudaMemcpyAsync(out, inp, static_cast<size_t>(n) * sizeof(float),
                                      cudaMemcpyDeviceToDevice, ctx.stream()));
    return;
  }
  dropout_kernel<float, false><<<ceil_div(ceil_div(n, 4), kBlock), kBlock, 0, ctx.stream()>>>(
      out, inp, n, dropout_params(dropout));
  TIDE_CUDA_CHECK_LAUNCH();
}

void dropout_backward(int device, float* dinp, const float* dout, int64_t n,
                      const DropoutSpec& dropout) {
  if (n == 0) return;
  if (!dropout.enabled()) {
    residual_forward(device, dinp, dinp, dout, n);  // dinp += dout
    return;
  }
  const DeviceContext& ctx = context(device);
  dropout_kernel<float, true><<<ceil_div(ceil_div(n, 4), kBlock), kBlock, 0, ctx.stream()>>>(
      dinp, dout, n, dropout_params(dropout));
  TIDE_CUDA_CHECK_LAUNCH();
}

}  // namespace tide::cuda

#pragma once
// Shared device helpers of the CUDA kernels: storage-type loads/stores, deterministic warp
// and block reductions, launch helpers. Internal to tide_kernels' .cu files.
//
// Storage types: kernels are templates over the element type T of their float tensors (float,
// __nv_bfloat16, __half) and compute in f32 (or f64 where the CPU reference does); a 16-bit
// result is rounded to nearest-even once, as the CPU reference (cpu/f32_buffer.h) rounds it.
// The statistics (layernorm's mean and rstd, cross-entropy's losses) are f32 in every case.
// with_storage_type turns the op's DType into T at the entry points.
//
// Determinism: every reduction here combines values in an order fixed by the block size and
// the data size only (shuffle trees, then shared memory in warp order), never by timing, so a
// kernel gives the same bits on every run. No kernel uses floating-point atomics.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "tide/kernels/cuda/cuda_check.h"
#include "tide/kernels/cuda/philox.cuh"
#include "tide/kernels/ops.h"

namespace tide::cuda {

constexpr int kWarpSize = 32;

__device__ __forceinline__ float to_f32(float x) {
  return x;
}
template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
__device__ __forceinline__ float to_f32(__half x) {
  return __half2float(x);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) {
  return __float2half_rn(x);
}

// Calls f(T{}) with T the storage type of `dtype`: float, __nv_bfloat16 or __half (ops.cpp
// admits nothing else to a CUDA kernel).
template <typename F>
void with_storage_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::F32:
      f(float{});
      return;
    case DType::BF16:
      f(__nv_bfloat16{});
      return;
    case DType::F16:
      f(__half{});
      return;
    default:
      TIDE_FAIL("CUDA kernels: storage dtype {} is not a float type", dtype_name(dtype));
  }
}

// Calls f(A{}, B{}) with A and B the storage types of `a` and `b` (an op whose tensors keep
// two dtypes: cuda_ops.h).
template <typename F>
void with_storage_types(DType a, DType b, F&& f) {
  with_storage_type(a, [&](auto ta) { with_storage_type(b, [&](auto tb) { f(ta, tb); }); });
}

// Sum / max over the 32 lanes of a warp (butterfly: every lane gets the result).
template <typename A>
__device__ __forceinline__ A warp_sum(A x) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

// Sum over all threads of the block (blockDim.x a multiple of 32, at most 1024); every thread
// gets the result. `shared` must hold 32 values. Ends with a barrier, so it can be called
// again with the same shared buffer.
template <typename A>
__device__ A block_sum(A x, A* shared) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int n_warps = blockDim.x / kWarpSize;
  x = warp_sum(x);
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  A total = lane < n_warps ? shared[lane] : A(0);
  total = warp_sum(total);
  __syncthreads();
  return total;
}
__device__ inline float block_max(float x, float* shared) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int n_warps = blockDim.x / kWarpSize;
  x = warp_max(x);
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  float m = lane < n_warps ? shared[lane] : -INFINITY;
  m = warp_max(m);
  __syncthreads();
  return m;
}

inline unsigned int ceil_div(int64_t a, int64_t b) {
  return static_cast<unsigned int>((a + b - 1) / b);
}

// Checks that the last kernel launch was accepted (bad configuration, no device ...).
#define TIDE_CUDA_CHECK_LAUNCH() TIDE_CUDA_CHECK(cudaGetLastError())

// The dropout spec of the op API as kernel parameters for a tensor of T positions and W
// columns (W = heads for attention), its defaults resolved; the keep scale is computed exactly
// as cpu::dropout_keep_scale computes it.
inline DropoutParams dropout_params(const DropoutSpec& spec, int64_t T, int64_t W) {
  DropoutParams d;
  d.enabled = spec.enabled();
  d.p = spec.p;
  d.scale = 1.0f / (1.0f - spec.p);
  d.seed = spec.seed;
  d.stream = spec.stream;
  d.seq0 = spec.seq0;
  d.pos0 = spec.pos0;
  d.seq_stride = spec.seq_stride > 0 ? spec.seq_stride : T;
  d.width_full = spec.width_full > 0 ? spec.width_full : W;
  d.col0 = spec.col0;
  return d;
}

}  // namespace tide::cuda

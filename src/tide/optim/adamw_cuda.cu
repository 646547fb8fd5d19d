// CUDA fused AdamW: see adamw_cuda.h. In the CUDA module (core/cuda_module.h); adamw_cuda.cpp
// checks the arguments and calls these through the optim floor's table.

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "tide/core/cuda_module.h"
#include "tide/core/error.h"
#include "tide/optim/cuda_table.h"
#include "tide/optim/load_grad.cuh"

namespace tide {
namespace {

enum class Out { kNone, kF32, kBF16, kF16 };

// tide::f32_to_bf16's recipe (round to nearest even, NaN kept quiet), bit for bit.
__device__ __forceinline__ uint16_t to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// One element, in the order of adamw.h; _rn intrinsics are never fused into FMAs.
__device__ __forceinline__ void adamw_element(float& p, float g, float& m, float& v,
                                              const AdamWScalars& k) {
  g = __fmul_rn(g, k.grad_scale);
  if (k.l2 != 0.0f) g = __fadd_rn(g, __fmul_rn(k.l2, p));  // classic Adam's L2 term (adamw.h)
  const float decayed = __fmul_rn(p, k.decay);
  m = __fadd_rn(__fmul_rn(k.beta1, m), __fmul_rn(k.one_minus_beta1, g));
  v = __fadd_rn(__fmul_rn(k.beta2, v), __fmul_rn(__fmul_rn(k.one_minus_beta2, g), g));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), k.bc2_sqrt), k.eps);
  p = __fsub_rn(decayed, __fdiv_rn(__fmul_rn(k.step_size, m), denom));
}

template <Out O>
__device__ __forceinline__ void store_param(void* out, int64_t i, float p) {
  if constexpr (O == Out::kF32) static_cast<float*>(out)[i] = p;
  if constexpr (O == Out::kBF16) static_cast<uint16_t*>(out)[i] = to_bf16(p);
  if constexpr (O == Out::kF16) static_cast<__half*>(out)[i] = __float2half_rn(p);
}

// Grid-stride loop; each thread takes 4 consecutive elements so that the f32 arrays move as
// float4 (16-byte) transactions when the chunk is 16-byte aligned (Vec4).
template <DType G, Out O, bool Vec4>
__global__ void adamw_kernel(float* __restrict__ master, const void* __restrict__ grad,
                             float* __restrict__ m, float* __restrict__ v, void* __restrict__ out,
                             int64_t n, AdamWScalars k, const int* __restrict__ skip_flag) {
  if (skip_flag && *skip_flag) return;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * 4;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4; i < n;
       i += stride) {
    if (Vec4 && i + 4 <= n) {
      float4 p = *reinterpret_cast<float4*>(master + i);
      float4 mm = *reinterpret_cast<float4*>(m + i);
      float4 vv = *reinterpret_cast<float4*>(v + i);
      adamw_element(p.x, load_grad<G>(grad, i + 0), mm.x, vv.x, k);
      adamw_element(p.y, load_grad<G>(grad, i + 1), mm.y, vv.y, k);
      adamw_element(p.z, load_grad<G>(grad, i + 2), mm.z, vv.z, k);
      adamw_element(p.w, load_grad<G>(grad, i + 3), mm.w, vv.w, k);
      *reinterpret_cast<float4*>(master + i) = p;
      *reinterpret_cast<float4*>(m + i) = mm;
      *reinterpret_cast<float4*>(v + i) = vv;
      store_param<O>(out, i + 0, p.x);
      store_param<O>(out, i + 1, p.y);
      store_param<O>(out, i + 2, p.z);
      store_param<O>(out, i + 3, p.w);
    } else {
      for (int64_t j = i; j < i + 4 && j < n; ++j) {
        adamw_element(master[j], load_grad<G>(grad, j), m[j], v[j], k);
        store_param<O>(out, j, master[j]);
      }
    }
  }
}

template <typename T, uint32_t kExp>
__global__ void nonfinite_kernel(const T* __restrict__ x, int64_t n, int* flag) {
  bool bad = false;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    bad |= (static_cast<uint32_t>(x[i]) & kExp) == kExp;
  if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1;
}

void check_cuda(cudaError_t e, const char* what) {
  TIDE_CHECK(e == cudaSuccess,
             "CUDA error in {}: {}; check that a GPU is visible and the "
             "pointers are device memory",
             what, cudaGetErrorString(e));
}

constexpr int kThreads = 256;

int blocks_for(int64_t work) {
  // Enough blocks to fill the GPU several times over; the grid-stride loop does the rest.
  const int64_t b = (work + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

bool aligned(const void* p, uintptr_t a) {
  return reinterpret_cast<uintptr_t>(p) % a == 0;
}

template <DType G, Out O>
void launch(const AdamWChunk& c, const AdamWScalars& k, const int* skip, cudaStream_t st) {
  const bool vec = aligned(c.master, 16) && aligned(c.m, 16) && aligned(c.v, 16);
  const int blocks = blocks_for((c.n + 3) / 4);
  if (vec)
    adamw_kernel<G, O, true>
        <<<blocks, kThreads, 0, st>>>(c.master, c.grad, c.m, c.v, c.param_out, c.n, k, skip);
  else
    adamw_kernel<G, O, false>
        <<<blocks, kThreads, 0, st>>>(c.master, c.grad, c.m, c.v, c.param_out, c.n, k, skip);
}

template <DType G>
void launch_out(const AdamWChunk& c, const AdamWScalars& k, const int* skip, cudaStream_t st) {
  if (!c.param_out) return launch<G, Out::kNone>(c, k, skip, st);
  switch (c.param_dtype) {
    case DType::F32:
      return launch<G, Out::kF32>(c, k, skip, st);
    case DType::F16:
      return launch<G, Out::kF16>(c, k, skip, st);
    default:
      return launch<G, Out::kBF16>(c, k, skip, st);
  }
}

// adamw_cuda after adamw_cuda.cpp's checks (valid arguments, n > 0).
void adamw(const AdamWChunk& c, const AdamWHyper& h, const AdamWStep& s, const int* skip_flag,
           void* stream) {
  const AdamWScalars k = adamw_scalars(h, s);
  const auto st = static_cast<cudaStream_t>(stream);
  switch (c.grad_dtype) {
    case DType::BF16:
      launch_out<DType::BF16>(c, k, skip_flag, st);
      break;
    case DType::F16:
      launch_out<DType::F16>(c, k, skip_flag, st);
      break;
    default:
      launch_out<DType::F32>(c, k, skip_flag, st);
      break;
  }
  check_cuda(cudaGetLastError(), "adamw_cuda launch");
}

// grad_nonfinite_cuda for n > 0.
void grad_nonfinite(const void* grad, DType dtype, int64_t n, int* flag, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  const int blocks = blocks_for(n);
  switch (dtype) {
    case DType::F32:
      nonfinite_kernel<uint32_t, 0x7f800000u>
          <<<blocks, kThreads, 0, st>>>(static_cast<const uint32_t*>(grad), n, flag);
      break;
    case DType::BF16:
      nonfinite_kernel<uint16_t, 0x7f80u>
          <<<blocks, kThreads, 0, st>>>(static_cast<const uint16_t*>(grad), n, flag);
      break;
    case DType::F16:
      nonfinite_kernel<uint16_t, 0x7c00u>
          <<<blocks, kThreads, 0, st>>>(static_cast<const uint16_t*>(grad), n, flag);
      break;
    default:
      TIDE_FAIL("gradients of dtype {} cannot be checked for NaN/Inf; use f32, bf16 or f16",
                dtype_name(dtype));
  }
  check_cuda(cudaGetLastError(), "grad_nonfinite_cuda launch");
}

}  // namespace
}  // namespace tide

TIDE_CUDA_MODULE_ENTRY const tide::CudaOptimTable* tide_cuda_optim() {
  static const tide::CudaOptimTable table{sizeof(tide::CudaOptimTable), &tide::adamw,
                                          &tide::grad_nonfinite, &tide::grad_norm_squared_kernels};
  return &table;
}

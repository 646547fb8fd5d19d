// grad_norm_cuda.h's kernels: the CPU's blocked sum of squares (grad_norm.cpp), bit for bit.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "tide/core/cuda_module.h"
#include "tide/core/error.h"
#include "tide/optim/cuda_table.h"
#include "tide/optim/load_grad.cuh"

namespace tide {
namespace {

constexpr int kThreads = 256;  // 32 groups of 8 lanes: 32 blocks of kNormBlock per CUDA block

// Thread t: block t / 8 of `block` elements (grad_norm.h's kNormBlock), lane t % 8. Every thread of
// a warp takes part in the shuffles (a thread past the last block carries 0).
template <DType D>
__global__ void block_sums_kernel(const void* __restrict__ x, int64_t n, int64_t block_elems,
                                  int64_t blocks, double* __restrict__ sums) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t block = t / 8;
  const int lane = static_cast<int>(t % 8);
  double acc = 0.0;
  if (block < blocks) {
    const int64_t begin = block * block_elems;
    const int64_t len = n - begin < block_elems ? n - begin : block_elems;
    for (int64_t i = lane; i < len; i += 8) {
      const double d = load_grad<D>(x, begin + i);
      acc = __dadd_rn(acc, __dmul_rn(d, d));
    }
  }
  const int base = (threadIdx.x & 31) & ~7;  // the group's first lane in the warp
  double a[8];
  for (int k = 0; k < 8; ++k) a[k] = __shfl_sync(0xffffffffu, acc, base + k);
  if (lane == 0 && block < blocks)
    sums[block] = __dadd_rn(__dadd_rn(__dadd_rn(a[0], a[1]), __dadd_rn(a[2], a[3])),
                            __dadd_rn(__dadd_rn(a[4], a[5]), __dadd_rn(a[6], a[7])));
}

__global__ void add_in_order_kernel(const double* __restrict__ sums, int64_t blocks,
                                    double* __restrict__ out) {
  double total = 0.0;
  for (int64_t b = 0; b < blocks; ++b) total = __dadd_rn(total, sums[b]);
  *out = total;
}

void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  TIDE_CHECK(e == cudaSuccess, "CUDA error in {}: {}", what, cudaGetErrorString(e));
}

}  // namespace

void grad_norm_squared_kernels(const void* x, DType dtype, int64_t n, int64_t block_elems,
                               double* out, double* scratch, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  const int64_t blocks = (n + block_elems - 1) / block_elems;
  if (blocks > 0) {
    const int64_t grid = (blocks * 8 + kThreads - 1) / kThreads;
    switch (dtype) {
      case DType::F32:
        block_sums_kernel<DType::F32>
            <<<grid, kThreads, 0, st>>>(x, n, block_elems, blocks, scratch);
        break;
      case DType::BF16:
        block_sums_kernel<DType::BF16>
            <<<grid, kThreads, 0, st>>>(x, n, block_elems, blocks, scratch);
        break;
      case DType::F16:
        block_sums_kernel<DType::F16>
            <<<grid, kThreads, 0, st>>>(x, n, block_elems, blocks, scratch);
        break;
      default:
        TIDE_FAIL("gradient norm of dtype {} is not supported; use f32, bf16 or f16",
                  dtype_name(dtype));
    }
    check_launch("grad_norm_squared_cuda (block sums)");
  }
  add_in_order_kernel<<<1, 1, 0, st>>>(scratch, blocks, out);
  check_launch("grad_norm_squared_cuda (total)");
}

}  // namespace tide

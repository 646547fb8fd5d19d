// grad_norm_cuda.h's functions: the arguments are checked here, on the host, then the kernels
// run in the CUDA module (grad_norm_cuda.cu), loaded by the first call (core/cuda_module.h).
#include "tide/optim/grad_norm_cuda.h"

#include "tide/core/arena.h"
#include "tide/core/cuda_module.h"
#include "tide/core/error.h"
#include "tide/optim/cuda_table.h"
#include "tide/optim/grad_norm.h"

namespace tide {

int64_t grad_norm_scratch_doubles(int64_t n) {
  return n <= 0 ? 1 : (n + kNormBlock - 1) / kNormBlock;
}

size_t grad_sums_arena_bytes(int64_t tensors, int64_t largest) {
  const auto doubles = static_cast<size_t>(tensors + grad_norm_scratch_doubles(largest));
  return Arena::aligned(sizeof(double) * doubles + 2 * Arena::kAlign);
}

void grad_norm_squared_cuda(const void* x, DType dtype, int64_t n, double* out, double* scratch,
                            void* stream) {
  TIDE_CHECK(n >= 0 && (n == 0 || x) && out && scratch,
             "grad_norm_squared_cuda: n = {}, x {}, out {}, scratch {}; give n >= 0 elements and "
             "device pointers",
             n, x ? "set" : "null", out ? "set" : "null", scratch ? "set" : "null");
  TIDE_CHECK(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16,
             "grad_norm_squared_cuda: dtype {}; the gradient norm supports f32, bf16 and f16",
             dtype_name(dtype));
  cuda_module_table<CudaOptimTable>("tide_cuda_optim", "grad_norm_squared_cuda was called")
      .grad_norm_squared(x, dtype, n, kNormBlock, out, scratch, stream);
}

}  // namespace tide

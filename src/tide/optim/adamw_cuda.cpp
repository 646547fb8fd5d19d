// adamw_cuda.h's functions: the arguments are checked here, on the host, then the kernels run
// in the CUDA module (adamw_cuda.cu), loaded by the first call (core/cuda_module.h).
#include "tide/optim/adamw_cuda.h"

#include "tide/core/cuda_module.h"
#include "tide/core/error.h"
#include "tide/optim/cuda_table.h"

namespace tide {

namespace {
const CudaOptimTable& optim_kernels(const char* who) {
  return cuda_module_table<CudaOptimTable>("tide_cuda_optim", fmt::format("{} was called", who));
}
}  // namespace

void adamw_cuda(const AdamWChunk& c, const AdamWHyper& h, const AdamWStep& s, const int* skip_flag,
                void* stream) {
  check_adamw_args(h, s);
  check_adamw_chunk(c);
  if (c.n == 0) return;
  optim_kernels("adamw_cuda").adamw(c, h, s, skip_flag, stream);
}

void grad_nonfinite_cuda(const void* grad, DType dtype, int64_t n, int* flag, void* stream) {
  if (n == 0) return;
  optim_kernels("grad_nonfinite_cuda").grad_nonfinite(grad, dtype, n, flag, stream);
}

}  // namespace tide

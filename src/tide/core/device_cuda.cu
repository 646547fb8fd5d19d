// CUDA side of core/device.h, in the CUDA module (core/cuda_module.h): the GPU count behind
// cuda_available(), also used by the kernels' make_op_context.
#include <cuda_runtime.h>

#include "tide/core/cuda_module.h"
#include "tide/core/cuda_table.h"

namespace tide::cuda {

// Number of GPUs visible to the process (0 without a driver or a GPU); queried once.
int device_count() {
  static const int n = [] {
    int count = 0;
    // No driver or no GPU: the runtime reports an error, which here just means "none".
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      cudaGetLastError();  // reset the last-error state so that later checks start clean
      return 0;
    }
    return count;
  }();
  return n;
}

}  // namespace tide::cuda

TIDE_CUDA_MODULE_ENTRY const tide::CudaCoreTable* tide_cuda_core() {
  static const tide::CudaCoreTable table{sizeof(tide::CudaCoreTable), &tide::cuda::device_count};
  return &table;
}

// CUDA side of core/device.h, in the CUDA module (core/cuda_module.h): the GPU count behind
// cuda_available(), also used by the kernels' make_op_context, and copy_device_bytes.
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

// cudaMemcpy between two device buffers may return before the copy ends: the device
// synchronisation makes it blocking, as its callers (a one-rank group's collectives, ordered by
// the caller's own stream synchronisation) need.
const char* copy_blocking(void* dst, const void* src, size_t bytes) {
  cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

}  // namespace tide::cuda

TIDE_CUDA_MODULE_ENTRY const tide::CudaCoreTable* tide_cuda_core() {
  static const tide::CudaCoreTable table{sizeof(tide::CudaCoreTable), &tide::cuda::device_count,
                                         &tide::cuda::copy_blocking};
  return &table;
}

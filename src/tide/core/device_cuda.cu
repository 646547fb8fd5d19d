// CUDA side of core/device.h: only compiled when nvcc is found.
#include <cuda_runtime.h>

#include "tide/core/device.h"

namespace tide {

bool cuda_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

}  // namespace tide

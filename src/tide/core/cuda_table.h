#pragma once
// What the CUDA module (core/cuda_module.h) offers the core floor: the number of visible GPUs,
// behind cuda_available(). Implemented by core/device_cuda.cu. C++17-clean.

#include <cstddef>

namespace tide {

struct CudaCoreTable {
  size_t size = sizeof(CudaCoreTable);
  int (*device_count)() = nullptr;  // GPUs visible to the process, 0 without a driver or a GPU
};

}  // namespace tide

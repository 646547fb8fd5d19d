#pragma once
// What the CUDA module (core/cuda_module.h) offers the core floor: the number of visible GPUs,
// behind cuda_available(), and a blocking copy behind copy_device_bytes(). Implemented by
// core/device_cuda.cu. C++17-clean.

#include <cstddef>

namespace tide {

struct CudaCoreTable {
  size_t size = sizeof(CudaCoreTable);
  int (*device_count)() = nullptr;  // GPUs visible to the process, 0 without a driver or a GPU
  // Copies `bytes` between any two memories the CUDA runtime can address and returns when the
  // copy is done; an error message (static storage) or nullptr.
  const char* (*copy_blocking)(void* dst, const void* src, size_t bytes) = nullptr;
};

}  // namespace tide

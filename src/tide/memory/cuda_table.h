#pragma once
// What the CUDA module (core/cuda_module.h) offers the memory floor: device memory, behind
// make_cuda_allocator (allocator.h). Implemented by cuda_allocator.cu. C++17-clean.

#include <cstddef>
#include <memory>

#include "tide/memory/allocator.h"

namespace tide {

struct CudaMemoryTable {
  size_t size = sizeof(CudaMemoryTable);
  std::unique_ptr<Allocator> (*make_allocator)(Device device, size_t limit_bytes) = nullptr;
};

}  // namespace tide

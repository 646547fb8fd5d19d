#pragma once
// What the CUDA module (core/cuda_module.h) offers the memory floor: device memory and
// page-locked host memory, behind make_cuda_allocator and make_host_allocator (allocator.h).
// Implemented by cuda_allocator.cu. C++17-clean.

#include <cstddef>
#include <memory>

#include "tide/memory/allocator.h"

namespace tide {

struct CudaMemoryTable {
  size_t size = sizeof(CudaMemoryTable);
  std::unique_ptr<Allocator> (*make_allocator)(Device device, size_t limit_bytes) = nullptr;
  // Page-locked host memory (cudaHostAlloc, portable to every GPU), zero-filled.
  std::unique_ptr<Allocator> (*make_pinned_allocator)() = nullptr;
  // cudaMemGetInfo on GPU `device`: an error message (static storage) or nullptr.
  const char* (*memory_info)(int device, size_t* free_bytes, size_t* total_bytes) = nullptr;
};

}  // namespace tide

#pragma once
// Device memory for model data: the allocators of core/allocator.h, plus the CUDA allocator,
// which lives in the CUDA module (memory/cuda_allocator.cu).

#include <memory>

#include "tide/core/allocator.h"

namespace tide {

// Device memory on `device` (cudaMalloc + cudaMemset), from the CUDA module (loaded by the
// first call; core/cuda_module.h); throws a tide::Error in builds without CUDA or when the module
// cannot be loaded.
std::unique_ptr<Allocator> make_cuda_allocator(Device device, size_t limit_bytes = 0);

}  // namespace tide

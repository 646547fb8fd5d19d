#include "tide/memory/allocator.h"

#include "tide/core/cuda_module.h"
#include "tide/core/error.h"
#include "tide/memory/cuda_table.h"

namespace tide {

std::unique_ptr<Allocator> make_cuda_allocator(Device device, size_t limit_bytes) {
  TIDE_CHECK(device.is_cuda(), "make_cuda_allocator needs a CUDA device (got {})", device.str());
  return cuda_module_table<CudaMemoryTable>(
             "tide_cuda_memory", fmt::format("device memory on {} was asked for", device.str()))
      .make_allocator(device, limit_bytes);
}

}  // namespace tide

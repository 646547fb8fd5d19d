#include "tide/memory/allocator.h"

#include <algorithm>

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

std::unique_ptr<Allocator> make_host_allocator(Device device, bool pinned,
                                               const std::string& off_key) {
  if (!pinned || device.is_cpu()) return std::make_unique<HostAllocator>();
  std::unique_ptr<Allocator> a =
      device.is_sim() ? std::make_unique<SimPinnedAllocator>()
                      : cuda_module_table<CudaMemoryTable>(
                            "tide_cuda_memory",
                            fmt::format("pinned host memory for {} was asked for", device.str()))
                            .make_pinned_allocator();
  a->set_failure_advice(
      "page-locked memory is committed at once and never swapped out: free host memory" +
      (off_key.empty() ? std::string()
                       : fmt::format(", or set {}=false for pageable memory (whose copies block "
                                     "the host)",
                                     off_key)));
  return a;
}

DeviceMemoryInfo cuda_memory_info(Device device) {
  TIDE_CHECK(device.is_cuda(), "cuda_memory_info needs a CUDA device (got {})", device.str());
  size_t free_bytes = 0, total_bytes = 0;
  const char* error =
      cuda_module_table<CudaMemoryTable>(
          "tide_cuda_memory", fmt::format("the memory of {} was asked for", device.str()))
          .memory_info(device.index, &free_bytes, &total_bytes);
  TIDE_CHECK(error == nullptr, "cudaMemGetInfo on {}: {}", device.str(), error);
  return {static_cast<int64_t>(free_bytes), static_cast<int64_t>(total_bytes)};
}

int64_t auto_device_margin(int64_t total_bytes) {
  return std::max(int64_t{2} << 30, total_bytes / 20);
}

int64_t default_auto_device_limit(const DeviceMemoryInfo& memory) {
  const int64_t margin = auto_device_margin(memory.total_bytes);
  TIDE_CHECK(memory.free_bytes > margin,
             "placement.policy=auto: the GPU has {:.2f} GiB free, not more than the {:.2f} GiB "
             "margin kept outside the placement budget; free the GPU, or set "
             "placement.device_memory_limit",
             memory.free_bytes / double(1 << 30), margin / double(1 << 30));
  return memory.free_bytes - margin;
}

}  // namespace tide

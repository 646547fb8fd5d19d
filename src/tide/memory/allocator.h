#pragma once
// Device memory for model data: the allocators of core/allocator.h, plus the CUDA allocator,
// which lives in the CUDA module (memory/cuda_allocator.cu).

#include <cstdint>
#include <memory>

#include "tide/core/allocator.h"

namespace tide {

// Device memory on `device` (cudaMalloc + cudaMemset), from the CUDA module (loaded by the
// first call; core/cuda_module.h); throws a tide::Error in builds without CUDA or when the module
// cannot be loaded.
std::unique_ptr<Allocator> make_cuda_allocator(Device device, size_t limit_bytes = 0);

// Host memory for buffers that `device`'s copies read or write (offload's slices, auto
// placement's host tier, the checkpointed activations, the tokens going up): page-locked when
// `pinned` and `device` is a GPU (cudaHostAlloc, from the CUDA module) or the simulated device
// (SimPinnedAllocator), so that the copies overlap compute; plain host memory otherwise (on a
// GPU cudaMemcpyAsync then returns only once its copy is done). Pinned memory is committed at
// once and cannot be swapped: an allocation the host cannot pin fails with a tide::Error that
// names `off_key`, the config key whose false gives pageable memory instead (none: the advice is
// to free host memory).
std::unique_ptr<Allocator> make_host_allocator(Device device, bool pinned,
                                               const std::string& off_key = {});

// GPU `device`'s free and total bytes now (cudaMemGetInfo), from the CUDA module.
struct DeviceMemoryInfo {
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
};
DeviceMemoryInfo cuda_memory_info(Device device);

// placement.policy=auto's budget on a GPU when placement.device_memory_limit is 0: the device's
// free memory when the run starts, less a margin for what tide allocates outside its budgeted
// allocator (kernel scratch, such as tide's f32 attention's (B,NH,T,T) buffers, the cuBLAS and
// cuDNN workspaces, NCCL's buffers) and for other processes: 5% of the device's memory, at least
// 2 GiB. tide estimate sizes --gpu-mem's GPU the same way (free = total). Throws when the margin
// leaves nothing.
int64_t auto_device_margin(int64_t total_bytes);
int64_t default_auto_device_limit(const DeviceMemoryInfo& memory);

}  // namespace tide

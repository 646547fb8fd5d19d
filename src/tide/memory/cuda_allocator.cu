// Device memory for chunks: cudaMalloc'd and zero-filled, counted like every allocator; and
// page-locked host memory (cudaHostAlloc) for the host ends of the device's copies, which
// cudaMemcpyAsync can then overlap with compute.
// In the CUDA module (core/cuda_module.h); make_cuda_allocator (allocator.cpp) reaches it
// through the memory floor's table.
#include <cuda_runtime.h>

#include <cstring>

#include "tide/core/cuda_module.h"
#include "tide/memory/allocator.h"
#include "tide/memory/cuda_table.h"

namespace tide {
namespace {

class CudaAllocator : public Allocator {
 public:
  CudaAllocator(Device device, size_t limit) : device_(device) { limit_ = limit; }
  Device device() const override { return device_; }
  Tier tier() const override { return Tier::COMPUTE; }
  std::string name() const override { return device_.str(); }

 protected:
  void* do_allocate(size_t bytes) override {
    void* p = nullptr;
    if (cudaSetDevice(device_.index) != cudaSuccess) return nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky error: out of memory is reported by the caller
      return nullptr;
    }
    if (cudaMemset(p, 0, bytes) != cudaSuccess) {
      cudaFree(p);
      return nullptr;
    }
    return p;
  }
  void do_free(void* p, size_t) override {
    cudaSetDevice(device_.index);
    cudaFree(p);
  }

 private:
  Device device_;
};

// Portable: pinned for every GPU of the process, not only the current one.
class CudaPinnedAllocator : public Allocator {
 public:
  Device device() const override { return Device::cpu(); }
  Tier tier() const override { return Tier::HOST; }
  std::string name() const override { return "pinned host"; }
  bool pinned() const override { return true; }

 protected:
  void* do_allocate(size_t bytes) override {
    void* p = nullptr;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
      cudaGetLastError();  // not sticky, but leave no error for the next call to find
      return nullptr;
    }
    std::memset(p, 0, bytes);
    return p;
  }
  void do_free(void* p, size_t) override { cudaFreeHost(p); }
};

std::unique_ptr<Allocator> make_pinned_allocator() {
  return std::make_unique<CudaPinnedAllocator>();
}

std::unique_ptr<Allocator> make_allocator(Device device, size_t limit_bytes) {
  return std::make_unique<CudaAllocator>(device, limit_bytes);
}

const char* memory_info(int device, size_t* free_bytes, size_t* total_bytes) {
  int current = 0;
  cudaError_t e = cudaGetDevice(&current);
  if (e == cudaSuccess && current != device) e = cudaSetDevice(device);
  if (e == cudaSuccess) e = cudaMemGetInfo(free_bytes, total_bytes);
  if (current != device) cudaSetDevice(current);  // the calling thread's device as it was
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

}  // namespace
}  // namespace tide

TIDE_CUDA_MODULE_ENTRY const tide::CudaMemoryTable* tide_cuda_memory() {
  static const tide::CudaMemoryTable table{sizeof(tide::CudaMemoryTable), &tide::make_allocator,
                                           &tide::make_pinned_allocator, &tide::memory_info};
  return &table;
}

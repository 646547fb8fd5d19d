#pragma once
// Allocators for model data. The chunk store asks an allocator for each chunk, so where a chunk
// lives (host, device, or a budgeted stand-in for a device) is a choice made per chunk, and
// every allocator counts its bytes: the memory tests compare these counters with the papers'
// formulas instead of recomputing the formulas.
//
//   HostAllocator      host memory from mmap: zero-filled, page-aligned, committed on first touch
//   BudgetedAllocator  host memory with a byte limit. On a machine without a GPU it plays the
//                      device, so placement logic (fetch, evict, the budget) runs and is tested
//                      on CPU exactly as it will run against a GPU's memory.
//   SimAllocator       memory of the simulated device (core/sim_device.h): host memory that
//                      the host reaches only through the mover, tagged Device::sim(N)
//   SimPinnedAllocator page-locked host memory of the simulated device's driver (sim_device.h)
//   CudaAllocator      device memory (cudaMalloc), and page-locked host memory (cudaHostAlloc):
//                      memory/allocator.h, in the CUDA module.
//
// Memory comes back zero-filled from every allocator (chunks start as zero gradients).

#include <cstddef>
#include <memory>
#include <string>

#include "tide/core/device.h"
#include "tide/core/error.h"

namespace tide {

// Where a chunk is relative to the ops: the compute tier is what kernels read (the device, or
// its budgeted stand-in); the host tier is the large, slower pool (offload targets).
enum class Tier { HOST, COMPUTE };

// Thrown by Allocator::allocate when a budgeted allocator's limit would be passed (a run that
// catches it can add what budget would fit, as the Trainer does for placement.policy=auto).
class OutOfBudget final : public Error {
 public:
  using Error::Error;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // `bytes` zero-filled bytes, 64-byte aligned; throws a tide::Error naming `what` when the
  // memory cannot be had.
  void* allocate(size_t bytes, const std::string& what);
  void free(void* p, size_t bytes);

  virtual Device device() const = 0;  // the device ops dispatch on for this memory
  virtual Tier tier() const = 0;
  virtual std::string name() const = 0;
  // Page-locked host memory, which a device copies to and from asynchronously.
  virtual bool pinned() const { return false; }
  size_t limit() const { return limit_; }  // 0: no limit
  size_t allocated() const { return allocated_; }
  size_t peak() const { return peak_; }
  // allocate() calls so far: a step that allocates nothing leaves it unchanged.
  uint64_t allocations() const { return allocations_; }
  size_t available() const { return limit_ ? limit_ - allocated_ : SIZE_MAX; }
  // What an allocation that fails tells the user to do, after saying what failed (e.g. which
  // config key gives pageable memory instead of page-locked).
  void set_failure_advice(std::string advice) { advice_ = std::move(advice); }

 protected:
  virtual void* do_allocate(size_t bytes) = 0;  // nullptr when out of memory
  virtual void do_free(void* p, size_t bytes) = 0;
  size_t limit_ = 0;

 private:
  size_t allocated_ = 0, peak_ = 0;
  uint64_t allocations_ = 0;
  std::string advice_;
};

class HostAllocator : public Allocator {
 public:
  Device device() const override { return Device::cpu(); }
  Tier tier() const override { return Tier::HOST; }
  std::string name() const override { return "host"; }

 protected:
  void* do_allocate(size_t bytes) override;
  void do_free(void* p, size_t bytes) override;
};

// Host memory standing in for a device of `limit_bytes`: ops run on the CPU, but allocations
// past the limit fail like a device out-of-memory.
class BudgetedAllocator : public HostAllocator {
 public:
  explicit BudgetedAllocator(size_t limit_bytes) { limit_ = limit_bytes; }
  Tier tier() const override { return Tier::COMPUTE; }
  std::string name() const override { return "budgeted device"; }
};

// The simulated device's memory (optionally with a byte limit): host pages that tensors tag
// Device::sim(N), so the ops dispatch to the device's streams and the host must go through
// the mover (and wait for its event) to read or write them.
class SimAllocator : public HostAllocator {
 public:
  explicit SimAllocator(Device device, size_t limit_bytes = 0) : device_(device) {
    limit_ = limit_bytes;
  }
  Device device() const override { return device_; }
  Tier tier() const override { return Tier::COMPUTE; }
  std::string name() const override { return device_.str(); }

 private:
  Device device_;
};

// Host memory the simulated device copies to and from asynchronously, as a GPU copies
// cudaHostAlloc's: registered as page-locked with the simulated driver (sim_device.h), so the
// mover does not make its copies synchronous. make_host_allocator (memory/allocator.h) picks it.
class SimPinnedAllocator : public HostAllocator {
 public:
  std::string name() const override { return "pinned host"; }
  bool pinned() const override { return true; }

 protected:
  void* do_allocate(size_t bytes) override;
  void do_free(void* p, size_t bytes) override;
};

}  // namespace tide

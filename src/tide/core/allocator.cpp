#include "tide/core/allocator.h"

#include <sys/mman.h>

#include <algorithm>

#include "tide/core/error.h"
#include "tide/core/sim_device.h"

namespace tide {

void* Allocator::allocate(size_t bytes, const std::string& what) {
  if (limit_ != 0 && allocated_ + bytes > limit_)
    throw OutOfBudget(fmt::format(
        "out of {} memory: {} needs {:.2f} MiB but only {:.2f} of {:.2f} MiB are "
        "free; raise the memory budget or pick a policy that keeps less resident",
        name(), what, bytes / 1048576.0, (limit_ - allocated_) / 1048576.0, limit_ / 1048576.0));
  void* p = bytes ? do_allocate(bytes) : nullptr;
  TIDE_CHECK(p != nullptr || bytes == 0, "could not allocate {:.2f} MiB of {} memory for {}{}{}",
             bytes / 1048576.0, name(), what, advice_.empty() ? "" : "; ", advice_);
  allocated_ += bytes;
  ++allocations_;
  peak_ = std::max(peak_, allocated_);
  return p;
}

void Allocator::free(void* p, size_t bytes) {
  if (!p) return;
  allocated_ -= bytes;
  do_free(p, bytes);  // last: an allocator may end its own life here (memory/chunk_heap.h)
}

// mmap: fresh pages are zero and only cost memory once touched, so a layout can be allocated
// to measure it (the memory tests allocate GPT-2 124M's states) without filling gigabytes.
void* HostAllocator::do_allocate(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void HostAllocator::do_free(void* p, size_t bytes) {
  munmap(p, bytes);
}

void* SimPinnedAllocator::do_allocate(size_t bytes) {
  void* p = HostAllocator::do_allocate(bytes);
  if (p) sim_pin_host(p, bytes);
  return p;
}

void SimPinnedAllocator::do_free(void* p, size_t bytes) {
  sim_unpin_host(p);
  HostAllocator::do_free(p, bytes);
}

}  // namespace tide

#pragma once
// Arena: one contiguous block handed out by bumping an offset (ZeRO-R's "pre-allocated
// contiguous memory": no fragmentation, and the peak is known). Allocations are 64-byte
// aligned (a cache line, and enough for AVX-512). reset() frees everything at once;
// mark()/rewind() free everything allocated after a mark (scratch space for one op).
//
// peak() reports the high-water mark, which the memory model (tide estimate) is checked against.
//
// The block comes from an Allocator when one is given (a device's memory: the tensors then
// carry its device, and the host must not touch them except through the mover), else from the
// host heap.

#include <cstddef>
#include <string>

#include "tide/core/allocator.h"
#include "tide/core/tensor.h"

namespace tide {

class Arena {
 public:
  static constexpr size_t kAlign = 64;

  Arena() = default;
  // Allocates `capacity` bytes from `allocator` (which must outlive the arena), or on the
  // host heap when it is null. `name` appears in out-of-memory errors.
  Arena(std::string name, size_t capacity, Allocator* allocator = nullptr);
  ~Arena();
  Arena(Arena&& o) noexcept;
  Arena& operator=(Arena&& o) noexcept;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  void* alloc(size_t bytes);
  Tensor alloc_tensor(Shape shape, DType dtype = DType::F32);
  // Like alloc_tensor, filled with zeros (host arenas only: device memory is zeroed on a
  // stream, by the mover's fill_zero).
  Tensor zeros(Shape shape, DType dtype = DType::F32);

  size_t mark() const { return used_; }
  void rewind(size_t mark);
  void reset() { used_ = 0; }

  size_t used() const { return used_; }
  size_t peak() const { return peak_; }
  size_t capacity() const { return capacity_; }
  const std::string& name() const { return name_; }
  Device device() const { return allocator_ ? allocator_->device() : Device::cpu(); }

  // Bytes `bytes` occupies once rounded up to the alignment (for sizing arenas in advance).
  static size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

 private:
  void release();

  std::string name_;
  Allocator* allocator_ = nullptr;
  char* base_ = nullptr;
  size_t capacity_ = 0, used_ = 0, peak_ = 0;
};

}  // namespace tide

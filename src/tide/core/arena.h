#pragma once
// Arena: one contiguous block handed out by bumping an offset (ZeRO-R's "pre-allocated
// contiguous memory": no fragmentation, and the peak is known). Allocations are 64-byte
// aligned (a cache line, and enough for AVX-512). reset() frees everything at once;
// mark()/rewind() free everything allocated after a mark (scratch space for one op).
//
// peak() reports the high-water mark, which the memory model (tide estimate) is checked against.

#include <cstddef>
#include <string>

#include "tide/core/tensor.h"

namespace tide {

class Arena {
 public:
  static constexpr size_t kAlign = 64;

  Arena() = default;
  // Allocates `capacity` bytes on the host. `name` appears in out-of-memory errors.
  Arena(std::string name, size_t capacity);
  ~Arena();
  Arena(Arena&& o) noexcept;
  Arena& operator=(Arena&& o) noexcept;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  void* alloc(size_t bytes);
  Tensor alloc_tensor(Shape shape, DType dtype = DType::F32);
  // Like alloc_tensor, filled with zeros.
  Tensor zeros(Shape shape, DType dtype = DType::F32);

  size_t mark() const { return used_; }
  void rewind(size_t mark);
  void reset() { used_ = 0; }

  size_t used() const { return used_; }
  size_t peak() const { return peak_; }
  size_t capacity() const { return capacity_; }
  const std::string& name() const { return name_; }

  // Bytes `bytes` occupies once rounded up to the alignment (for sizing arenas in advance).
  static size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

 private:
  std::string name_;
  char* base_ = nullptr;
  size_t capacity_ = 0, used_ = 0, peak_ = 0;
};

}  // namespace tide

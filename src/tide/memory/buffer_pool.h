#pragma once
// BufferPool: reusable communication buffers (ZeRO-R's constant-size buffers, C_B), allocated on
// first need and kept for the next step, so that after the first step nothing is allocated.
//
// Size classes: a request takes a free buffer of exactly its (Arena-aligned) size, or allocates
// one. Callers ask for a few sizes only (ZeRO: ChunkLayout::buffer_elems, the largest chunk
// halved while the chunk still fits), so that a chunk never takes a larger buffer that a larger
// chunk arriving later would have needed: with best fit over each chunk's own size the pool
// allocated more (7.5B, ZeRO-2: 9 buffers, 2.54 GiB, instead of 6, 1.73 GiB). Every rank makes
// the same requests in the same order, so every rank ends up with the same buffers.
//
// The pool only decides; with an allocator it also holds the memory. The estimator runs the
// same pool without one (counting), so the bytes it predicts are the bytes the runtime takes.

#include <cstddef>
#include <vector>

#include "tide/memory/allocator.h"

namespace tide {

class BufferPool {
 public:
  // `alloc` == nullptr: count only (data() is nullptr).
  explicit BufferPool(Allocator* alloc) : alloc_(alloc) {}
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A free buffer of exactly `bytes` (Arena-aligned), as an index for data() and give().
  int take(size_t bytes);
  void give(int buffer);
  void* data(int buffer) const { return buffers_[buffer].data; }
  // Where the buffers are (the allocator's device; the host when counting only).
  Device device() const { return alloc_ ? alloc_->device() : Device::cpu(); }

  size_t allocated_bytes() const { return allocated_; }  // all buffers, free or not
  int count() const { return static_cast<int>(buffers_.size()); }
  int in_use() const { return in_use_; }

 private:
  struct Buffer {
    void* data = nullptr;
    size_t bytes = 0;
    bool free = false;
  };
  Allocator* alloc_;
  std::vector<Buffer> buffers_;
  size_t allocated_ = 0;
  int in_use_ = 0;
};

}  // namespace tide

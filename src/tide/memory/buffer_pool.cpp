#include "tide/memory/buffer_pool.h"

#include "tide/core/arena.h"
#include "tide/core/error.h"

namespace tide {

BufferPool::~BufferPool() {
  if (alloc_)
    for (const Buffer& b : buffers_) alloc_->free(b.data, b.bytes);
}

int BufferPool::take(size_t bytes) {
  bytes = Arena::aligned(bytes);
  ++in_use_;
  for (int i = 0; i < count(); ++i) {
    Buffer& b = buffers_[i];
    if (b.free && b.bytes == bytes) {  // the size class's free list: first free one
      b.free = false;
      return i;
    }
  }
  void* p = alloc_ ? alloc_->allocate(bytes, "a ZeRO communication buffer") : nullptr;
  buffers_.push_back({p, bytes, false});
  allocated_ += bytes;
  return count() - 1;
}

void BufferPool::give(int buffer) {
  TIDE_ASSERT(buffer >= 0 && buffer < count() && !buffers_[buffer].free);
  buffers_[buffer].free = true;
  --in_use_;
}

}  // namespace tide

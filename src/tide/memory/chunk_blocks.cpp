#include "tide/memory/chunk_blocks.h"

#include "tide/core/arena.h"

namespace tide {

std::multimap<size_t, void*>::iterator ChunkBlocks::best_fit(size_t bytes) {
  const auto it = free_.lower_bound(bytes);
  return it != free_.end() && serves(it->first, bytes) ? it : free_.end();
}

bool ChunkBlocks::can_take(size_t bytes) const {
  bytes = Arena::aligned(bytes);
  const auto it = free_.lower_bound(bytes);
  return (it != free_.end() && serves(it->first, bytes)) || backing_.available() >= bytes;
}

void* ChunkBlocks::take(size_t bytes, const std::string& what) {
  reuse_ = true;
  try {
    void* p = allocate(bytes, what);
    reuse_ = false;
    return p;
  } catch (...) {
    reuse_ = false;
    throw;
  }
}

void* ChunkBlocks::do_allocate(size_t bytes) {
  bytes = Arena::aligned(bytes);
  if (reuse_)
    if (const auto it = best_fit(bytes); it != free_.end()) {
      void* p = it->second;
      free_bytes_ -= it->first;
      free_.erase(it);
      return p;
    }
  // The backing allocator's failure (its budget, or the device's memory) names the chunk.
  void* p = backing_.allocate(bytes, "a chunk of automatic placement");
  size_of_.emplace(p, bytes);
  block_bytes_ += bytes;
  return p;
}

bool ChunkBlocks::holds(size_t bytes, const void* p) const {
  return serves(size_of_.at(const_cast<void*>(p)), Arena::aligned(bytes));
}

void ChunkBlocks::do_free(void* p, size_t) {
  const size_t bytes = size_of_.at(p);
  free_.emplace(bytes, p);
  free_bytes_ += bytes;
  if (!abandoned_) return;
  release_free();
  if (size_of_.empty()) delete this;
}

void ChunkBlocks::release_free() {
  for (const auto& [bytes, p] : free_) {
    backing_.free(p, bytes);
    size_of_.erase(p);
    block_bytes_ -= bytes;
  }
  free_.clear();
  free_bytes_ = 0;
}

void ChunkBlocks::abandon(ChunkBlocks* blocks) {
  if (!blocks) return;
  blocks->release_free();
  if (blocks->size_of_.empty()) {
    delete blocks;
    return;
  }
  blocks->abandoned_ = true;
}

}  // namespace tide

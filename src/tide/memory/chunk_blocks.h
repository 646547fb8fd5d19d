#pragma once
// ChunkBlocks: the compute tier's memory for auto placement's chunks (parallel/auto_placement.h).
//
// Why: the placement moves chunks of many sizes (each chunk's own, in 16 and 32 bits) in and out
// of a full device budget. Memory kept for reuse per exact size had to be given back whenever a
// size was missing: a host wait for the copies, then cudaFree and cudaMalloc, which synchronise
// the GPU (SimEngine.AutoPlacementTrainsTheCpuRunBitwise: 39 of 107 moves a step in f32, 20 of
// 87 in bf16). Here a chunk takes the smallest free block that holds it, up to twice its bytes
// (an f32 chunk's block serves a 16-bit chunk), and a new block only when none does. The blocks
// are never split: every block is wholly free or one chunk's, so whenever the chunks' bytes fit
// the budget, giving the free blocks back makes the room (a split heap can trap free bytes
// beside a chunk in use, and then fail a move whose bytes fit: it did, in that test).
//
// The blocks do not order memory reuse with the streams; their one user does: the block a move
// leaves is read by that move's copy and reused only as the target of a later move's copy, on
// the same stream (AutoPlacement's copy stream). Free blocks go back to the backing allocator
// after the caller has waited for those copies (release_free).

#include <cstddef>
#include <map>
#include <string>

#include "tide/core/allocator.h"

namespace tide {

class ChunkBlocks final : public Allocator {
 public:
  explicit ChunkBlocks(Allocator& backing) : backing_(backing) {}
  ChunkBlocks(const ChunkBlocks&) = delete;
  ChunkBlocks& operator=(const ChunkBlocks&) = delete;
  Device device() const override { return backing_.device(); }
  Tier tier() const override { return backing_.tier(); }
  std::string name() const override { return backing_.name(); }

  // True when take(bytes) succeeds: a free block fits, or the backing allocator has the room.
  bool can_take(size_t bytes) const;
  // True when block `p` (one of these) would be taken for `bytes` once free.
  bool holds(size_t bytes, const void* p) const;
  // A block of at least `bytes` for a move's copy to overwrite: the smallest free one that fits
  // (up to twice the bytes), else a new one. Not zero-filled (allocate() is: always a new block).
  void* take(size_t bytes, const std::string& what);
  // Bytes of the blocks holding a chunk (allocated() counts the chunks' own bytes), and of all.
  size_t used_bytes() const { return block_bytes_ - free_bytes_; }
  size_t block_bytes() const { return block_bytes_; }
  bool has_free() const { return !free_.empty(); }
  // Gives the free blocks back to the backing allocator; the caller has waited for the copies
  // that read them.
  void release_free();
  // The owner is gone: the free blocks go back now, the others as their chunk is freed (a store
  // may outlive its placement), and then the object deletes itself. `blocks` came from new.
  static void abandon(ChunkBlocks* blocks);
  struct Abandon {  // a unique_ptr's deleter
    void operator()(ChunkBlocks* blocks) const { abandon(blocks); }
  };

 protected:
  void* do_allocate(size_t bytes) override;
  void do_free(void* p, size_t bytes) override;

 private:
  ~ChunkBlocks() override = default;  // through abandon()
  std::multimap<size_t, void*>::iterator best_fit(size_t bytes);
  // A block of `block` bytes is taken for a chunk of `bytes` (both aligned).
  static bool serves(size_t block, size_t bytes) { return block >= bytes && block <= 2 * bytes; }

  Allocator& backing_;
  std::map<void*, size_t> size_of_;    // every block: bytes
  std::multimap<size_t, void*> free_;  // the free blocks by bytes
  size_t block_bytes_ = 0, free_bytes_ = 0;
  bool reuse_ = false;  // inside take(): do_allocate may hand out a free block
  bool abandoned_ = false;
};

}  // namespace tide

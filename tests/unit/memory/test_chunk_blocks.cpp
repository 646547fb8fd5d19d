// ChunkBlocks (memory/chunk_blocks.h): auto placement's compute-tier chunk memory.

#include <gtest/gtest.h>

#include "tide/memory/chunk_blocks.h"

using namespace tide;

namespace {

// A heap-allocated ChunkBlocks, abandoned at scope exit as its owner would.
using Blocks = std::unique_ptr<ChunkBlocks, ChunkBlocks::Abandon>;

TEST(ChunkBlocks, AChunkTakesTheSmallestFreeBlockUpToTwiceItsBytes) {
  BudgetedAllocator budget(10000);
  Blocks b(new ChunkBlocks(budget));
  void* f32 = b->take(4096, "an f32 chunk");
  void* small = b->take(1024, "a small chunk");
  EXPECT_EQ(budget.allocated(), 5120u);
  b->free(f32, 4096);
  b->free(small, 1024);
  EXPECT_EQ(b->used_bytes(), 0u);
  EXPECT_EQ(b->block_bytes(), 5120u);
  // A 16-bit chunk of the f32 one's elements reuses its block (not split: the rest is unused).
  EXPECT_EQ(b->take(2048, "a 16-bit chunk"), f32);
  EXPECT_EQ(b->allocated(), 2048u);
  EXPECT_EQ(b->used_bytes(), 4096u);
  // 448 B would leave more than half of the 1024 B block unused: a new block.
  void* tiny = b->take(448, "a tiny chunk");
  EXPECT_NE(tiny, small);
  EXPECT_EQ(budget.allocated(), 5568u);
  EXPECT_TRUE(b->can_take(1024));   // the free small block
  EXPECT_TRUE(b->can_take(4000));   // the budget's room
  EXPECT_FALSE(b->can_take(4500));  // neither
  EXPECT_TRUE(b->holds(2500, f32));
  EXPECT_FALSE(b->holds(1500, f32));
  // The free blocks go back whole; taken ones stay.
  b->release_free();
  EXPECT_EQ(budget.allocated(), 4544u);
  EXPECT_FALSE(b->has_free());
  b->free(tiny, 448);
  EXPECT_TRUE(b->has_free());
  b->free(f32, 2048);  // nothing left taken: abandon() frees every block
}

TEST(ChunkBlocks, AllocateIsANewZeroFilledBlock) {
  BudgetedAllocator budget(10000);
  Blocks b(new ChunkBlocks(budget));
  auto* p = static_cast<float*>(b->take(1024, "a chunk"));
  p[3] = 7;
  b->free(p, 1024);
  auto* q = static_cast<float*>(b->allocate(1024, "a placed chunk"));
  EXPECT_NE(q, p);
  EXPECT_EQ(q[3], 0.0f);
  b->free(q, 1024);
}

// A store may free its chunks after its placement is gone: the blocks outlive their owner until
// the last chunk goes, and every byte goes back to the budget.
TEST(ChunkBlocks, AbandonedBlocksGoBackAsTheirChunksAreFreed) {
  BudgetedAllocator budget(10000);
  ChunkBlocks* b = new ChunkBlocks(budget);
  void* kept = b->take(2048, "a chunk");
  b->free(b->take(1024, "a chunk moved away"), 1024);
  ChunkBlocks::abandon(b);  // the free block goes now
  EXPECT_EQ(budget.allocated(), 2048u);
  b->free(kept, 2048);  // the last one: the blocks delete themselves (ASan checks)
  EXPECT_EQ(budget.allocated(), 0u);
}

}  // namespace

// BufferPool: reuse before allocation, size classes, and the same decisions with or without memory
// (the estimator counts with the pool the runtime allocates with).
#include <gtest/gtest.h>

#include "tide/core/arena.h"
#include "tide/memory/buffer_pool.h"

using namespace tide;

namespace {

// A fixed sequence of requests and returns, run against `pool`; returns the buffers taken.
std::vector<int> exercise(BufferPool& pool) {
  std::vector<int> got;
  const int a = pool.take(1000), b = pool.take(3000);
  got = {a, b};
  pool.give(a);
  got.push_back(pool.take(1000));  // reuses a (free, of the same size)
  pool.give(b);
  pool.give(got.back());
  got.push_back(pool.take(990));   // 990 and 1000 align to the same 1024 bytes: a
  got.push_back(pool.take(500));   // b (3008) and a are larger but not its size: a new buffer
  got.push_back(pool.take(3000));  // b
  return got;
}

}  // namespace

TEST(BufferPool, ReusesAFreeBufferOfTheSameSizeAndAllocatesOnlyWhenNoneIs) {
  HostAllocator host;
  BufferPool pool(&host);
  const std::vector<int> got = exercise(pool);
  EXPECT_EQ(got, (std::vector<int>{0, 1, 0, 0, 2, 1}));
  EXPECT_EQ(pool.count(), 3);
  EXPECT_EQ(pool.in_use(), 3);
  const size_t bytes = Arena::aligned(1000) + Arena::aligned(3000) + Arena::aligned(500);
  EXPECT_EQ(pool.allocated_bytes(), bytes);
  EXPECT_EQ(host.allocated(), bytes);
  EXPECT_EQ(host.allocations(), 3u);
  EXPECT_NE(pool.data(0), nullptr);

  BufferPool counting(nullptr);
  EXPECT_EQ(exercise(counting), got);
  EXPECT_EQ(counting.allocated_bytes(), bytes);
  EXPECT_EQ(counting.data(0), nullptr);
}

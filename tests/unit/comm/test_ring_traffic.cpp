#include <gtest/gtest.h>

#include "tide/comm/ring_traffic.h"

using namespace tide;

TEST(RingTraffic, ChunksCoverTheBufferAndDifferByAtMostOne) {
  for (int world : {1, 2, 3, 4, 7, 8}) {
    for (int64_t n : {0, 1, 2, 5, 8, 13, 1000}) {
      int64_t total = 0, lo = n, hi = 0;
      for (int i = 0; i < world; ++i) {
        EXPECT_EQ(chunk_begin(n, world, i), total);
        total += chunk_size(n, world, i);
        lo = std::min(lo, chunk_size(n, world, i));
        hi = std::max(hi, chunk_size(n, world, i));
      }
      EXPECT_EQ(total, n);
      EXPECT_LE(hi - lo, 1);
    }
  }
}

TEST(RingTraffic, AllReduceSendsTwiceNTimesNMinusOneOverN) {
  // When N divides n every rank sends and receives exactly 2n(N-1)/N (ZeRO's 2*Psi per step).
  for (int world : {1, 2, 3, 4, 8}) {
    const int64_t n = 24 * 7;
    for (int r = 0; r < world; ++r) {
      RingTraffic t = ring_all_reduce_traffic(n, world, r);
      EXPECT_EQ(t.sent, 2 * n * (world - 1) / world);
      EXPECT_EQ(t.received, 2 * n * (world - 1) / world);
    }
  }
  // Uneven n: the total sent equals the total received, and each rank is within 2 elements of
  // the even share.
  for (int world : {3, 4, 8}) {
    const int64_t n = 1001;
    int64_t sent = 0, received = 0;
    for (int r = 0; r < world; ++r) {
      RingTraffic t = ring_all_reduce_traffic(n, world, r);
      sent += t.sent;
      received += t.received;
      EXPECT_NEAR(static_cast<double>(t.sent), 2.0 * n * (world - 1) / world, 2.0);
    }
    EXPECT_EQ(sent, received);
    EXPECT_EQ(sent, 2 * n * (world - 1));
  }
}

TEST(RingTraffic, ReduceScatterAllGatherAndBroadcast) {
  EXPECT_EQ(ring_reduce_scatter_traffic(10, 4).sent, 30);
  EXPECT_EQ(ring_all_gather_traffic(10, 4).received, 30);
  EXPECT_EQ(ring_all_gather_traffic(10, 1).sent, 0);
  // Chain from root 2 over 4 ranks: 2 -> 3 -> 0 -> 1.
  EXPECT_EQ(chain_broadcast_traffic(5, 4, 2, 2).sent, 5);
  EXPECT_EQ(chain_broadcast_traffic(5, 4, 2, 2).received, 0);
  EXPECT_EQ(chain_broadcast_traffic(5, 4, 1, 2).sent, 0);
  EXPECT_EQ(chain_broadcast_traffic(5, 4, 1, 2).received, 5);
  EXPECT_EQ(chain_broadcast_traffic(5, 4, 0, 2).sent, 5);
  EXPECT_EQ(chain_broadcast_traffic(5, 1, 0, 0).sent, 0);
}

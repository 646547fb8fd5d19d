#pragma once
// Ring algorithms: how a buffer is cut into N chunks, and how many elements each rank sends and
// receives. The explicit ring implementation (algorithm = ring) sends exactly this; backends
// whose algorithm is hidden (MPI's own, NCCL) count this as their theoretical traffic.
//
// Ring all-reduce of n elements over N ranks (rank r sends to r+1, receives from r-1):
//   reduce-scatter phase, step s = 0..N-2: send chunk (r-s), receive chunk (r-s-1) and add it;
//     afterwards rank r holds the fully reduced chunk (r+1).
//   all-gather phase, step s = 0..N-2: send chunk (r+1-s), receive chunk (r-s).
// So rank r sends every chunk but (r+1) in the first phase and every chunk but (r+2) in the
// second: 2n - c[r+1] - c[r+2] elements, which is 2n(N-1)/N when N divides n.

#include <cstdint>

namespace tide {

// Chunk i of n elements over N ranks is [chunk_begin(n,N,i), chunk_begin(n,N,i+1)): sizes differ
// by at most one, so any n works (no padding needed for all-reduce).
inline int64_t chunk_begin(int64_t n, int world, int i) {
  return n * i / world;
}
inline int64_t chunk_size(int64_t n, int world, int i) {
  return chunk_begin(n, world, i + 1) - chunk_begin(n, world, i);
}
// Index in 0..N-1 of i modulo N (i may be negative).
inline int ring_mod(int i, int world) {
  return ((i % world) + world) % world;
}

// Elements one rank sends and receives.
struct RingTraffic {
  int64_t sent = 0;
  int64_t received = 0;
};

// All-reduce of n elements, for rank `rank` of `world`.
RingTraffic ring_all_reduce_traffic(int64_t n, int world, int rank);
// Reduce-scatter to k elements per rank (input world*k), and all-gather of k elements per rank:
// every rank sends and receives (N-1)*k.
RingTraffic ring_reduce_scatter_traffic(int64_t k, int world);
RingTraffic ring_all_gather_traffic(int64_t k, int world);
// Broadcast of n elements as a chain root -> root+1 -> ... : every rank but the last sends n,
// every rank but the root receives n.
RingTraffic chain_broadcast_traffic(int64_t n, int world, int rank, int root);

}  // namespace tide

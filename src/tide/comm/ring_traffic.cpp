#include "tide/comm/ring_traffic.h"

namespace tide {

RingTraffic ring_all_reduce_traffic(int64_t n, int world, int rank) {
  if (world <= 1) return {};
  // Sends all chunks but (r+1) and (r+2); receives all chunks but r and (r+1) (see header).
  const int64_t sent = 2 * n - chunk_size(n, world, ring_mod(rank + 1, world)) -
                       chunk_size(n, world, ring_mod(rank + 2, world));
  const int64_t received =
      2 * n - chunk_size(n, world, rank) - chunk_size(n, world, ring_mod(rank + 1, world));
  return {sent, received};
}

RingTraffic ring_reduce_scatter_traffic(int64_t k, int world) {
  return {(world - 1) * k, (world - 1) * k};
}

RingTraffic ring_all_gather_traffic(int64_t k, int world) {
  return {(world - 1) * k, (world - 1) * k};
}

RingTraffic chain_broadcast_traffic(int64_t n, int world, int rank, int root) {
  if (world <= 1) return {};
  const int pos = ring_mod(rank - root, world);  // position in the chain, root = 0
  return {pos == world - 1 ? 0 : n, pos == 0 ? 0 : n};
}

}  // namespace tide

#pragma once
// PlacementPolicy: where chunks live and when they move. The chunk store calls these hooks;
// ZeRO stages, offload and PatrickStar's automatic placement are policies, the model and the
// engine never move memory themselves.
//
//   on_acquire(ids, use)    every acquire() starts here, before any check: a policy that follows
//                           the step's order of accesses (ZeRO-3 prefetch) learns where it is.
//   fetch(c, use)           acquire() for F or B found chunk c of PARAM not usable: make it so
//                           (allocate it on the compute tier; gather, copy or move it in).
//   fetch_grads(c)          an acquire() for W (Use::WEIGHT: ops will add to gradients) found
//                           chunk c of GRAD not whole: make it so (ZeRO-2/3 attach a buffer
//                           holding this rank's accumulated slice).
//   evict(c, use)           the last tensor of chunk c left COMPUTE: the policy may now free
//                           or move the chunk (ZeRO-3 frees non-owned slices, offload copies
//                           out) or keep it.
//   on_grads_ready(c, mb)   every gradient of chunk c is complete for micro-batch mb (the store
//                           says whether this completes the step: grads_complete(c)); the place
//                           for gradient reduction and offload.
//   busy(k, c)              a communication of the policy still reads or writes chunk c of
//                           kind k (an all-reduce or reduce-scatter in flight): it must not move.
//   settle(k, c)            waits until busy(k, c) is false (completes what is in flight on it).
//
// The default (no policy) keeps everything resident where the store allocated it.

#include <span>

namespace tide {

class ChunkStore;
enum class ChunkKind : int;

// FORWARD: F reads parameters. BACKWARD: B reads parameters. WEIGHT: W adds to the parameters'
// gradients; it reads only what its B stashed, never the parameters (so a W does not make the
// store fetch PARAM chunks, and ZeRO-3 gathers nothing for it).
enum class Use { FORWARD, BACKWARD, WEIGHT };

class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;
  virtual void on_acquire(ChunkStore& store, std::span<const int> ids, Use use) {
    (void)store, (void)ids, (void)use;
  }
  virtual void fetch(ChunkStore& store, int chunk, Use use) = 0;
  virtual void fetch_grads(ChunkStore& store, int chunk);
  virtual void evict(ChunkStore& store, int chunk, Use use) = 0;
  virtual void on_grads_ready(ChunkStore& store, int chunk, int micro_batch) = 0;
  virtual bool busy(ChunkKind kind, int chunk) const {
    (void)kind, (void)chunk;
    return false;
  }
  virtual void settle(ChunkKind kind, int chunk) { (void)kind, (void)chunk; }
};

}  // namespace tide

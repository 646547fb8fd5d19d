#pragma once
// How many communication buffers the ZeRO runtime (parallel/zero.cpp) holds at its peak, found by
// replaying the runtime's rules over one step's parameter-group accesses: the estimate's buffer
// term must describe what ZeroPolicy allocates, not a rule of thumb.
//
// Every buffer holds a whole chunk in the compute dtype, of the chunk's size class
// (ChunkLayout::buffer_elems), and comes from a BufferPool (allocated on first need, reused by
// chunks of the same class; memory/buffer_pool.h), which the replay runs without
// memory: the bytes it ends with are the bytes the runtime allocates. The rules replayed, as
// zero.cpp has them:
//   * stage 2/3 gradients: a chunk's first W access in a micro-batch attaches a buffer; when the
//     micro-batch completes the chunk (the W of the last group writing it lets go) its
//     reduce-scatter is issued, and the buffer comes back when that reduction is completed:
//     when the reductions in flight would pass reduce_bucket_size (oldest first), when a W
//     touches the chunk again, or at the end of the step; a chunk larger than the bucket (or
//     any, with overlap_comm = false) is completed at once;
//   * stage 3 parameters: a group's chunks are gathered when an op acquires it (unless
//     already), the chunks of the next accesses are prefetched while the accesses looked at
//     stay within stage3_prefetch_bucket_size elements and the gathered ones within
//     stage3_max_live_parameters; a chunk goes back when no op holds it unless the next access
//     (or one already prefetched for) uses it; chunks whose payload is at most
//     stage3_param_persistence_threshold stay gathered for good;
//   * a W gathers no parameters (it reads only its stash);
//   * stage 1 reduces in place: no buffers;
//   * communication_data_type other than the gradients' dtype (`staging_bytes` > 0: bytes of
//     one element in the dtype sent): every reduction issued, at any stage, takes a staging
//     buffer of the chunk's size class from a pool of its own (parallel/comm_staging.h) and
//     gives it back when the reduction is completed.
// The step is the engine's data-parallel schedule, in the block order of pipeline/block_parts.h
// (F; then B and W fused per block), for each micro-batch; within a part the groups come in
// the order of model/param_groups.h (part_groups), which depends on the activation policy.

#include <cstdint>
#include <vector>

#include "tide/memory/chunk_layout.h"
#include "tide/memory/zero_settings.h"
#include "tide/model/param_groups.h"

namespace tide {

// The settings the runtime can run: stage3_max_live_parameters raised to the least
// check_zero_settings accepts (the chunks of the largest parameter group).
ZeroSettings runnable_zero_settings(ZeroSettings s, const ChunkLayout& layout,
                                    const std::vector<BlockGroups>& blocks);

struct ZeroBufferPeak {
  int64_t bytes = 0;      // all buffers the runtime allocates
  int buffers = 0;        // how many
  int grad_buffers = 0;   // at the (first) peak of buffers in use: gradient chunks
  int param_buffers = 0;  // and gathered parameter chunks (persistent ones included)
  int persistent = 0;     // stage 3: chunks that stay gathered
  int staging = 0;        // communication_data_type's staging buffers (in `buffers` and `bytes`)
};

// Replays one step of `micro_batches` micro-batches under ZeRO stage `stage` (1-3), the blocks
// of block_groups(layout) run under activation policy `policy`.
// `dtype_bytes`: bytes per element of the compute dtype; `staging_bytes`: of the dtype the
// reductions send where it is not the gradients' (0: they send the gradients as they are).
ZeroBufferPeak simulate_zero_buffers(const ChunkLayout& layout,
                                     const std::vector<BlockGroups>& blocks,
                                     ActivationPolicy policy, int stage,
                                     const ZeroSettings& settings, int micro_batches,
                                     size_t dtype_bytes, size_t staging_bytes = 0);

// ZeRO stage 0's staging (GradReduction, exec/policy_stack.cpp): each chunk's all-reduce stays
// in flight until the step's end, each from a staging buffer of the whole chunk, so the pool
// holds one buffer per chunk.
ZeroBufferPeak stage_zero_staging(const ChunkLayout& layout, size_t staging_bytes);

}  // namespace tide

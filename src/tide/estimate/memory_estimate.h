#pragma once
// The memory model: MemoryEstimate estimate_memory(const TrainSetup&), a pure function from
// one training configuration to bytes per category, on the device (one GPU) and on the host.
//
// The categories are the ones the runtime's own counters keep (chunk store per kind, activation
// arenas, workspace), so a measured peak can be held against the estimate category by category:
//   param16        compute-precision parameters: the rank's share, Psi or ceil(Psi / Nd) when
//                  ZeRO partitions them (chunk padding is counted apart, below)
//   grads          compute-precision gradients kept across the step
//   master         fp32 master parameters (mixed precision only)
//   adam_m/adam_v  Adam's fp32 first and second moments
//   activations    what forward keeps for backward (Korthikanti et al. Table 2) times the
//                  layer-micro-batches in flight under the pipeline schedule, plus the input
//                  (embedding dropout mask) and output (logits) layers
//   temp_buffers   constant-size buffers: ZeRO's communication buffers, each a whole chunk of
//                  the largest size, as many as the runtime holds at once in a step (gradient
//                  chunks being written or reduce-scattered, stage 3's gathered parameter
//                  chunks; zero_buffers.h replays the runtime's rules), the staging of
//                  communication_data_type, the recomputation working set of one layer, and
//                  on a device (cuda, sim) the per-tensor gradient sums' buffer of each store,
//                  under pipelining the tied embedding's gathered gradient chunks, and on
//                  the host under ZeRO-Offload on a device in 16 bits the parameters' staging
//   chunk_padding  what the chunk store allocates beyond the shares above: each chunk's
//                  alignment padding (chunks are sliced across the Nd ranks, see
//                  memory/chunk_layout.h), so model_states() + chunk_padding is exactly the
//                  chunk store's bytes
//   arenas         what the runtime's arenas reserve beyond activations and temp_buffers: every
//                  in-flight micro-batch's op workspace (sized for its largest block part,
//                  evaluation's forward included), the W stash pool and the validation
//                  micro-batch, all sized by model/arena_bytes.h (the functions
//                  GPT::make_micro_batch sizes them with), less the working set temp_buffers
//                  already counts. With it the total is what `tide train` reserves (its
//                  progress line's `mem` on one rank: tests/cli/estimate_mem.sh)

#include <cstdint>
#include <vector>

#include "tide/estimate/limit_fit.h"
#include "tide/estimate/model_states.h"
#include "tide/estimate/train_setup.h"
#include "tide/estimate/zero_buffers.h"

namespace tide {

struct MemoryBreakdown {
  int64_t param16 = 0;
  int64_t grads = 0;
  int64_t master = 0;
  int64_t adam_m = 0;
  int64_t adam_v = 0;
  int64_t activations = 0;
  int64_t temp_buffers = 0;
  int64_t chunk_padding = 0;
  int64_t arenas = 0;

  int64_t optimizer_states() const { return master + adam_m + adam_v; }
  int64_t model_states() const { return param16 + grads + optimizer_states(); }
  int64_t total() const {
    return model_states() + activations + temp_buffers + chunk_padding + arenas;
  }
  MemoryBreakdown times(int64_t n) const;
  bool operator==(const MemoryBreakdown&) const = default;
};

// One pipeline stage: what one of its GPUs holds, and what one of its ranks puts on the host.
struct StageEstimate {
  int stage = 0;
  int layers = 0;                 // transformer layers on the stage
  int inflight_microbatches = 0;  // see pipeline_inflight.h
  int64_t inflight_layer_microbatches = 0;
  int64_t params = 0;  // parameters one TP rank of the stage holds (Psi)
  ChunkPlan chunks;    // the stage's chunk layout (the runtime's, see model_states.h)
  // ZeRO >= 2's buffers held at once, and communication_data_type's staging at any stage
  // (zero_buffers.h).
  ZeroBufferPeak comm_buffers;
  // The pipeline's kept buffers of the tied embedding's gathered gradient (ZeRO, dp > 1: a
  // whole chunk per end of the tie on the stage), counted in temp_buffers (on the host under
  // ZeRO-Offload).
  int64_t tied_gather_bytes = 0;
  // Chunk bytes one parameter-group access needs on the compute tier, the largest (limit_fit.h).
  int64_t largest_group_chunks = 0;
  MemoryBreakdown device;
  MemoryBreakdown host;  // host memory used by one rank of this stage
};

struct MemoryEstimate {
  std::vector<StageEstimate> stages;
  int peak_stage = 0;  // the stage whose GPUs need the most memory
  int ranks_per_host = 1;
  MemoryBreakdown device;         // one GPU of the peak stage
  MemoryBreakdown host_per_rank;  // the largest host share of one rank
  MemoryBreakdown host;           // one host: ranks_per_host ranks, each at host_per_rank
  // placement.device_memory_limit against the device total; under placement=auto the device
  // and host figures above are auto's split (limit_fit.h).
  LimitFit limit;
};

// Validates the setup (throws a tide::Error naming the problem and the fix) and estimates.
MemoryEstimate estimate_memory(const TrainSetup& setup);

}  // namespace tide

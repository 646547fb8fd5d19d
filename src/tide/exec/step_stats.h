#pragma once
// What one optimizer step reports (the executor's StepStats): loss, norm, learning rate, and
// the runtime's own counters of communication, offload and placement.

#include <cstdint>

#include "tide/parallel/auto_placement.h"
#include "tide/parallel/offload_policy.h"

namespace tide {

struct StepStats {
  int64_t step = 0;  // 1-based index of the step just taken
  float loss = 0;    // mean training loss over this rank's micro-batches
  float lr = 0;
  double grad_norm = 0;  // before clipping
  double seconds = 0;    // wall time of the step
  // Time blocked on data-parallel communication: stage 0, waiting for the all-reduces after the
  // schedule; ZeRO, every blocking wait of its reductions and gathers.
  double comm_seconds = 0;
  int64_t tokens = 0;  // tokens in the global batch (set by the trainer)
  // Data parallelism: gradient reductions issued this step (stage 0: one all-reduce per chunk
  // per step; ZeRO: one reduce-scatter per chunk per micro-batch), parameter all-gathers
  // (ZeRO), and the bytes this rank sent for them (the process group's counters; the few bytes
  // of the gradient-norm exchange are not included).
  int grad_reductions = 0;
  int param_gathers = 0;
  uint64_t bytes_sent = 0;
  // ZeRO-3: most parameter elements gathered at once during the step.
  int64_t peak_gathered_param_elems = 0;
  // The gradient norm was not finite and OptimizerSettings::skip_non_finite skipped the update
  // (under fp16: an overflow).
  bool skipped = false;
  // fp16: the loss scale this step ran with, and the one the next step runs with (the dynamic
  // scaler's decision after this step). 1 and 1 otherwise.
  double loss_scale = 1, next_loss_scale = 1;
  // Optimizer post-validation (PipelineEngine): 1 when the optimistic update was rolled back
  // (clipping was active, or the step was skipped), else 0.
  int rollbacks = 0;
  // ZeRO-Offload (zero_optimization.offload_optimizer.device=cpu): bytes and moves each way,
  // the seconds the compute thread waited on the offload thread, and the offload thread's copy
  // and CPU Adam seconds with the part of them hidden behind backward. All zero without offload.
  OffloadStepCounters offload;
  // placement.policy=auto (auto_placement.h): bytes and moves each way, evictions, the seconds
  // the compute waited on moves, chunks updated per tier. All zero with policy=device.
  PlacementStepCounters placement;
};

}  // namespace tide

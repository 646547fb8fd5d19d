#pragma once
// The zero_optimization.* settings (DeepSpeed's keys and meaning; docs/config.md), apart from
// the policy (zero.h) so that the config can hold them without the runtime's headers.

#include <cstdint>
#include <optional>

#include "tide/core/dtype.h"

namespace tide {

// zero_optimization.offload_optimizer.* (ZeRO-Offload: parallel/offload_policy.h, docs/zero.md).
struct OffloadSettings {
  bool enabled = false;  // device = "cpu": fp32 master weights and Adam m, v on the host
  // The host ends of the copies page-locked on a GPU (make_host_allocator), so they overlap
  // compute. true, where DeepSpeed's default is false: pageable copies block the host.
  bool pin_memory = true;
  // One-step delayed parameter update (DPU): after dpu_warmup_steps synchronous steps, step t's
  // CPU Adam runs during step t+1's forward and backward, which use the parameters of step t-1.
  // 200, not the paper's 40: on the default job a one-step delay that starts while the loss
  // still falls fast costs +3.7% final validation loss at 40, +0.7% at 200 (docs/zero.md).
  bool delayed_update = false;
  int64_t dpu_warmup_steps = 200;
  bool operator==(const OffloadSettings&) const = default;
};

// Sizes are in elements, as in DeepSpeed.
struct ZeroSettings {
  int stage = 0;
  int64_t reduce_bucket_size = 500'000'000;       // gradient elements being reduced at once
  int64_t allgather_bucket_size = 500'000'000;    // parameter elements being gathered at once
  bool overlap_comm = true;                       // reduce-scatter during backward, not blocking it
  int64_t prefetch_bucket_size = 50'000'000;      // stage 3: elements gathered ahead of use
  int64_t max_live_parameters = 1'000'000'000;    // stage 3: gathered elements at most
  int64_t param_persistence_threshold = 100'000;  // stage 3: smaller chunks stay gathered
  OffloadSettings offload_optimizer;
  // The dtype the gradient reductions send (communication_data_type, resolved by the trainer:
  // config.h comm_dtype). Where it is not the gradients' dtype, each chunk is converted into a
  // staging buffer, reduced there and converted back. nullopt: the gradients' dtype.
  std::optional<DType> comm_dtype;

  // Whether the reduction of a chunk of `elems` elements stays in flight behind compute: with
  // overlap_comm, when the chunk fits in reduce_bucket_size (a larger one is reduced alone and
  // waited for at once). ZeroPolicy and the estimator's replay of it both ask here.
  bool overlaps(int64_t elems) const { return overlap_comm && elems <= reduce_bucket_size; }

  bool operator==(const ZeroSettings&) const = default;
};

// DeepSpeed's defaults for the two dtype keys, shared by the config (tide train) and the
// estimator (every row of `tide estimate` takes the ones of its own stage).
// data_types.grad_accum_dtype left out (DeepSpeed's engine.get_data_types): bf16 without ZeRO
// keeps f32 gradients (its BF16_Optimizer accumulates in f32); otherwise the parameters' dtype.
constexpr DType default_grad_dtype(DType compute, int zero_stage) {
  return compute == DType::BF16 && zero_stage == 0 ? DType::F32 : compute;
}
// communication_data_type left out (engine.communication_data_type): the parameters' dtype at
// every stage (fp16, bf16, else fp32). Where it is not the gradients' (bf16 at stage 0), the
// reductions go through staging buffers.
constexpr DType default_comm_dtype(DType compute) {
  return compute;
}

}  // namespace tide

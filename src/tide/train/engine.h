#pragma once
// Engine: runs one training step of one rank as the list of actions a pipeline::Schedule gives
// that rank. Plain data parallelism is the one-stage schedule (F, B, W per micro-batch). The
// engine owns what a step needs besides the model:
//
//   * micro-batches in flight: one MicroBatch (activation arenas) per micro-batch between its
//     F and its W, as many as the schedule ever has at once;
//   * the W stash pool: sized from the schedule, the sum over the (micro-batch, block) stashes
//     in flight at once (one when B and W are fused, every block of every micro-batch whose B
//     is done and W is not when the schedule defers W);
//   * the placement policy: with ZeRO stage 0 each chunk's gradients are all-reduced over the
//     DP group as soon as they are complete for the step's last micro-batch, overlapping
//     backward; stages 1-3 are the ZeroPolicy (zero.h: reduce-scatter, owned-slice update,
//     parameter gathering);
//   * with placement.policy=auto (AutoPlacementSettings::device set), AutoPlacement
//     (auto_placement.h) wraps that policy and moves chunks between the compute tier and the
//     host; the store must then be built with every kind on `host`;
//   * the optimizer: global gradient norm, clipping, learning rate, AdamW; with
//     zero.offload_optimizer.enabled (ZeRO-Offload, stages 1-3) on the host, through the
//     OffloadPolicy (offload_policy.h): the store must then be built with
//     StoreOptions::separate_master, its MASTER/ADAM chunks on a host-tier allocator.
//
// The model does all parameter access through store.acquire/release; the engine never sets a
// tensor state.

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "tide/comm/process_group.h"
#include "tide/model/gpt.h"
#include "tide/optim/adamw.h"
#include "tide/optim/lr_schedule.h"
#include "tide/pipeline/block_parts.h"
#include "tide/pipeline/schedule.h"
#include "tide/train/auto_placement.h"
#include "tide/train/offload_policy.h"
#include "tide/train/zero.h"

namespace tide {

// The schedule of plain data parallelism: F(m), B(m), W(m) for every micro-batch in order.
// `split_backward` = false runs B and W fused per block (the least memory).
pipeline::Schedule data_parallel_schedule(int micro_batches, bool split_backward = false);

struct OptimizerSettings {
  AdamWHyper adamw;        // lr is replaced by the schedule's value each step
  LrSchedule lr;           // DeepSpeed's WarmupLR, WarmupDecayLR, WarmupCosineLR or constant
  float grad_clip = 1.0f;  // global-norm clipping; 0: off
  // A step whose global gradient norm is NaN/Inf: false, a clear error (the default); true,
  // the step is skipped (no parameter or Adam state changes; StepStats::skipped), as mixed-
  // precision trainers do on overflow. Adam's bias-correction step t and the learning rate
  // follow the step index either way, so a skipped step still counts in t.
  bool skip_non_finite = false;
};

struct StepStats {
  int64_t step = 0;  // 1-based index of the step just taken
  float loss = 0;    // mean training loss over this rank's micro-batches
  float lr = 0;
  double grad_norm = 0;     // before clipping
  double seconds = 0;       // wall time of the step
  double comm_seconds = 0;  // time blocked on communication (stage 0: after backward)
  int64_t tokens = 0;       // tokens in the global batch (set by the trainer)
  // Data parallelism: gradient reductions issued this step (stage 0: one all-reduce per chunk
  // per step; ZeRO: one reduce-scatter per chunk per micro-batch), parameter all-gathers
  // (ZeRO), and the bytes this rank sent for them (the process group's counters; the few bytes
  // of the gradient-norm exchange are not included).
  int grad_reductions = 0;
  int param_gathers = 0;
  uint64_t bytes_sent = 0;
  // ZeRO-3: most parameter elements gathered at once during the step.
  int64_t peak_gathered_param_elems = 0;
  // The gradient norm was not finite and OptimizerSettings::skip_non_finite skipped the update.
  bool skipped = false;
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

// What the update of step `step` (0-based) does, decided from the global gradient norm alone:
// a non-finite norm is a clear error, or a skip with OptimizerSettings::skip_non_finite;
// otherwise AdamW at the schedule's lr with the clip coefficient (1 when clipping is off or
// inactive). The one decision of the synchronous and the post-validated updates.
struct UpdatePlan {
  bool skip = false;
  float lr = 0;
  float clip = 1.0f;  // AdamWStep::grad_scale
};
UpdatePlan plan_update(const OptimizerSettings& opt, int64_t step, double grad_norm);
// AdamW over each store as `plan` says (nothing when it skips), traced as `what`
// (category "optimizer").
void run_update(std::span<ChunkStore* const> stores, const OptimizerSettings& opt, int64_t step,
                const UpdatePlan& plan, Tracer* tracer, const char* what = "optimizer");

// The update that ends a step, once `st.grad_norm` holds the global gradient norm:
// plan_update, then run_update; sets `st.lr` and `st.skipped`. Shared by Engine and
// PipelineEngine.
void apply_update(std::span<ChunkStore* const> stores, const OptimizerSettings& opt, int64_t step,
                  StepStats& st, Tracer* tracer);

// Tensor parallelism (Megatron-LM) x data parallelism: the engine takes the tp group from the
// model (ModelOptions::tp) and the dp group here. What a caller (the Trainer) passes:
//
//   Topology mesh(world, MeshShape{.tp = t, .dp = world->size() / t});  // comm/topology.h
//   ModelOptions mo;  mo.tp = mesh.group_ptr(MeshAxis::TP);  mo.sequence_parallel = sp;
//   mo.group_size = mesh.dp().size();  // the store is sliced over dp only (ZeRO)
//   GPT model(config, policy, mo);
//   Engine engine(model, mesh.group_ptr(MeshAxis::DP), schedule, B, T, opt, zero);
//
// and a BatchFn that gives every tp rank of a data-parallel replica the same micro-batches
// (the replica's: dp rank r of mesh.coord().dp). Gradient reductions (stage 0's all-reduce,
// ZeroPolicy) run over dp only; the model's own collectives run over tp. The global gradient
// norm sums each tensor's squares over the dp slices and, for tensors split over tp
// (tp_sharded), over the tp ranks; a replicated tensor (bitwise equal on every tp rank) is
// counted once. The per-tensor sums are added in the model's tensor order, so every rank gets
// the same bits for any thread count. With ZeRO-Offload the per-tensor sums of the owned slices
// come from the offload thread's host copies (OffloadPolicy::tensor_sums(), tensor_grad_sums.h:
// the same function over the same ranges), the rest as without it.
class Engine {
 public:
  // `dp` is the data-parallel group (size 1: a single rank). Micro-batches are (B,T).
  // `zero.stage` 1-3 needs a store sliced by zero_sliced_kinds() over the dp group.
  Engine(GPT& model, std::shared_ptr<ProcessGroup> dp, pipeline::Schedule schedule, int B, int T,
         OptimizerSettings optimizer, ZeroSettings zero = {}, AutoPlacementSettings placement = {});
  ~Engine();

  // Fills micro-batch `mb`'s tokens and targets (B,T).
  using BatchFn = std::function<void(int mb, int32_t* inputs, int32_t* targets)>;
  // One optimizer step, step index `step` (0-based, the step about to be taken). With a
  // `tracer`, the step's actions, block parts, chunk moves, communication and optimizer are
  // recorded there (trace.h); the results are the same bits either way.
  StepStats step(int64_t step, uint64_t seed, const BatchFn& batch, Tracer* tracer = nullptr);

  const pipeline::Schedule& schedule() const { return schedule_; }
  // Bytes of the activation arenas and the stash pool (allocated up front).
  size_t activation_bytes() const;
  // Bytes of the micro-batches' host pools of partitioned block inputs (cpu_checkpointing; 0
  // without), not counted in activation_bytes().
  size_t host_checkpoint_bytes() const;
  // Bytes of ZeRO's communication buffers (0 at stage 0, whose reductions work in place).
  size_t comm_buffer_bytes() const { return zero_ ? zero_->buffer_bytes() : 0; }
  // ZeRO-Offload: the host allocator of the offloaded gradient slices (nullptr without offload).
  const Allocator* offload_grad_allocator() const { return offload_host_.get(); }
  // placement.policy=auto's policy (nullptr with policy=device).
  const AutoPlacement* auto_placement() const { return auto_.get(); }
  // The owned parameter slices changed outside a step (a checkpoint was loaded): bring the
  // whole copies ZeRO keeps up to date.
  void sync_params();
  // ZeRO-Offload's delayed update (DPU): apply the update still running on the host now, so
  // that the parameters include every step taken (before a checkpoint is written). The next
  // step then has no update in flight. A no-op otherwise.
  void flush_update();

 private:
  class GradReduction;
  MicroBatch& micro_batch(int mb);  // the MicroBatch running micro-batch mb

  // Squared global gradient norm under tensor parallelism (see the class comment).
  double tp_grad_norm_squared() const;

  GPT& model_;
  std::shared_ptr<ProcessGroup> dp_;
  pipeline::Schedule schedule_;
  OptimizerSettings opt_;
  int B_, T_;
  StashPool stash_;
  std::vector<std::unique_ptr<MicroBatch>> mbs_;  // pool, one per micro-batch in flight
  std::vector<int> running_;                      // [pool index] -> micro-batch, -1 when free
  // placement.policy=auto: wraps reduction_ or zero_, whose buffers it allocates (so it is
  // destroyed after them).
  std::unique_ptr<AutoPlacement> auto_;
  std::unique_ptr<GradReduction> reduction_;     // stage 0
  std::unique_ptr<ZeroPolicy> zero_;             // stages 1-3
  std::unique_ptr<HostAllocator> offload_host_;  // ZeRO-Offload's host gradient buffers
  std::unique_ptr<OffloadPolicy> offload_;       // ZeRO-Offload
  OffloadSettings offload_settings_;
  std::vector<ParamAccess> accesses_;  // the parameter groups acquired in one step, in order
  // The block parts a B and a W action run (pipeline/block_parts.h), built once.
  std::vector<pipeline::BlockPart> b_parts_, w_parts_;
};

}  // namespace tide

#pragma once
// PolicyStack: the placement policies of one chunk store, composed in one place in one fixed
// order (as torchtitan applies its parallelisms), so that every executor and every pipeline
// stage's store gets the same stack:
//
//   1. the gradient reduction over the dp group: ZeRO stage 0's all-reduce of each chunk as soon
//      as the step's last micro-batch completes it (overlapping the rest of backward), or
//      ZeroPolicy (zero.h) for stages 1-3 (reduce-scatter per micro-batch, owned-slice update,
//      parameter gathering);
//   2. PatrickStar placement (auto_placement.h), wrapping 1, when placement.policy=auto;
//   3. the offload sink (offload_policy.h) under ZeroPolicy, with ZeRO-Offload.
//
// After the last W the stack completes the reductions; the gradients the optimizer reads are
// then this rank's part (grad(c): the whole chunk at stage 0, the owned slice under ZeRO, its
// host copy under ZeRO-Offload), averaged over dp. tensor_sums() gives each tensor's sum of
// squares over that part (tensor_grad_sums.h, the one function every path uses), from which the
// executor adds the global norm; update() runs AdamW where the stack keeps the optimizer state.

#include <memory>
#include <span>
#include <vector>

#include "tide/comm/process_group.h"
#include "tide/exec/step_stats.h"
#include "tide/exec/update_plan.h"
#include "tide/model/gpt.h"
#include "tide/parallel/auto_placement.h"
#include "tide/parallel/offload_policy.h"
#include "tide/parallel/zero.h"

namespace tide {

class PolicyStack {
 public:
  // `accesses`: the parameter-group accesses of one step of `model` in order (ZeRO-3 prefetches
  // by them). `placement`: placement.policy=auto's placement (shared by the stage's stores,
  // owned by the executor, which begins and ends its steps and replans it), where `model`'s
  // store is store `placed` of it; nullptr: policy=device. `threads`: the CPU Adam's OpenMP
  // threads under offload (0: OpenMP's default).
  PolicyStack(GPT& model, ProcessGroup& dp, const ZeroSettings& zero, AutoPlacement* placement,
              int placed, std::vector<ParamAccess> accesses, int threads = 0);
  ~PolicyStack();
  PolicyStack(const PolicyStack&) = delete;
  PolicyStack& operator=(const PolicyStack&) = delete;

  // The accesses of the following steps (a new schedule).
  void set_accesses(std::vector<ParamAccess> accesses);

  // A step of `micro_batches` begins (the store's gradients are zeroed). `early_adam`: the
  // update of step `step` may run on each chunk as its gradients arrive (offload without
  // clipping; the executor says no when a gradient is still changed after its reduction, as a
  // tied embedding's).
  void begin_step(int64_t step, int micro_batches, const OptimizerSettings& opt, bool early_adam);
  // After the last W: every reduction is complete and averaged over dp (counted in `st`).
  void finish_gradients(Tracer* tracer, StepStats& st);
  // This rank's gradients of chunk c after finish_gradients: the whole chunk, or its owned slice
  // (ZeRO; the host copy under offload), f32; `grad_begin(c)` is its first element in the chunk.
  Tensor grad(int c) const;
  int64_t grad_begin(int c) const;
  // True when grad(c) is a slice: a tensor's sum of squares is split over the dp ranks.
  bool sliced() const { return zero_ != nullptr; }
  // out[id] (one entry per tensor of the store's layout): the sum of squares of tensor id's part
  // in grad(); tensor ids listed in `fresh` are summed now even where offload summed them during
  // backward (their gradients were changed since: the tied embedding's sum).
  void tensor_sums(std::span<double> out, std::span<const int> fresh = {}) const;
  // tensor_sums in two halves on a device without offload (sums_on_stream()), so that several
  // stacks wait for their stream once: the device's sums queued on the stream, down into a
  // page-locked host buffer (GPT::host_staging_allocator), then, after the host has
  // synchronised the stream, `out` from them and from the chunks on the host tier (auto
  // placement). tensor_sums is queue, wait, finish.
  bool sums_on_stream() const;
  void queue_device_tensor_sums() const;
  void finish_tensor_sums(std::span<double> out) const;

  // True when the optimizer state is updated in place on the compute tier by adamw_step (what
  // optimizer post-validation can snapshot and roll back): not under offload or auto placement.
  bool updates_in_place() const { return !offload_ && !auto_; }
  // The step's update as `plan` says (nothing when it skips), traced as `what`. Under offload
  // the previous step's delayed update lands first.
  void update(const OptimizerSettings& opt, int64_t step, const UpdatePlan& plan, Tracer* tracer,
              const char* what = "optimizer");
  // After the update: ZeRO gathers the parameters; the step's counters go into `st`.
  void after_update(StepStats& st);

  // The owned parameter slices changed outside a step (a checkpoint was loaded).
  void sync_params();
  // ZeRO-Offload's delayed update lands now (a no-op otherwise).
  void flush_update();

  // Bytes of ZeRO's buffers and the communication_data_type staging (all allocated so far).
  size_t comm_buffer_bytes() const;
  const Allocator* offload_grad_allocator() const { return offload_host_.get(); }
  const ZeroPolicy* zero() const { return zero_.get(); }

 private:
  class GradReduction;
  ChunkStore& store_;
  OpContext op_;              // the model's: where its gradients are summed and AdamW runs
  Allocator* device_memory_;  // the model's activation memory: the device's (nullptr: host)
  Allocator* host_staging_;   // the model's page-locked host memory (nullptr: the host heap)
  // On a device: the per-tensor sums of squares, computed there (tensor_sums).
  mutable Arena sums_arena_, sums_host_arena_;
  mutable Tensor sums_, sums_scratch_, sums_host_;
  ProcessGroup& dp_;
  std::vector<ParamAccess> accesses_;
  // Destroyed in reverse: offload_ (joins its thread), zero_ and reduction_; auto_, which
  // allocated their buffers, outlives the stack.
  AutoPlacement* auto_ = nullptr;
  int placed_ = 0;                            // the store's index in auto_
  std::unique_ptr<GradReduction> reduction_;  // stage 0
  std::unique_ptr<ZeroPolicy> zero_;          // stages 1-3
  std::unique_ptr<Allocator> offload_host_;
  std::unique_ptr<OffloadPolicy> offload_;
  OffloadSettings offload_settings_;
  bool delayed_ = false;  // this step's offloaded update runs during the next step (DPU)
};

}  // namespace tide

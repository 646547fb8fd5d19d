#pragma once
// PipelineEngine, the one executor: one training step of one pipeline stage, walking the action
// list a pipeline::Schedule gives this rank (its stage = its rank in the pipeline group). Plain
// data parallelism is its one-stage schedule (Engine, engine.h); it runs every generator's
// schedule: Looped with one chunk per stage (GPipe, 1F1B, ZB-H1, ZB-H2, ZB-auto),
// interleaved (v chunks per stage), ZB-V (two chunks in a V). Each chunk is a GPT built for
// its virtual stage; a chunk whose neighbour virtual stage lives on the same rank gets its
// activation / gives its gradient by a copy instead of a message:
//
//   F(m, c)     forward of micro-batch m through chunk c's blocks (virtual stage 0 embeds the
//               tokens; the others read the activation received, or copied from the chunk
//               before it when that one is on this rank)
//   B, W        the chunk's block parts (pipeline/block_parts.h); with a split backward W
//               runs when the schedule says, from one W stash pool sized from the schedule.
//               After B the input gradient is copied to the chunk before when that is local.
//   SendAct / SendGrad   the (B,T,C) output activation / input gradient, posted
//               asynchronously (isend) right after the compute that produced it
//   RecvAct / RecvGrad   posted (irecv) early into the micro-batch's activation / residual-
//               gradient buffer, so the transfer overlaps compute; the compute that needs it
//               waits for it. A gradient's receive is posted right after F (the buffer is free
//               from then until B); an activation's as soon as its F is the next one and a
//               slot can be taken for it without holding more slots than the schedule does.
//               Tags name (micro-batch, consumer virtual stage, direction), so matching does
//               not depend on posting order. On a device (a DeviceRoutedGroup as the pipeline
//               group: NCCL on a GPU, its stand-in on sim) messages match in issue order,
//               untagged, each holding its stream until matched: there every message stream
//               (the activations or the gradients into one virtual stage) has its own group of
//               its two ranks (pipeline/message_streams.h), whose calls wait on the device for
//               the compute stream's queued work (events), not the host.
//   OptimizerStep  (after every send has completed) the tied embedding's gradient is summed
//               between its two copies (wte on virtual stage 0, lm_head.weight on the last):
//               over a group of the two ranks, or in place when one rank holds both (ZB-V);
//               a + b is the same bits on both, so their AdamW updates stay equal. The global
//               gradient norm is added up from per-tensor sums of squares in whole-model
//               tensor order (the tied tensor counted once; the same bits whatever the
//               placement), then clipping and AdamW on every chunk's parameters.
//               With post-validation (the default; set_post_validation) the stage does not
//               wait for that norm: it starts its reduction, saves what AdamW overwrites
//               (optimizer_snapshot.h; most of the copy is taken earlier, in pieces, while
//               the stage waits for a message), runs AdamW optimistically (no clipping, finite
//               gradients), and then waits for the norm. When clipping is active (global
//               norm > grad_clip) it restores the copy and redoes the step with the clip
//               coefficient; when the norm is not finite it restores the copy and skips the
//               step (OptimizerSettings::skip_non_finite) or throws as the synchronous
//               update does. The decision is plan_update's in both paths, so the results
//               are the synchronous step's bits (Zero Bubble PP, "Bypassing optimizer
//               synchronizations").
//
// Every rank of the pipeline group gets the same StepStats: the loss is the last virtual
// stage's, broadcast. The schedule order does not change any arithmetic (each parameter
// receives its W contributions in micro-batch order on every schedule), so all schedules train
// bitwise alike; against the single-rank run only the tied gradient's sum order and the
// norm's blocking differ (float rounding).
//
// Data parallelism inside a stage (pp x dp): each stage's gradients are averaged over its dp
// group (the same stage of every pipeline replica) before the norm (ZeRO stage 0; 1 and 2:
// below).
//
// Tensor parallelism inside a stage (pp x dp x tp): the models are built with ModelOptions::tp
// (the stage's tp group, e.g. Topology's; every chunk the same group) and every block part
// communicates over it, so the tp ranks of a stage must run the same schedule (they do: the
// same object, the same order). The pipeline group is the mesh's pp group, whose members share
// the tp (and dp) coordinate: activations and gradients, with sequence parallelism the (B,T/t,C)
// shards, go between the same tp rank of adjacent stages, and the tied embedding's gradient is
// summed per tp rank (wte's and lm_head.weight's vocabulary shards are the same rows). The
// gradient norm's per-tensor sums are combined over dp (ZeRO slices), then over tp (a
// tp_sharded tensor's sums added in tp rank order, a replicated one taken from tp rank 0), then
// over the pipeline in whole-model tensor order: the same bits on every rank, for every
// schedule.
//
// The policy stack (policy_stack.h) on every chunk's store, the same as for plain data
// parallelism, which is the one-stage schedule of this executor (Engine, engine.h):
//   * ZeRO stage 0: a chunk's gradients are all-reduced (mean) over dp as soon as the step's
//     last W completes them, overlapping the rest of the schedule;
//   * ZeRO 1-3 (the stores slice the optimizer state, with stage 2 the gradients, with stage 3
//     the parameters over dp; ZeroPolicy, zero.h): a chunk's gradients are reduce-scattered as
//     soon as a micro-batch's W completes them, accumulated in the owned slice, divided by dp
//     after the last W; stage 3 gathers each parameter group before its F or B in the order of
//     this chunk's accesses in the stage's action list, prefetching ahead;
//   * ZeRO-Offload (its gradients to the host, CPU AdamW, DPU) and offload_param;
//   * placement.policy=auto: one placement of every chunk's store under the stage's budget.
// The tied embedding's gradient lies in different slices on its two stages (wte's and lm_head's
// chunks differ): each end gathers its chunk's reduced gradient over dp, the two whole copies
// are summed as without ZeRO (a + b: the same bits on both ends), and each replica keeps its
// slice (under offload, of its host copy; the tied chunks then wait for the sum before their
// CPU Adam). Every ZeRO stage runs one gradient path, so stages 1-3 train bitwise alike.
//
// Optimizer post-validation snapshots and rolls back state updated in place; under offload or
// auto placement the state lives elsewhere and the update is synchronous (the same bits).

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "tide/comm/process_group.h"
#include "tide/exec/optimizer_snapshot.h"
#include "tide/exec/policy_stack.h"
#include "tide/exec/step_stats.h"
#include "tide/exec/update_plan.h"
#include "tide/model/gpt.h"
#include "tide/pipeline/block_parts.h"
#include "tide/pipeline/schedule.h"

namespace tide {

class PipelineEngine {
 public:
  // `models`: one per model chunk of this stage, chunk c built for (pp = the schedule's
  // virtual stages, stage = schedule.virtual_stage(pipeline->rank(), c)); with one chunk that
  // is (pipeline->size(), pipeline->rank()). `schedule`: a validated schedule for
  // pipeline->size() stages. Micro-batches are (B,T). Collective over `pipeline` (creates the
  // tied-embedding group when the embedding and the head live on different ranks).
  // `dp`: this stage's data-parallel group (the same stage of the other pipeline replicas, e.g.
  // Topology's dp group; nullptr or size 1: none). Each replica runs the schedule's micro-batches
  // of its own, and every stage's gradients are averaged over `dp` before the norm (ZeRO stage
  // 0: every replica keeps and updates the whole stage). ZeRO-1 when the models' stores slice
  // the optimizer state over dp (ModelOptions group_size = dp size, store.group_rank = dp
  // rank, store.sliced_kinds = zero_sliced_kinds(1)): the gradients are reduce-scattered,
  // each replica updates its slice, and the parameters are all-gathered after the update.
  // ZeRO-2 the same with zero_sliced_kinds(2) (gradients sliced too), ZeRO-3 with
  // zero_sliced_kinds(3). `zero`: the ZeRO bucket, overlap and offload settings (the stage
  // itself is the stores' slicing; a non-zero zero.stage must agree with it). `placement`:
  // placement.policy=auto's allocators (the budget shared by the stage's chunks).
  PipelineEngine(std::vector<GPT*> models, std::shared_ptr<ProcessGroup> pipeline,
                 pipeline::Schedule schedule, int B, int T, OptimizerSettings optimizer,
                 std::shared_ptr<ProcessGroup> dp = nullptr, ZeroSettings zero = {},
                 AutoPlacementSettings placement = {});
  PipelineEngine(GPT& model, std::shared_ptr<ProcessGroup> pipeline, pipeline::Schedule schedule,
                 int B, int T, OptimizerSettings optimizer,
                 std::shared_ptr<ProcessGroup> dp = nullptr, ZeroSettings zero = {},
                 AutoPlacementSettings placement = {})
      : PipelineEngine(std::vector<GPT*>{&model}, std::move(pipeline), std::move(schedule), B, T,
                       optimizer, std::move(dp), zero, placement) {}
  ~PipelineEngine();

  // Fills micro-batch `mb`'s tokens and targets (B,T).
  using BatchFn = std::function<void(int mb, int32_t* inputs, int32_t* targets)>;
  // One optimizer step, `step` 0-based. `batch` is called for every F of every chunk on every
  // stage (the first virtual stage uses the tokens, the last the targets). With data
  // parallelism `batch(mb)` is this replica's micro-batch mb, which is micro-batch
  // mb * dp + dp_rank of the global batch (Engine's numbering: dropout follows it), and the
  // StepStats loss is this replica's mean, as Engine's. With a `tracer`,
  // the step's actions (F/B/W, category "action"), block parts, transfers in flight ("send
  // act", "recv grad", ...), the waits where the stage idles ("wait recv", "wait send"), the
  // gradient finish and the optimizer are recorded there (trace.h); the results are the same
  // bits.
  StepStats step(int64_t step, uint64_t seed, const BatchFn& batch, Tracer* tracer = nullptr);

  // Optimizer post-validation on (the default) or off (the synchronous update: wait for the
  // global gradient norm, then AdamW once). Same results either way; on, the stage holds
  // snapshot_bytes() more memory. Off under offload and auto placement (see above).
  void set_post_validation(bool on) { post_validate_ = on; }
  size_t snapshot_bytes() const { return snapshot_.bytes(); }
  // Test hook: called on every rank each step once its gradients are complete (sends done, tied
  // gradient summed), before the gradient norm; may change them (inject a NaN).
  using GradientHook = std::function<void(int64_t step, std::span<GPT* const> models)>;
  void set_gradient_hook(GradientHook hook) { gradient_hook_ = std::move(hook); }
  // The loss scaler (fp16: DeepSpeed's dynamic scaler, loss_scaler.h); its state goes into
  // checkpoints so that a resumed run scales as the straight one.
  LossScaler& loss_scaler() { return *scaler_; }
  const LossScaler& loss_scaler() const { return *scaler_; }

  const pipeline::Schedule& schedule() const { return schedule_; }
  // Runs the following steps with `schedule` (e.g. the automatic schedule built from a measured
  // step, pipeline_measure.h): the activation slots and W stashes are sized again from it.
  // Between steps only; it must keep the stages, chunks per stage, placement and micro-batches
  // (the models, the tied-embedding group and the batch are built for them): a clear error
  // otherwise. Local: every rank must switch to the same schedule before the next step.
  void reschedule(pipeline::Schedule schedule);

  // Activation memory of the last step on this stage, measured from the runtime's arenas after
  // every F, B and W (not derived from the schedule): `peak_bytes`, the high-water mark of the
  // saved activations (MicroBatch::saved) of the micro-batches in flight (from the end of
  // their F until their slot is released after the last B or W); `micro_batch_bytes`, M_B, the
  // most one micro-batch's saved arena held after its F; `peak_stash_bytes`, the high-water
  // mark of the W stash pool's bytes in use (what B leaves for a deferred W); and of both
  // together. peak_bytes / micro_batch_bytes is the schedule's in-flight count (p for 1F1B and
  // ZB-H1 at stage 0, 2p-1 for ZB-H2), measured.
  struct ActivationMemory {
    size_t peak_bytes = 0, micro_batch_bytes = 0, peak_stash_bytes = 0, peak_total_bytes = 0;
  };
  const ActivationMemory& activation_memory() const { return mem_; }
  // Micro-batches this stage holds at once (all chunks), and W stashes (sized from the
  // schedule).
  int micro_batch_slots() const { return static_cast<int>(mbs_.size()); }
  int stash_slots() const { return stash_.slots(); }
  // Bytes of the activation arenas and the W stash pool (as Engine::activation_bytes).
  size_t activation_bytes() const {
    size_t b = stash_.bytes();
    for (const auto& mb : mbs_) b += mb->saved.capacity() + mb->workspace.capacity();
    return b;
  }
  // Bytes of the micro-batches' host pools of partitioned block inputs (cpu_checkpointing; 0
  // without), not counted in activation_bytes().
  size_t host_checkpoint_bytes() const {
    size_t b = 0;
    for (const auto& mb : mbs_) b += mb->host_checkpoints.capacity();
    return b;
  }
  // Steps whose tied sum found the two ends on different tiers (auto placement on a device: the
  // device's end went down for the host to add).
  int tied_sums_across_tiers() const { return tied_sums_across_tiers_; }
  // Bytes of ZeRO's communication buffers (0 at stage 0, whose reductions work in place) and of
  // the tied embedding's gathered gradient chunks (sum_tied_gradient).
  size_t comm_buffer_bytes() const {
    size_t b = tied_wte_buf_.capacity() + tied_head_buf_.capacity();
    for (const auto& s : stacks_) b += s->comm_buffer_bytes();
    return b;
  }
  // The ZeRO stage the stores are sliced for (0: none).
  int zero_stage() const { return zero_stage_; }
  // ZeRO-Offload: the host allocator of chunk 0's offloaded gradient slices (nullptr without).
  const Allocator* offload_grad_allocator() const { return stacks_[0]->offload_grad_allocator(); }
  // placement.policy=auto's policy (nullptr with policy=device).
  const AutoPlacement* auto_placement() const { return placement_.get(); }
  // The owned parameter slices changed outside a step (a checkpoint was loaded): bring the
  // whole copies ZeRO keeps, and offload's master weights, up to date.
  void sync_params() {
    for (auto& s : stacks_) s->sync_params();
  }
  // ZeRO-Offload's delayed update (DPU): apply the update still running on the host now, so
  // that the parameters include every step taken (before a checkpoint is written). A no-op
  // otherwise.
  void flush_update() {
    for (auto& s : stacks_) s->flush_update();
  }

 private:
  struct Transfer;
  struct Slot;
  // Micro-batch mb's activation (grad = false) or gradient into virtual stage `consumer`, sent
  // to (send) or received from stage `peer`.
  Transfer post_message(Tensor buf, bool send, int peer, int mb, int consumer, bool grad,
                        const char* what);
  // On a device: the groups of the message streams this stage sends or receives on
  // (collective over pp_; the constructor).
  void make_message_streams();
  // The group of the stream into virtual stage `consumer` (gradients or activations); nullptr
  // when the messages go over pp_, tagged.
  ProcessGroup* message_stream(int consumer, bool grad) const;
  // The slot running (mb, chunk) (take: a free one of that chunk's).
  Slot& slot_of(int mb, int chunk, bool take);
  void wait_recv(Slot& s);
  // Sums wte's and lm_head.weight's reduced gradients into both copies (under ZeRO from the
  // owned slices: collective over dp and the tied group).
  void sum_tied_gradient();
  // The buffer `buf` that tensor `id` of chunk `chunk` (an end of the tie) is gathered into
  // under ZeRO with dp > 1: its whole chunk, in the gradients' memory and dtype. Sized at
  // construction (tide estimate counts it) and again only where auto placement moved the chunk.
  void size_tied_buffer(int chunk, int id, Arena& buf);
  // The policy stacks of every chunk's store, for the schedule's accesses.
  void build_stacks(const ZeroSettings& zero, const AutoPlacementSettings& placement);
  // Collective over dp: every member holds the same stage, schedule size and shapes.
  void check_dp_group();
  // Collective over the models' tp group: every member holds the same stage and dp replica.
  void check_tp_group();
  // Throws a tide::Error when the chunks run on different devices.
  void check_device() const;
  // Combines the per-tensor squared norms (whole-model index) over the tp group in place.
  void sum_over_tp(std::vector<double>& norms2);
  // While the stage idles until `until` completes: copy pieces of the optimizer snapshot.
  void fill_bubble(Work& until);
  void release(Slot& s);
  // The slots and stashes for schedule_ (constructor and reschedule).
  void plan();
  // Updates mem_ from the arenas now.
  void measure_memory();
  // Posts the receive of the next forward's activation if a slot can be taken for it now,
  // after action `done` (-1: before the first); `first`: each key's first action.
  void post_next_act(int done, const std::vector<int>& first);
  // Message tag of micro-batch mb's activation (grad = false) or gradient into virtual stage
  // `consumer`.
  int tag(int mb, int consumer, bool grad) const;
  int key(int mb, int chunk) const { return mb * chunks_ + chunk; }

  std::vector<GPT*> models_;  // per chunk
  std::shared_ptr<ProcessGroup> pp_;
  std::shared_ptr<ProcessGroup> tied_;  // the embedding's and the head's ranks, when they differ
  // The tied sum's gathered chunks under ZeRO with dp > 1 (wte's, lm_head's), made with the
  // engine and kept: no allocation in a step, and no host wait before a buffer goes.
  Arena tied_wte_buf_, tied_head_buf_;
  // On a device, with one end of the tie on each tier (auto placement): the device's end,
  // copied down for the host to add (made on first use and kept).
  Arena tied_host_buf_;
  int tied_sums_across_tiers_ = 0;
  std::shared_ptr<ProcessGroup> dp_;  // the stage's data-parallel group (size 1: none)
  ProcessGroup* tp_ = nullptr;        // the models' tensor-parallel group (nullptr: none)
  // The ZeRO stage of the stores' slicing; placement.policy=auto's placement of every chunk's
  // store (nullptr: policy=device), and each chunk's policy stack (destroyed first: the
  // placement allocated their buffers).
  int zero_stage_ = 0;
  std::unique_ptr<AutoPlacement> placement_;
  std::vector<std::unique_ptr<PolicyStack>> stacks_;
  pipeline::Schedule schedule_;
  OptimizerSettings opt_;
  std::unique_ptr<LossScaler> scaler_;  // fp16's dynamic or fixed scale; 1 otherwise
  int B_, T_;
  int chunks_ = 1;
  std::vector<int> virtual_;  // per chunk: its virtual stage
  StashPool stash_;
  std::vector<std::unique_ptr<MicroBatch>> mbs_;
  std::vector<Slot> slots_;                                          // every chunk's, each tagged
  std::vector<std::vector<pipeline::BlockPart>> b_parts_, w_parts_;  // per chunk
  // Per chunk and tensor: its whole-model index (the norm's order), -1: skip (lm_head).
  std::vector<std::vector<int>> norm_index_;
  int model_tensors_ = 0;         // tensors in the whole model
  std::vector<bool> tp_sharded_;  // per whole-model tensor: split over the tp ranks
  Tracer* tracer_ = nullptr;      // the running step's (nullptr: not traced)
  // The tied embedding: (chunk, tensor id) of wte and of lm_head.weight on this rank, -1 when
  // not here.
  int wte_chunk_ = -1, wte_id_ = -1, head_chunk_ = -1, head_id_ = -1;
  // From the schedule, per key(mb, chunk): the stage its activation / gradient comes from (-1:
  // none: the first or last virtual stage, or local), the (mb, chunk) of this stage's F actions
  // in order.
  std::vector<int> act_from_, grad_from_;
  // On a device: per consumer virtual stage, the group of the activations' / gradients' stream
  // into it (its sender rank 0, its receiver rank 1; null where this stage is neither end).
  // Empty: the messages go over pp_, tagged.
  std::vector<std::shared_ptr<ProcessGroup>> act_stream_, grad_stream_;
  std::vector<std::pair<int, int>> f_order_;
  // This step: the next F (index into f_order_), and which receives are already posted.
  size_t next_f_ = 0;
  std::vector<bool> act_posted_, grad_posted_;
  // The optimizer's tail.
  bool post_validate_ = true;
  OptimizerSnapshot snapshot_;  // what the optimistic AdamW overwrote
  GradientHook gradient_hook_;
  ActivationMemory mem_;  // the last step's
};

}  // namespace tide

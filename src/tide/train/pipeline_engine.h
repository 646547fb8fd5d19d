#pragma once
// PipelineEngine: one training step of one pipeline stage, walking the action list a
// multi-stage pipeline::Schedule gives this rank (its stage = its rank in the pipeline group).
// The single-stage Engine (engine.h) runs plain data parallelism; this one runs Looped
// schedules with one model chunk per stage (GPipe, 1F1B, ZB-H1, ZB-H2, ZB-auto):
//
//   F(m)        forward of micro-batch m through the stage's blocks (stage 0 embeds the
//               tokens; the others read the activation RecvAct received)
//   B(m), W(m)  the stage's block parts (pipeline/block_parts.h); with a split backward W
//               runs when the schedule says, from the W stash pool sized from the schedule
//   SendAct / SendGrad   the (B,T,C) output activation / input gradient of m, posted
//               asynchronously (isend) right after the compute that produced it
//   RecvAct / RecvGrad   posted (irecv) early into m's activation / residual-gradient
//               buffer, so the transfer overlaps compute; the compute that needs it waits for
//               it. A gradient's receive is posted right after F(m) (the buffer is free from
//               then until B(m)); an activation's as soon as m is the next micro-batch to run
//               forward and a micro-batch slot is free (never taking a slot the schedule has
//               not freed). Messages are tagged by micro-batch, so matching does not depend on
//               posting order.
//   OptimizerStep  (after every send has completed) the tied embedding's gradient is summed
//               between the first and the last stage (wte + lm_head.weight, the same sum on
//               both, so their AdamW updates stay bitwise equal), the global gradient norm is
//               added up from per-tensor sums of squares in whole-model tensor order (the tied
//               tensor counted once; the same bits whatever the stage count), then clipping
//               and AdamW on this stage's parameters.
//
// Every rank of the pipeline group gets the same StepStats: the loss is the last stage's,
// broadcast. The schedule order does not change any arithmetic (each parameter receives its
// W contributions in micro-batch order on every schedule), so all schedules train bitwise
// alike; against the single-rank run only the tied gradient's sum order and the norm's
// blocking differ (float rounding).
//
// Not yet: ZB-V and interleaved schedules (several chunks per stage), data or tensor
// parallelism inside a stage, optimizer post-validation, ZeRO.

#include <memory>
#include <vector>

#include "tide/comm/process_group.h"
#include "tide/model/gpt.h"
#include "tide/pipeline/block_parts.h"
#include "tide/pipeline/schedule.h"
#include "tide/train/engine.h"

namespace tide {

class PipelineEngine {
 public:
  // `model`: built for (pp = pipeline->size(), stage = pipeline->rank()). `schedule`: a
  // validated Looped schedule with one chunk per stage and pipeline->size() stages.
  // Micro-batches are (B,T). Collective over `pipeline` (creates the tied-embedding group).
  PipelineEngine(GPT& model, std::shared_ptr<ProcessGroup> pipeline, pipeline::Schedule schedule,
                 int B, int T, OptimizerSettings optimizer);
  ~PipelineEngine();

  using BatchFn = Engine::BatchFn;
  // One optimizer step, `step` 0-based. `batch` is called for every micro-batch on every
  // stage (stage 0 uses the tokens, the last stage the targets). With a `tracer`, the step's
  // actions (F/B/W, category "action"), block parts, transfers in flight ("send act",
  // "recv grad", ...), the waits where the stage idles ("wait recv", "wait send"), the gradient
  // finish and the optimizer are recorded there (trace.h); the results are the same bits.
  StepStats step(int64_t step, uint64_t seed, const BatchFn& batch, Tracer* tracer = nullptr);

  const pipeline::Schedule& schedule() const { return schedule_; }
  // Micro-batches this stage holds at once, and W stashes (sized from the schedule).
  int micro_batch_slots() const { return static_cast<int>(mbs_.size()); }
  int stash_slots() const { return stash_.slots(); }

 private:
  struct Transfer;
  struct Slot;
  Transfer post_recv(Tensor buf, int peer, int mb, const char* what);
  Transfer post_send(Tensor buf, int peer, int mb, const char* what);
  Slot& slot_of(int mb, bool take);  // the slot running micro-batch mb (take: a free one)
  void wait_recv(Slot& s);
  void release(Slot& s);
  // Posts the receive of the next forward's activation if a slot is free for it now.
  void post_next_act();

  GPT& model_;
  std::shared_ptr<ProcessGroup> pp_;
  std::shared_ptr<ProcessGroup> tied_;  // stages 0 and p-1 (p > 1); nullptr elsewhere
  pipeline::Schedule schedule_;
  OptimizerSettings opt_;
  int B_, T_;
  StashPool stash_;
  std::vector<std::unique_ptr<MicroBatch>> mbs_;
  std::vector<Slot> slots_;
  std::vector<pipeline::BlockPart> f_parts_, b_parts_, w_parts_;
  std::vector<WorkPtr> sends_;   // this step's sends, waited before the optimizer
  std::vector<int> norm_index_;  // per tensor of this stage: its whole-model index, -1: skip
  int model_tensors_ = 0;        // tensors in the whole model
  Tracer* tracer_ = nullptr;     // the running step's (nullptr: not traced)
  int tied_id_ = -1;             // wte (stage 0) or lm_head.weight (last stage); -1: none
  // From the schedule: per micro-batch, the stage its activation / gradient comes from (-1:
  // none), and the micro-batches in the order of this stage's F actions.
  std::vector<int> act_from_, grad_from_, f_order_;
  // This step: the next F (index into f_order_), and which receives are already posted.
  size_t next_f_ = 0;
  std::vector<bool> act_posted_, grad_posted_;
};

}  // namespace tide

#pragma once
// PipelineEngine: one training step of one pipeline stage, walking the action list a
// multi-stage pipeline::Schedule gives this rank (its stage = its rank in the pipeline group).
// The single-stage Engine (engine.h) runs plain data parallelism; this one runs every
// generator's schedule: Looped with one chunk per stage (GPipe, 1F1B, ZB-H1, ZB-H2, ZB-auto),
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
//               not depend on posting order.
//   OptimizerStep  (after every send has completed) the tied embedding's gradient is summed
//               between its two copies (wte on virtual stage 0, lm_head.weight on the last):
//               over a group of the two ranks, or in place when one rank holds both (ZB-V);
//               a + b is the same bits on both, so their AdamW updates stay equal. The global
//               gradient norm is added up from per-tensor sums of squares in whole-model
//               tensor order (the tied tensor counted once; the same bits whatever the
//               placement), then clipping and AdamW on every chunk's parameters.
//
// Every rank of the pipeline group gets the same StepStats: the loss is the last virtual
// stage's, broadcast. The schedule order does not change any arithmetic (each parameter
// receives its W contributions in micro-batch order on every schedule), so all schedules train
// bitwise alike; against the single-rank run only the tied gradient's sum order and the
// norm's blocking differ (float rounding).
//
// Not yet: data or tensor parallelism inside a stage, optimizer post-validation, ZeRO.

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
  // `models`: one per model chunk of this stage, chunk c built for (pp = the schedule's
  // virtual stages, stage = schedule.virtual_stage(pipeline->rank(), c)); with one chunk that
  // is (pipeline->size(), pipeline->rank()). `schedule`: a validated schedule for
  // pipeline->size() stages. Micro-batches are (B,T). Collective over `pipeline` (creates the
  // tied-embedding group when the embedding and the head live on different ranks).
  PipelineEngine(std::vector<GPT*> models, std::shared_ptr<ProcessGroup> pipeline,
                 pipeline::Schedule schedule, int B, int T, OptimizerSettings optimizer);
  PipelineEngine(GPT& model, std::shared_ptr<ProcessGroup> pipeline, pipeline::Schedule schedule,
                 int B, int T, OptimizerSettings optimizer)
      : PipelineEngine(std::vector<GPT*>{&model}, std::move(pipeline), std::move(schedule), B, T,
                       optimizer) {}
  ~PipelineEngine();

  using BatchFn = Engine::BatchFn;
  // One optimizer step, `step` 0-based. `batch` is called for every F of every chunk on every
  // stage (the first virtual stage uses the tokens, the last the targets). With a `tracer`,
  // the step's actions (F/B/W, category "action"), block parts, transfers in flight ("send
  // act", "recv grad", ...), the waits where the stage idles ("wait recv", "wait send"), the
  // gradient finish and the optimizer are recorded there (trace.h); the results are the same
  // bits.
  StepStats step(int64_t step, uint64_t seed, const BatchFn& batch, Tracer* tracer = nullptr);

  const pipeline::Schedule& schedule() const { return schedule_; }
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

 private:
  struct Transfer;
  struct Slot;
  Transfer post_recv(Tensor buf, int peer, int tag, int mb, const char* what);
  Transfer post_send(Tensor buf, int peer, int tag, int mb, const char* what);
  // The slot running (mb, chunk) (take: a free one of that chunk's).
  Slot& slot_of(int mb, int chunk, bool take);
  void wait_recv(Slot& s);
  void release(Slot& s);
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
  pipeline::Schedule schedule_;
  OptimizerSettings opt_;
  int B_, T_;
  int chunks_ = 1;
  std::vector<int> virtual_;  // per chunk: its virtual stage
  StashPool stash_;
  std::vector<std::unique_ptr<MicroBatch>> mbs_;
  std::vector<Slot> slots_;                                          // every chunk's, each tagged
  std::vector<std::vector<pipeline::BlockPart>> b_parts_, w_parts_;  // per chunk
  // Per chunk and tensor: its whole-model index (the norm's order), -1: skip (lm_head).
  std::vector<std::vector<int>> norm_index_;
  int model_tensors_ = 0;     // tensors in the whole model
  Tracer* tracer_ = nullptr;  // the running step's (nullptr: not traced)
  // The tied embedding: (chunk, tensor id) of wte and of lm_head.weight on this rank, -1 when
  // not here.
  int wte_chunk_ = -1, wte_id_ = -1, head_chunk_ = -1, head_id_ = -1;
  // From the schedule, per key(mb, chunk): the stage its activation / gradient comes from (-1:
  // none: the first or last virtual stage, or local), the (mb, chunk) of this stage's F actions
  // in order.
  std::vector<int> act_from_, grad_from_;
  std::vector<std::pair<int, int>> f_order_;
  // This step: the next F (index into f_order_), and which receives are already posted.
  size_t next_f_ = 0;
  std::vector<bool> act_posted_, grad_posted_;
};

}  // namespace tide

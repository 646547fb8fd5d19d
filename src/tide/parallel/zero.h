#pragma once
// ZeRO-DP stages 1-3 (Rajbhandari et al., ../shared/papers/zero.ko.txt) as one placement
// policy over the chunk store. Every chunk is sliced over the N ranks of the DP group (rank r
// owns slice r); a stage says which kinds hold only the owned slice:
//
//   stage 1 (P_os)      MASTER, ADAM_M, ADAM_V            4 + 4 + 8/N   bytes per parameter (f32)
//   stage 2 (P_os+g)    + GRAD                            4 + (4+8)/N
//   stage 3 (P_os+g+p)  + PARAM                           (4+4+8)/N
//
// One gradient path for all three stages, so that they give bitwise the same training:
//   * a chunk's gradients are written whole (ZeRO-1: the chunk itself; ZeRO-2/3: a pooled
//     buffer attached over the slice, seeded with the owned slice accumulated so far and zeros
//     elsewhere);
//   * as soon as a micro-batch completes the chunk, it is reduce-scattered in place (sum) —
//     asynchronously, overlapping the rest of backward, with at most reduce_bucket_size
//     elements in flight (a chunk larger than the bucket is reduced alone and waited for at
//     once, as with overlap_comm = false). The owned slice then holds "accumulated + sum over ranks
//     of this micro-batch"; ZeRO-2/3 copy it back to the slice and return the buffer, ZeRO-1 zeroes
//     the rest of the chunk for the next micro-batch;
//   * after the last micro-batch the owned slices are divided by N (the mean over ranks).
// So with accumulation every micro-batch is reduced: M reduce-scatters per step instead of one,
// in exchange for never holding more than the in-flight buffers of gradients (ZeRO-2/3). ZeRO-1
// could reduce once after accumulating locally, but then its sums would be ordered differently
// from stages 2 and 3 and the stages would no longer agree to the bit.
//
// Parameters: stages 1-2 all-gather every updated chunk after the optimizer step (in place).
// Stage 3 gathers a chunk into a pooled buffer before the first op that uses it and returns
// the buffer after the last consecutive use; the engine gives the step's sequence of
// parameter-group accesses (one per op group of a transformer block, model/param_groups.h;
// begin_step), so the policy prefetches the chunks of the next accesses
// (stage3_prefetch_bucket_size elements ahead) while the current block computes, and keeps at
// most stage3_max_live_parameters elements gathered. Chunks whose payload is at most
// stage3_param_persistence_threshold elements stay gathered (re-gathered after each update).
//
// Buffers, each of its chunk's size class (the largest chunk halved while the chunk fits:
// ChunkLayout::buffer_elems), come from the compute allocator the first time
// they are needed and are reused afterwards (memory/buffer_pool.h): after the first step a step
// allocates nothing (ZeRO-R's constant-size buffers, pre-allocated memory).

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "tide/comm/process_group.h"
#include "tide/memory/buffer_pool.h"
#include "tide/memory/chunk_store.h"
#include "tide/memory/zero_settings.h"
#include "tide/parallel/comm_staging.h"

namespace tide {

// Checks the settings against the layout (stage 3's live limit must hold the chunks of the
// largest parameter group, model/param_groups.h), naming the key and the fix.
void check_zero_settings(const ZeroSettings& s, const ChunkLayout& layout,
                         const std::vector<std::vector<int>>& group_params);

// One acquire of a parameter group (model/param_groups.h: ParamGroups numbering), in the
// order the engine's block parts run them in a step.
struct ParamAccess {
  int group = 0;
  Use use = Use::FORWARD;
};

// What the policy did in the current step (reset by begin_step).
struct ZeroStepCounters {
  int reduce_scatters = 0;
  int all_gathers = 0;
  int64_t peak_live_param_elems = 0;  // stage 3: most parameter elements gathered at once
  double wait_seconds = 0;  // time the step blocked on communication (not hidden by compute)
};

// Told when a chunk's owned gradient slice is final for the step: reduced over the ranks for
// the last micro-batch, summed, not yet divided by N. ZeRO-Offload (offload_policy.h) copies it
// to the host from store.slice(GRAD, chunk), which nothing writes again until the next step.
class ReducedGradSink {
 public:
  virtual ~ReducedGradSink() = default;
  virtual void on_reduced(int chunk) = 0;
};

class ZeroPolicy final : public PlacementPolicy {
 public:
  // `group_params[g]`: the tensor ids of parameter group g, acquired together
  // (model/param_groups.h). Buffers come from `buffers` (the compute tier). The store must be
  // sliced as zero_sliced_kinds(settings.stage) says. `op`: where the model's ops write the
  // chunks (a device: the policy's own writes go through the mover on its stream, and each
  // collective is ordered after what the stream wrote: model/stream_collectives.h). `copies`:
  // the device's copy stream (make_copy_context), where offload_param's slices go up beside
  // the ops; left on the CPU, they go up on op's stream.
  ZeroPolicy(ChunkStore& store, ProcessGroup& dp, const ZeroSettings& settings,
             std::vector<std::vector<int>> group_params, Allocator& buffers, OpContext op = {},
             OpContext copies = {});
  ~ZeroPolicy() override;

  // A step of `accesses` begins (store.begin_step has run); they must outlive the step.
  void begin_step(std::span<const ParamAccess> accesses);
  // After the last W: completes every reduction and divides by N; the owned GRAD slices then
  // hold this step's gradient averaged over the group.
  void finish_gradients();
  // After the optimizer updated the owned slices: stages 1-2 gather the parameters, stage 3
  // re-gathers its persistent chunks.
  void after_update();

  const ZeroStepCounters& counters() const { return counters_; }
  // With a sink: on_reduced(c) once chunk c's last reduction of the step is complete; finished
  // reductions are completed as soon as they are seen done (on every acquire and gradient
  // completion), so the sink hears of each chunk during backward; and finish_gradients leaves
  // the division by N to the sink (which divides its copy). nullptr: none.
  void set_grad_sink(ReducedGradSink* sink) { sink_ = sink; }
  // Bytes of the communication buffers, communication_data_type's staging included (all
  // allocated so far; reused every step).
  size_t buffer_bytes() const { return pool_.allocated_bytes() + staging_.allocated_bytes(); }

  void on_acquire(ChunkStore& store, std::span<const int> ids, Use use) override;
  void fetch(ChunkStore& store, int chunk, Use use) override;
  void fetch_grads(ChunkStore& store, int chunk) override;
  void evict(ChunkStore& store, int chunk, Use use) override;
  void on_grads_ready(ChunkStore& store, int chunk, int micro_batch) override;
  // A reduce-scatter of chunk c's gradients is in flight (or done but not yet completed).
  bool busy(ChunkKind kind, int chunk) const override;
  void settle(ChunkKind kind, int chunk) override;

 private:
  struct Pending {
    int chunk;
    Tensor buf;  // what the reduce-scatter reduces (the chunk or its staged copy)
    WorkPtr work;
    AsyncTrace trace;            // the reduce-scatter in flight, when the step is traced
    bool last = false;           // the step's last micro-batch for this chunk
    CommStaging::Staged staged;  // the chunk in communication_data_type, when it differs
  };
  enum class Gathered : uint8_t { NO, IN_FLIGHT, YES };

  // Waits for w, a collective on `buf`: on a device the stream waits for a device buffer's
  // (model/stream_collectives.h); a host wait is timed into counters_.wait_seconds (and traced
  // as "wait <what>" when it blocks).
  void wait(Work& w, const Tensor& buf, const char* what, int chunk);
  // A pooled buffer for chunk c's kind k, attached over its slice (released by detach()).
  void* attach(ChunkKind k, int c);
  void detach(ChunkKind k, int c);
  // Stage 3: starts gathering chunk c into a buffer; wait_gathered(c) makes it usable.
  void start_gather(int c);
  // What chunk c's all-gather sends: the owned PARAM slice, or under offload_param on a device
  // its copy in the gathered chunk's own part (attached first), queued on the copy stream
  // (copied_up_[c] is the event after it).
  Tensor gather_source(int c);
  // Issues chunk c's all-gather of `source` into `whole`, ordered after the ops and the copy
  // up that wrote what it sends; finish_gather(c, ...) makes the ops queued next see `whole`.
  WorkPtr issue_gather(int c, const Tensor& source, const Tensor& whole);
  void finish_gather(int c, Work& w, const Tensor& whole);
  void wait_gathered(int c);
  void release_gathered(int c);
  void prefetch_after(size_t pos);
  bool needed_soon(int c) const;
  // The parameter chunks access a needs gathered: its group's, none for a W (weight gradients
  // read only the stash and the gradient chunks).
  std::span<const int> param_chunks(const ParamAccess& a) const {
    if (a.use == Use::WEIGHT) return {};
    return group_chunks_[a.group];
  }
  void complete_reduction(Pending& p);
  void complete_reductions_of(int c);
  // Completes the reductions at the front of the queue that are already done (no waiting).
  void poll_reductions();

  ChunkStore& store_;
  ProcessGroup& dp_;
  ZeroSettings s_;
  OpContext op_;
  OpContext copies_;  // the copy stream, or op_
  std::vector<std::vector<int>> group_params_, group_chunks_;
  BufferPool pool_;
  CommStaging staging_;
  std::vector<int> param_buffer_, grad_buffer_;  // per chunk: the pool buffer attached, or -1

  std::deque<Pending> reductions_;  // in issue order
  int64_t reducing_elems_ = 0;

  // Stage 3 gathers parameter chunks into buffers: on 2 or more ranks, and on one when the
  // parameter slices live off the compute tier (offload_param: the "gather" copies the host
  // slice, which is then the whole chunk, into a compute-tier buffer). Else ops read the slice.
  bool gathers_;
  // One rank in a local group: its reduce-scatters and all-gathers are in place on one buffer
  // and move nothing (comm/local_process_group.cpp), so they need not wait for the device's
  // stream: a one-GPU step then synchronises the host only for the losses and the norm.
  bool moves_nothing() const { return dp_.size() == 1 && dp_.backend() == "local"; }
  std::vector<Gathered> gathered_;  // stage 3, per chunk
  std::vector<WorkPtr> gather_work_;
  std::vector<std::optional<StreamEvent>> copied_up_;  // per chunk, until its gather finishes
  std::vector<AsyncTrace> gather_trace_;
  std::vector<bool> persistent_;
  int64_t live_elems_ = 0;

  std::span<const ParamAccess> accesses_;
  size_t pos_ = 0;            // next access expected
  size_t prefetched_to_ = 0;  // accesses before this index have their chunks gathering
  bool in_step_ = false;
  ZeroStepCounters counters_;
  ReducedGradSink* sink_ = nullptr;
};

}  // namespace tide

#include "tide/exec/policy_stack.h"

#include <cstring>

#include "tide/kernels/mover.h"
#include "tide/model/param_groups.h"
#include "tide/model/stream_collectives.h"
#include "tide/optim/grad_norm_cuda.h"
#include "tide/parallel/comm_staging.h"
#include "tide/parallel/optimizer_step.h"
#include "tide/parallel/tensor_grad_sums.h"

namespace tide {

// ZeRO stage 0's gradient hook: a chunk complete for the whole step is averaged over the group
// asynchronously while backward goes on with earlier blocks (in communication_data_type, staged
// when the gradients are kept in another dtype).
class PolicyStack::GradReduction : public PlacementPolicy {
 public:
  GradReduction(ProcessGroup& dp, Allocator& staging, std::optional<DType> comm, OpContext op)
      : dp_(dp), staging_(staging, comm, op), op_(std::move(op)) {}
  ~GradReduction() override {
    // Never leave a collective writing into freed chunks (not wait_all(): after a failed step
    // the tracer its traces point to may be gone).
    for (Reduction& r : pending_) r.work->wait();
  }
  void fetch(ChunkStore&, int chunk, Use) override {
    TIDE_FAIL("chunk {} is not resident, and data parallelism keeps every chunk resident", chunk);
  }
  void evict(ChunkStore&, int, Use) override {}
  // An all-reduce writes chunk c's gradients in place until it completes.
  bool busy(ChunkKind kind, int chunk) const override {
    if (kind != ChunkKind::GRAD) return false;
    for (const Reduction& r : pending_)
      if (r.chunk == chunk && !r.work->is_completed()) return true;
    return false;
  }
  void settle(ChunkKind kind, int chunk) override {
    if (kind != ChunkKind::GRAD) return;
    for (Reduction& r : pending_)
      if (r.chunk == chunk) complete(r);
  }
  void on_grads_ready(ChunkStore& store, int chunk, int) override {
    if (dp_.size() > 1 && store.grads_complete(chunk)) {
      AsyncTrace trace = AsyncTrace::start(store.tracer(), "all-reduce grads", {{"chunk", chunk}});
      const Tensor grads = store.chunk(ChunkKind::GRAD, chunk);
      CommStaging::Staged staged;
      if (staging_.needed(grads.dtype)) staged = staging_.stage(grads, grads.numel());
      const Tensor sent = staged.buffer >= 0 ? staged.tensor : grads;
      // On a device the collective is ordered after what the stream wrote by an event.
      prepare_collective(op_, dp_, sent);
      pending_.push_back(
          {chunk, grads, sent, dp_.all_reduce_async(sent, ReduceOp::Avg), trace, staged});
    }
  }
  // Waits for every reduction of the step (the blocking waits traced into `tracer`); returns
  // how many there were.
  int wait_all(Tracer* tracer) {
    for (Reduction& r : pending_) {
      if (!r.consumed && host_waits_for(op_, dp_, r.sent) && !r.work->is_completed()) {
        const TraceSpan span(tracer, "wait all-reduce", "comm", {{"chunk", r.chunk}});
        r.work->wait();
      }
      complete(r);  // rethrows a failure
      r.trace.finish();
    }
    const int n = static_cast<int>(pending_.size());
    pending_.clear();
    return n;
  }
  size_t staging_bytes() const { return staging_.allocated_bytes(); }

 private:
  struct Reduction {
    int chunk;
    Tensor grads;  // the chunk's gradients
    Tensor sent;   // what the all-reduce reduces: `grads` or its staged copy
    WorkPtr work;
    AsyncTrace trace;  // the all-reduce in flight, when the step is traced
    CommStaging::Staged staged;
    bool consumed = false;  // the host or the stream has waited for it
  };
  // Waits for r (on a device the stream waits, not the host), then (once) converts a staged
  // result back into the chunk.
  void complete(Reduction& r) {
    if (!r.consumed) consume_collective(op_, dp_, *r.work, r.sent);
    r.consumed = true;
    staging_.unstage(r.staged, 0, r.grads);
  }
  std::vector<Reduction> pending_;
  ProcessGroup& dp_;
  CommStaging staging_;
  OpContext op_;  // the model's: where the gradients are written
};

PolicyStack::PolicyStack(GPT& model, ProcessGroup& dp, const ZeroSettings& zero,
                         AutoPlacement* placement, int placed, std::vector<ParamAccess> accesses,
                         int threads)
    : store_(model.store()),
      op_(model.op()),
      device_memory_(model.activation_allocator()),
      host_staging_(model.host_staging_allocator()),
      dp_(dp),
      accesses_(std::move(accesses)),
      auto_(placement),
      placed_(placed) {
  TIDE_CHECK(!zero.offload_optimizer.enabled || zero.stage >= 1,
             "zero_optimization.offload_optimizer.device=cpu needs zero_optimization.stage 1, 2 "
             "or 3 (ZeRO-Offload partitions the optimizer state it offloads, as DeepSpeed "
             "does); set zero_optimization.stage to 1 or more");
  // 2. PatrickStar placement (auto_) wraps the reduction policy built next.
  TIDE_CHECK(!zero.offload_optimizer.enabled || !auto_,
             "placement.policy=auto places the optimizer state itself: it runs without "
             "ZeRO-Offload");
  // 1. The gradient reduction.
  // Its buffers (ZeRO's, and the communication_data_type staging) are on the compute tier,
  // within the placement's budget under auto.
  Allocator& buffers = auto_ ? auto_->buffer_allocator() : *store_.options().compute;
  PlacementPolicy* inner = nullptr;
  if (zero.stage == 0) {
    reduction_ = std::make_unique<GradReduction>(dp_, buffers, zero.comm_dtype, op_);
    inner = reduction_.get();
  } else {
    zero_ = std::make_unique<ZeroPolicy>(
        store_, dp_, zero, ParamGroups(model.all_block_groups()).ids, buffers, op_, model.copies());
    inner = zero_.get();
  }
  store_.set_policy(auto_ ? &auto_->policy(placed_, inner) : inner);
  // 3. The offload sink.
  offload_settings_ = zero.offload_optimizer;
  if (zero.offload_optimizer.enabled) {
    // The gradient slices down and the 16-bit staging up: page-locked on a device (pin_memory).
    offload_host_ = make_host_allocator(op_.device, zero.offload_optimizer.pin_memory,
                                        "zero_optimization.offload_optimizer.pin_memory");
    offload_ = std::make_unique<OffloadPolicy>(store_, dp_.size(), zero.offload_optimizer, threads,
                                               *offload_host_, op_, model.copies());
    offload_->sync_master();
    zero_->set_grad_sink(offload_.get());
  }
}

size_t PolicyStack::comm_buffer_bytes() const {
  return (zero_ ? zero_->buffer_bytes() : 0) + (reduction_ ? reduction_->staging_bytes() : 0);
}

PolicyStack::~PolicyStack() {
  sums_arena_ = Arena();  // before auto placement's buffer allocator it may come from
  store_.set_policy(nullptr);
  offload_.reset();  // joins the offload thread
  zero_.reset();
  reduction_.reset();
}

void PolicyStack::set_accesses(std::vector<ParamAccess> accesses) {
  accesses_ = std::move(accesses);
}

void PolicyStack::begin_step(int64_t step, int micro_batches, const OptimizerSettings& opt,
                             bool early_adam) {
  store_.begin_step(micro_batches);
  if (zero_) zero_->begin_step(accesses_);
  if (!offload_) return;
  // Without clipping (and with non-finite norms an error) the update is known before the norm,
  // so the CPU Adam of each chunk runs as soon as its gradients arrive. With the delayed update
  // (DPU, after its warm-up) the update of this step starts after it and runs during the next.
  const OffloadSettings& os = offload_settings_;
  delayed_ = os.delayed_update && step >= os.dpu_warmup_steps;
  const bool early = early_adam && !delayed_ && !offload_->update_pending() && opt.grad_clip <= 0 &&
                     !opt.skip_non_finite;
  AdamWHyper hyper = opt.adamw;
  hyper.lr = plan_update(opt, step, 0.0).lr;  // the lr the step's update will take
  offload_->begin_step(early ? &hyper : nullptr, AdamWStep{step + 1, 1.0f});
}

void PolicyStack::finish_gradients(Tracer* tracer, StepStats& st) {
  if (zero_) {
    zero_->finish_gradients();
    st.grad_reductions += zero_->counters().reduce_scatters;
  }
  if (reduction_) st.grad_reductions += reduction_->wait_all(tracer);
  if (offload_) offload_->finish_gradients();
}

Tensor PolicyStack::grad(int c) const {
  if (offload_) return offload_->host_grad(c);
  return zero_ ? store_.slice(ChunkKind::GRAD, c) : store_.chunk(ChunkKind::GRAD, c);
}

int64_t PolicyStack::grad_begin(int c) const {
  return zero_ ? store_.options().group_rank * store_.layout().slice_elems(c) : 0;
}

void PolicyStack::tensor_sums(std::span<double> out, std::span<const int> fresh) const {
  const ChunkLayout& lay = store_.layout();
  if (offload_) {  // summed on the offload thread's host copies during backward
    const std::span<const double> sums = offload_->tensor_sums();
    std::copy(sums.begin(), sums.end(), out.begin());
    std::vector<double> now(fresh.empty() ? 0 : out.size());
    for (int id : fresh) {
      const int c = lay.slot(id).chunk;
      const Tensor g = grad(c);
      tensor_grad_sums(lay, c, g, grad_begin(c), now);
      out[id] = now[id];
    }
    return;
  }
  if (op_.device.is_cpu()) {
    for (int c = 0; c < lay.num_chunks(); ++c)
      tensor_grad_sums(lay, c, grad(c), grad_begin(c), out);
    return;
  }
  queue_device_tensor_sums();
  synchronize(op_);
  finish_tensor_sums(out);
}

bool PolicyStack::sums_on_stream() const {
  return !offload_ && !op_.device.is_cpu();
}

void PolicyStack::queue_device_tensor_sums() const {
  TIDE_ASSERT(sums_on_stream());
  const ChunkLayout& lay = store_.layout();
  // On a device the sums are taken where the gradients are, into a device buffer that comes
  // down in one copy (doubles travel as pairs of int32: the dtypes have no f64).
  const int64_t n = lay.num_tensors();
  if (!sums_.defined()) {
    const int64_t scratch = tensor_grad_scratch_doubles(lay);
    // Under auto placement from its buffers' allocator: room is made in the budget first.
    sums_arena_ = Arena("gradient sums", grad_sums_arena_bytes(n, lay.max_tensor_elems()),
                        auto_ ? &auto_->buffer_allocator() : device_memory_);
    sums_ = sums_arena_.alloc_tensor({2 * n}, DType::I32);
    sums_scratch_ = sums_arena_.alloc_tensor({2 * scratch}, DType::I32);
    sums_host_arena_ = Arena("gradient sums (host)", Arena::aligned(sums_.nbytes()), host_staging_);
    sums_host_ = sums_host_arena_.alloc_tensor({2 * n}, DType::I32);
  }
  auto* dev = static_cast<double*>(sums_.data);
  for (int c = 0; c < lay.num_chunks(); ++c)
    if (grad(c).device == op_.device)
      tensor_grad_sums(op_, lay, c, grad(c), grad_begin(c), dev,
                       static_cast<double*>(sums_scratch_.data));
  copy(op_, sums_host_, sums_);
}

void PolicyStack::finish_tensor_sums(std::span<double> out) const {
  const ChunkLayout& lay = store_.layout();
  TIDE_ASSERT(static_cast<int64_t>(out.size()) == lay.num_tensors());
  std::memcpy(out.data(), sums_host_.data, sums_host_.nbytes());
  for (int c = 0; c < lay.num_chunks(); ++c)  // placement.policy=auto's chunks on the host tier
    if (grad(c).device != op_.device) tensor_grad_sums(lay, c, grad(c), grad_begin(c), out);
}

void PolicyStack::update(const OptimizerSettings& opt, int64_t step, const UpdatePlan& plan,
                         Tracer* tracer, const char* what) {
  AdamWHyper h = opt.adamw;
  h.lr = plan.lr;
  const AdamWStep s{step + 1, plan.clip};
  if (offload_) {
    const TraceSpan span(tracer, "offloaded optimizer", "optimizer");
    // DPU: the previous step's update, which ran during this step, lands first.
    if (offload_->update_pending()) offload_->finish_update();
    if (plan.skip) return;
    if (delayed_)
      offload_->start_update(h, s);
    else
      offload_->update(h, s);
    return;
  }
  if (plan.skip) return;
  const TraceSpan span(tracer, what, "optimizer");
  if (!auto_) {
    adamw_step(op_, store_, h, s);
    return;
  }
  // placement.policy=auto: chunk by chunk, each where its optimizer access puts it (the same
  // AdamW calls as adamw_step, in the same order).
  for (int c = 0; c < store_.layout().num_chunks(); ++c) {
    // On a device a chunk updated on the host tier runs the CPU AdamW (its move there waited
    // for the stream).
    const bool host = auto_->prepare_update(placed_, c) == Tier::HOST && !op_.device.is_cpu();
    if (host) synchronize(op_);  // nothing queued may still touch the chunk's host memory
    adamw_step_chunk(host ? OpContext{} : op_, store_, c, nullptr, h, s);
  }
}

void PolicyStack::after_update(StepStats& st) {
  if (zero_) {
    zero_->after_update();
    st.param_gathers += zero_->counters().all_gathers;
    st.peak_gathered_param_elems =
        std::max(st.peak_gathered_param_elems, zero_->counters().peak_live_param_elems);
  }
  if (offload_) st.offload += offload_->counters();
}

void PolicyStack::sync_params() {
  if (offload_) offload_->sync_master();  // the master weights follow the loaded parameters
  if (zero_) zero_->after_update();
}

void PolicyStack::flush_update() {
  if (!offload_ || !offload_->update_pending()) return;
  offload_->finish_update();
  zero_->after_update();
}

}  // namespace tide

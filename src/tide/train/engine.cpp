#include "tide/train/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>

#include <omp.h>

#include "tide/optim/grad_norm.h"
#include "tide/train/optimizer_step.h"
#include "tide/train/tensor_grad_sums.h"

namespace tide {

using pipeline::Op;

pipeline::Schedule data_parallel_schedule(int micro_batches, bool split_backward) {
  pipeline::Schedule s = pipeline::make_schedule("data-parallel", 1, micro_batches);
  s.split_backward = split_backward;
  for (int m = 0; m < micro_batches; ++m) {
    s.actions[0].push_back(pipeline::F(m));
    s.actions[0].push_back(pipeline::B(m));
    s.actions[0].push_back(pipeline::W(m));
  }
  pipeline::add_communication(s);
  return s;
}

// The gradient hook of data parallelism (ZeRO stage 0): a chunk complete for the whole step is
// averaged over the group asynchronously while backward goes on with earlier blocks.
class Engine::GradReduction : public PlacementPolicy {
 public:
  explicit GradReduction(ProcessGroup& dp) : dp_(dp) {}
  void fetch(ChunkStore&, int chunk, Use) override {
    TIDE_FAIL("chunk {} is not resident, and data parallelism keeps every chunk resident", chunk);
  }
  void evict(ChunkStore&, int, Use) override {}
  // An all-reduce writes chunk c's gradients in place until it completes.
  bool busy(ChunkKind kind, int chunk) const override {
    if (kind != ChunkKind::GRAD) return false;
    for (const Reduction& r : pending)
      if (r.chunk == chunk && !r.work->is_completed()) return true;
    return false;
  }
  void settle(ChunkKind kind, int chunk) override {
    if (kind != ChunkKind::GRAD) return;
    for (const Reduction& r : pending)
      if (r.chunk == chunk) r.work->wait();
  }
  void on_grads_ready(ChunkStore& store, int chunk, int) override {
    if (dp_.size() > 1 && store.grads_complete(chunk)) {
      AsyncTrace trace = AsyncTrace::start(store.tracer(), "all-reduce grads", {{"chunk", chunk}});
      pending.push_back(
          {chunk, dp_.all_reduce_async(store.chunk(ChunkKind::GRAD, chunk), ReduceOp::Avg), trace});
    }
  }
  // `tracer`: where the waits that block are recorded (nullptr: nowhere).
  void wait_all(Tracer* tracer = nullptr) {
    for (Reduction& r : pending) {
      if (!r.work->is_completed()) {
        const TraceSpan span(tracer, "wait all-reduce", "comm", {{"chunk", r.chunk}});
        r.work->wait();
      }
      r.work->wait();  // a no-op once done; rethrows a failure
      r.trace.finish();
    }
  }
  struct Reduction {
    int chunk;
    WorkPtr work;
    AsyncTrace trace;  // the all-reduce in flight, when the step is traced
  };
  std::vector<Reduction> pending;

 private:
  ProcessGroup& dp_;
};

UpdatePlan plan_update(const OptimizerSettings& opt, int64_t step, double grad_norm) {
  UpdatePlan plan;
  plan.lr = static_cast<float>(lr_at(step, opt.lr));
  if (!std::isfinite(grad_norm)) {
    TIDE_CHECK(opt.skip_non_finite,
               "the gradient norm at step {} is not finite (NaN/Inf); lower the learning rate, "
               "enable gradient_clipping, or skip such steps (skip_non_finite)",
               step + 1);
    plan.skip = true;
    return plan;
  }
  plan.clip = opt.grad_clip > 0 ? clip_coefficient(grad_norm, opt.grad_clip) : 1.0f;
  return plan;
}

void run_update(std::span<ChunkStore* const> stores, const OptimizerSettings& opt, int64_t step,
                const UpdatePlan& plan, Tracer* tracer, const char* what) {
  if (plan.skip) return;
  AdamWHyper h = opt.adamw;
  h.lr = plan.lr;
  const TraceSpan span(tracer, what, "optimizer");
  for (ChunkStore* s : stores) adamw_step(*s, h, AdamWStep{step + 1, plan.clip});
}

void apply_update(std::span<ChunkStore* const> stores, const OptimizerSettings& opt, int64_t step,
                  StepStats& st, Tracer* tracer) {
  const UpdatePlan plan = plan_update(opt, step, st.grad_norm);
  st.lr = plan.lr;
  st.skipped = plan.skip;
  run_update(stores, opt, step, plan, tracer);
}

namespace {
// Peak micro-batches between F and W, and peak (micro-batch, block) stashes between B and W.
std::pair<int, int> in_flight(const pipeline::Schedule& s, int blocks) {
  int mbs = 0, stashes = 0, peak_mbs = 0, peak_stashes = 1;
  for (const pipeline::Action& a : s.actions[0]) {
    if (!pipeline::is_compute(a.op)) continue;
    if (a.op == Op::F) peak_mbs = std::max(peak_mbs, ++mbs);
    if (a.op == Op::W) --mbs;
    for (const pipeline::BlockPart& p : pipeline::block_parts(a.op, blocks, s.split_backward)) {
      if (p.op == Op::B) peak_stashes = std::max(peak_stashes, ++stashes);
      if (p.op == Op::W) --stashes;
    }
  }
  return {peak_mbs, peak_stashes};
}

// The order in which a step's block parts acquire the model's parameter groups
// (model/param_groups.h; ZeRO-3 prefetches by it, automatic placement plans by it).
std::vector<ParamAccess> group_accesses(const pipeline::Schedule& s, const GPT& model) {
  const ParamGroups groups(model.all_block_groups());
  std::vector<ParamAccess> seq;
  for (const pipeline::Action& a : s.actions[0]) {
    if (!pipeline::is_compute(a.op)) continue;
    for (const pipeline::BlockPart& p :
         pipeline::block_parts(a.op, model.num_blocks(), s.split_backward)) {
      const Use use = p.op == Op::F ? Use::FORWARD : p.op == Op::B ? Use::BACKWARD : Use::WEIGHT;
      for (int g : part_groups(model.block_groups(p.block), use, model.policy()))
        seq.push_back({groups.first[p.block] + g, use});
    }
  }
  return seq;
}

// Sum over the group of one double per rank, added in rank order (the same bits everywhere).
double sum_over_ranks(ProcessGroup& g, double x) {
  if (g.size() == 1) return x;
  std::vector<double> all(g.size());
  g.all_gather(Tensor(&x, Shape{2}, DType::I32),
               Tensor(all.data(), Shape{2 * int64_t{g.size()}}, DType::I32));
  double sum = 0;
  for (double v : all) sum += v;
  return sum;
}
}  // namespace

namespace {
// Per-tensor values of every rank of `g`, gathered: all[r * G + id] (doubles as int32 pairs).
std::vector<double> gather_per_tensor(ProcessGroup& g, std::vector<double>& mine) {
  const int64_t G = static_cast<int64_t>(mine.size()), n = g.size();
  std::vector<double> all(static_cast<size_t>(G * n));
  g.all_gather(Tensor(mine.data(), Shape{2 * G}, DType::I32),
               Tensor(all.data(), Shape{2 * G * n}, DType::I32));
  return all;
}
}  // namespace

double Engine::tp_grad_norm_squared() const {
  const ChunkStore& store = model_.store();
  const ChunkLayout& lay = store.layout();
  const int64_t G = lay.num_tensors();
  // This rank's sum of squares of each tensor: whole (stage 0: every replica holds the averaged
  // gradients) or the part inside its owned slice (ZeRO). ZeRO-Offload summed them on its host
  // copies of the slices (divided there, as ZeroPolicy divides the store's): the same values.
  std::vector<double> mine(static_cast<size_t>(G), 0.0);
  if (offload_) {
    const std::span<const double> sums = offload_->tensor_sums();
    TIDE_ASSERT(static_cast<int64_t>(sums.size()) == G);
    mine.assign(sums.begin(), sums.end());
  } else {
    for (int c = 0; c < lay.num_chunks(); ++c) {
      const Tensor g = zero_ ? store.slice(ChunkKind::GRAD, c) : store.chunk(ChunkKind::GRAD, c);
      // The slice the store holds (group_rank: the dp rank), as OffloadPolicy takes it.
      const int64_t begin = zero_ ? store.options().group_rank * lay.slice_elems(c) : 0;
      tensor_grad_sums(lay, c, g.f32(), begin, g.numel(), mine);
    }
  }
  // ZeRO: a tensor's sum is split over the replicas; add the parts in dp rank order.
  if (zero_ && dp_->size() > 1) {
    const std::vector<double> all = gather_per_tensor(*dp_, mine);
    for (int64_t id = 0; id < G; ++id) {
      double t = 0;
      for (int r = 0; r < dp_->size(); ++r) t += all[r * G + id];
      mine[id] = t;
    }
  }
  // Over tp: a shard's sums added in tp rank order, a replicated tensor's taken from tp rank 0
  // (every rank holds the same bits), then the tensors in model order.
  ProcessGroup& tp = *model_.tp_group();
  const std::vector<double> all = gather_per_tensor(tp, mine);
  double sum = 0;
  for (int64_t id = 0; id < G; ++id) {
    double t = all[id];
    if (tp_sharded(lay.slot(static_cast<int>(id)).name))
      for (int r = 1; r < tp.size(); ++r) t += all[r * G + id];
    sum += t;
  }
  return sum;
}

Engine::Engine(GPT& model, std::shared_ptr<ProcessGroup> dp, pipeline::Schedule schedule, int B,
               int T, OptimizerSettings optimizer, ZeroSettings zero,
               AutoPlacementSettings placement)
    : model_(model),
      dp_(std::move(dp)),
      schedule_(std::move(schedule)),
      opt_(optimizer),
      B_(B),
      T_(T) {
  pipeline::validate(schedule_);
  TIDE_CHECK(schedule_.stages == 1 && schedule_.chunks == 1,
             "the engine runs one-stage schedules; '{}' has {} stages x {} chunks (the pipeline "
             "executor runs the others)",
             schedule_.name, schedule_.stages, schedule_.chunks);
  check_lr_schedule(opt_.lr);
  // Under tensor parallelism the dp group is one axis of a mesh, easy to confuse with the
  // world: a store packed for another group size means the wrong group was passed.
  TIDE_CHECK(model_.tp() == 1 || model_.store().layout().group_size() == dp_->size(),
             "the tensor-parallel model's chunks are sliced over {} ranks (ModelOptions::"
             "group_size) but the engine's data-parallel group has {}: pass the mesh's dp group "
             "(Topology::group_ptr(MeshAxis::DP)), not the world, and build the model with "
             "group_size = its size",
             model_.store().layout().group_size(), dp_->size());
  const auto [mbs, stashes] = in_flight(schedule_, model_.num_blocks());
  b_parts_ = pipeline::block_parts(Op::B, model_.num_blocks(), schedule_.split_backward);
  w_parts_ = pipeline::block_parts(Op::W, model_.num_blocks(), schedule_.split_backward);
  stash_ = StashPool(model_.stash_slot_bytes(B, T), stashes);
  for (int i = 0; i < mbs; ++i) mbs_.push_back(model_.make_micro_batch(B, T, &stash_));
  running_.assign(mbs, -1);
  ChunkStore& store = model_.store();
  TIDE_CHECK(!zero.offload_optimizer.enabled || zero.stage >= 1,
             "zero_optimization.offload_optimizer.device=cpu needs zero_optimization.stage 1, 2 "
             "or 3 (ZeRO-Offload partitions the optimizer state it offloads, as DeepSpeed "
             "does); set zero_optimization.stage to 1 or more");
  accesses_ = group_accesses(schedule_, model_);
  std::vector<std::vector<int>> group_params = ParamGroups(model_.all_block_groups()).ids;
  if (placement.device) {
    TIDE_CHECK(!zero.offload_optimizer.enabled && model_.tp() == 1 && placement.host,
               "placement.policy=auto places the optimizer state itself: it runs without "
               "ZeRO-Offload and tensor parallelism, with a host allocator for every kind");
    std::vector<std::vector<int>> group_chunks;
    for (const std::vector<int>& ids : group_params)
      group_chunks.push_back(store.layout().chunks_of(ids));
    // Non-model memory besides ZeRO's buffers: the micro-batches' activations in use.
    auto activations = [this] {
      size_t b = 0;
      for (const auto& mb : mbs_) b += mb->saved.used() + mb->workspace.used();
      return b;
    };
    auto_ = std::make_unique<AutoPlacement>(store, *placement.device, *placement.host,
                                            std::move(group_chunks), accesses_, activations);
  }
  if (zero.stage == 0) {
    reduction_ = std::make_unique<GradReduction>(*dp_);
    if (auto_) auto_->set_inner(reduction_.get());
    store.set_policy(auto_ ? static_cast<PlacementPolicy*>(auto_.get()) : reduction_.get());
    return;
  }
  zero_ =
      std::make_unique<ZeroPolicy>(store, *dp_, zero, std::move(group_params),
                                   auto_ ? auto_->buffer_allocator() : *store.options().compute);
  if (auto_) auto_->set_inner(zero_.get());
  store.set_policy(auto_ ? static_cast<PlacementPolicy*>(auto_.get()) : zero_.get());
  offload_settings_ = zero.offload_optimizer;
  if (zero.offload_optimizer.enabled) {
    offload_host_ = std::make_unique<HostAllocator>();
    // Under tp the norm is added per tensor: the policy sums per tensor too.
    offload_ = std::make_unique<OffloadPolicy>(store, dp_->size(), zero.offload_optimizer,
                                               omp_get_max_threads(), *offload_host_,
                                               /*tensor_sums=*/model_.tp() > 1);
    offload_->sync_master();
    zero_->set_grad_sink(offload_.get());
  }
}

Engine::~Engine() {
  // Never leave a collective writing into freed chunks. (Not wait_all(): after a failed step
  // the tracer its traces point to may be gone.)
  if (reduction_)
    for (auto& r : reduction_->pending) r.work->wait();
  model_.store().set_policy(nullptr);
  zero_.reset();
  offload_.reset();  // joins the offload thread
  auto_.reset();     // after zero_, whose buffers it allocated
}

void Engine::flush_update() {
  if (!offload_ || !offload_->update_pending()) return;
  offload_->finish_update();
  zero_->after_update();
}

void Engine::sync_params() {
  if (offload_) offload_->sync_master();  // the master weights follow the loaded parameters
  if (zero_) zero_->after_update();
}

MicroBatch& Engine::micro_batch(int mb) {
  for (size_t i = 0; i < running_.size(); ++i)
    if (running_[i] == mb) return *mbs_[i];
  TIDE_FAIL("micro-batch {} is not in flight", mb);
}

size_t Engine::host_checkpoint_bytes() const {
  size_t b = 0;
  for (const auto& mb : mbs_) b += mb->host_checkpoints.capacity();
  return b;
}

size_t Engine::activation_bytes() const {
  size_t b = stash_.bytes();
  for (const auto& mb : mbs_) b += mb->saved.capacity() + mb->workspace.capacity();
  return b;
}

StepStats Engine::step(int64_t step, uint64_t seed, const BatchFn& batch, Tracer* tracer) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  ChunkStore& store = model_.store();
  // The store (and through it the placement policy) traces this step only.
  struct TracerScope {
    ChunkStore& s;
    ~TracerScope() { s.set_tracer(nullptr); }
  } tracer_scope{store};
  store.set_tracer(tracer);
  const int M = schedule_.microbatches;
  store.zero(ChunkKind::GRAD);
  // Counted from here: ZeRO-3's begin_step already starts gathering (prefetch).
  const uint64_t sent_before = dp_->counters().bytes_sent;
  store.begin_step(M);
  if (zero_) zero_->begin_step(accesses_);
  if (auto_) auto_->begin_step();
  // ZeRO-Offload: without clipping (and with non-finite norms an error) the update is known
  // before the norm, so the CPU Adam of each chunk runs as soon as its gradients arrive.
  // With the delayed update (DPU, after its warm-up) the update of this step starts after it and
  // runs during the next one.
  const OffloadSettings& os = offload_settings_;
  const bool delayed = offload_ && os.delayed_update && step >= os.dpu_warmup_steps;
  const bool early_adam = offload_ && !delayed && !offload_->update_pending() &&
                          opt_.grad_clip <= 0 && !opt_.skip_non_finite;
  AdamWHyper early_hyper = opt_.adamw;
  early_hyper.lr = plan_update(opt_, step, 0.0).lr;  // the lr the step's update will take
  if (offload_)
    offload_->begin_step(early_adam ? &early_hyper : nullptr, AdamWStep{step + 1, 1.0f});
  double loss_sum = 0;
  for (const pipeline::Action& a : schedule_.actions[0]) {
    if (a.op == Op::F) {
      const auto free = std::find(running_.begin(), running_.end(), -1);
      TIDE_ASSERT(free != running_.end());
      *free = a.mb;
      MicroBatch& mb = *mbs_[free - running_.begin()];
      const TraceSpan span(tracer, "F", "action", {{"mb", a.mb}});
      batch(a.mb, mb.tokens.i32(), mb.targets.i32());
      mb.tracer = tracer;
      mb.training = true;
      mb.seed = seed;
      mb.step = static_cast<uint64_t>(step);
      mb.index = a.mb;
      // Global sequence numbering: micro-batch m of every rank, then rank r within it (the data
      // loader's order), so dropout masks follow the sequence, not the split.
      mb.seq0 = (static_cast<uint64_t>(a.mb) * dp_->size() + dp_->rank()) * B_;
      mb.dloss = 1.0f / static_cast<float>(M);
      loss_sum += model_.forward(mb);
    } else if (a.op == Op::B || a.op == Op::W) {
      MicroBatch& mb = micro_batch(a.mb);
      const TraceSpan span(tracer, a.op == Op::B ? "B" : "W", "action", {{"mb", a.mb}});
      for (const pipeline::BlockPart& p : a.op == Op::B ? b_parts_ : w_parts_)
        if (p.op == Op::B)
          model_.backward_input_block(mb, p.block);
        else
          model_.backward_weight_block(mb, p.block, /*mark_grads=*/true);
      if (a.op == Op::W) *std::find(running_.begin(), running_.end(), a.mb) = -1;
    }
  }
  const auto t_comm = Clock::now();
  StepStats st;
  {
    const TraceSpan span(tracer, "finish gradients", "comm");
    if (zero_) {
      zero_->finish_gradients();
      st.grad_reductions = zero_->counters().reduce_scatters;
    } else {
      reduction_->wait_all(tracer);
      st.grad_reductions = static_cast<int>(reduction_->pending.size());
      reduction_->pending.clear();
    }
  }
  // Stage 0 waits only here; ZeRO counts every blocking wait (gathers, reductions).
  st.comm_seconds = zero_ ? zero_->counters().wait_seconds
                          : std::chrono::duration<double>(Clock::now() - t_comm).count();
  uint64_t sent = dp_->counters().bytes_sent - sent_before;

  // Global gradient norm (padding is zero). Stage 0: every rank holds the same averaged
  // gradients and sums all of them. ZeRO: each rank sums its owned slices and the sums are
  // added in rank order. Either way every rank gets the same norm and takes the same step.
  std::optional<TraceSpan> norm_span;
  norm_span.emplace(tracer, "grad norm", "optimizer");
  std::vector<GradBuffer> bufs;
  for (int c = 0; c < store.layout().num_chunks() && !offload_; ++c) {
    const Tensor g = zero_ ? store.slice(ChunkKind::GRAD, c) : store.chunk(ChunkKind::GRAD, c);
    bufs.push_back({g.data, g.dtype, g.numel()});
  }
  double norm2 = 0;
  if (offload_) {
    const double own = offload_->finish_gradients();
    norm2 = model_.tp() > 1 ? tp_grad_norm_squared() : sum_over_ranks(*dp_, own);
  } else if (model_.tp() > 1) {
    norm2 = tp_grad_norm_squared();
  } else {
    norm2 = grad_norm_squared(bufs);
    if (zero_) norm2 = sum_over_ranks(*dp_, norm2);
  }
  st.grad_norm = std::sqrt(norm2);
  norm_span.reset();
  ChunkStore* stores[] = {&store};
  if (offload_) {
    const UpdatePlan plan = plan_update(opt_, step, st.grad_norm);
    st.lr = plan.lr;
    st.skipped = plan.skip;
    const TraceSpan span(tracer, "offloaded optimizer", "optimizer");
    // DPU: the previous step's update, which ran during this step, lands first.
    if (offload_->update_pending()) offload_->finish_update();
    if (!plan.skip) {
      AdamWHyper h = opt_.adamw;
      h.lr = plan.lr;
      if (delayed)
        offload_->start_update(h, AdamWStep{step + 1, plan.clip});
      else
        offload_->update(h, AdamWStep{step + 1, plan.clip});
    }
    st.offload = offload_->counters();
  } else if (auto_) {
    // placement.policy=auto: chunk by chunk, each where its optimizer access puts it (the same
    // AdamW calls as adamw_step, in the same order).
    const UpdatePlan plan = plan_update(opt_, step, st.grad_norm);
    st.lr = plan.lr;
    st.skipped = plan.skip;
    if (!plan.skip) {
      AdamWHyper h = opt_.adamw;
      h.lr = plan.lr;
      const TraceSpan span(tracer, "optimizer", "optimizer");
      for (int c = 0; c < store.layout().num_chunks(); ++c) {
        auto_->prepare_update(c);
        adamw_step_chunk(store, c, nullptr, h, AdamWStep{step + 1, plan.clip});
      }
    }
  } else {
    apply_update(stores, opt_, step, st, tracer);
  }
  if (zero_) {
    const uint64_t before_gather = dp_->counters().bytes_sent;
    const TraceSpan span(tracer, "gather params", "comm");
    zero_->after_update();
    sent += dp_->counters().bytes_sent - before_gather;
    st.param_gathers = zero_->counters().all_gathers;
    st.comm_seconds = zero_->counters().wait_seconds;  // the gathers after the update too
    st.peak_gathered_param_elems = zero_->counters().peak_live_param_elems;
  }
  st.bytes_sent = sent;
  if (auto_) {
    auto_->end_step();
    st.placement = auto_->counters();
  }

  st.step = step + 1;
  st.loss = static_cast<float>(loss_sum / M);
  st.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return st;
}

}  // namespace tide

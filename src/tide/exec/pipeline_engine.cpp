#include "tide/exec/pipeline_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <optional>

#include <omp.h>

#include "tide/comm/device_routed_group.h"
#include "tide/comm/local_process_group.h"
#include "tide/model/param_groups.h"
#include "tide/model/stream_collectives.h"
#include "tide/optim/grad_norm.h"
#include "tide/pipeline/message_streams.h"
#include "tide/pipeline/stage_peaks.h"

namespace tide {

using pipeline::Op;

// A send or receive in flight, and its span in the trace (from posting to the wait that saw it
// done).
struct PipelineEngine::Transfer {
  WorkPtr work;
  AsyncTrace trace;
  int mb = -1;
  Tensor buf;                     // what it sends or receives into
  ProcessGroup* group = nullptr;  // the group it went over

  explicit operator bool() const { return work != nullptr; }
  // Ops queued on `op` from now on see it done: on a device the stream waits for a message of
  // the device's group, not the host (model/stream_collectives.h).
  void wait(const OpContext& op) {
    consume_collective(op, *group, *work, buf);
    trace.finish();
  }
};

// A (micro-batch, chunk)'s home on this stage from the first action that names it (its RecvAct
// or F) to the last (its W, or the SendGrad after a fused backward).
struct PipelineEngine::Slot {
  int chunk = 0;  // the chunk whose model made `m`
  int mb = -1;    // the micro-batch it runs, -1 when free
  MicroBatch* m = nullptr;
  Transfer recv;                // the activation or gradient being received into it
  std::vector<Transfer> sends;  // isends reading its buffers: waited before the slot is reused
  bool live = false;            // from its F until its release: its saved activations count
};

namespace {

// The squared gradient norm of the whole model from per-tensor sums: `mine[g]` is this rank's
// sum of squares of whole-model tensor g (0 for tensors it does not hold). The ranks' vectors
// are gathered (asynchronously: `all` is filled when the returned work completes) and added
// in whole-model tensor order by sum_in_model_order, so the result does not depend on which
// stage holds which tensor (every placement and schedule gives the same bits).
WorkPtr gather_norms(ProcessGroup& group, std::vector<double>& mine, std::vector<double>& all) {
  const int64_t G = static_cast<int64_t>(mine.size()), p = group.size();
  all.assign(static_cast<size_t>(G * p), 0.0);
  // Doubles travel as pairs of int32 (the groups reduce f32; this is only a gather).
  return group.all_gather_async(Tensor(mine.data(), Shape{2 * G}, DType::I32),
                                Tensor(all.data(), Shape{2 * G * p}, DType::I32));
}
double sum_in_model_order(const std::vector<double>& all, int64_t G) {
  const int64_t p = static_cast<int64_t>(all.size()) / G;
  double sum = 0;
  for (int64_t g = 0; g < G; ++g) {
    double t = 0;  // one rank holds tensor g, the others add exact zeros
    for (int64_t r = 0; r < p; ++r) t += all[r * G + g];
    sum += t;
  }
  return sum;
}

// Per-tensor partial sums of squares over the dp group: gathered and added in rank order.
std::vector<double> sum_over_dp(ProcessGroup& dp, const std::vector<double>& mine) {
  const int64_t G = static_cast<int64_t>(mine.size()), n = dp.size();
  std::vector<double> in = mine, all(static_cast<size_t>(G * n));
  dp.all_gather(Tensor(in.data(), Shape{2 * G}, DType::I32),
                Tensor(all.data(), Shape{2 * G * n}, DType::I32));
  std::vector<double> sum(static_cast<size_t>(G), 0.0);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t r = 0; r < n; ++r) sum[g] += all[r * G + g];
  return sum;
}

}  // namespace

PipelineEngine::PipelineEngine(std::vector<GPT*> models, std::shared_ptr<ProcessGroup> pipeline,
                               pipeline::Schedule schedule, int B, int T,
                               OptimizerSettings optimizer, std::shared_ptr<ProcessGroup> dp,
                               ZeroSettings zero, AutoPlacementSettings placement)
    : models_(std::move(models)),
      pp_(std::move(pipeline)),
      dp_(dp ? std::move(dp) : std::make_shared<LocalProcessGroup>()),
      schedule_(std::move(schedule)),
      opt_(optimizer),
      B_(B),
      T_(T) {
  pipeline::validate(schedule_);
  const int p = pp_->size(), stage = pp_->rank();
  chunks_ = schedule_.chunks;
  const int V = schedule_.virtual_stages(), M = schedule_.microbatches;
  TIDE_CHECK(schedule_.stages == p,
             "schedule '{}' has {} stages but the pipeline group has {} ranks; build the "
             "schedule for the group's size",
             schedule_.name, schedule_.stages, p);
  TIDE_CHECK(static_cast<int>(models_.size()) == chunks_,
             "schedule '{}' runs {} model chunks per stage but stage {} was given {} models; "
             "build one GPT per chunk",
             schedule_.name, chunks_, stage, models_.size());
  TIDE_CHECK(2 * M * V <= 32768,
             "{} micro-batches x {} virtual stages are too many message tags; use fewer", M, V);
  check_lr_schedule(opt_.lr);
  // fp16: an overflow skips the step and the scaler backs off (DeepSpeed's rule).
  const DType compute = models_[0]->store().compute_dtype();
  scaler_ = make_loss_scaler(compute, opt_.fp16);
  if (compute == DType::F16) opt_.skip_non_finite = true;
  tp_ = models_[0]->tp() > 1 ? models_[0]->tp_group() : nullptr;
  for (int c = 0; c < chunks_; ++c) {
    TIDE_CHECK(models_[c]->tp() == models_[0]->tp() &&
                   (models_[c]->tp() == 1 || models_[c]->tp_group() == tp_),
               "chunk {} of stage {} is built with tensor parallelism over {} ranks but chunk 0 "
               "over {}; build every chunk with the same ModelOptions::tp group",
               c, stage, models_[c]->tp(), models_[0]->tp());
    virtual_.push_back(schedule_.virtual_stage(stage, c));
    TIDE_CHECK(models_[c]->pp() == V && models_[c]->stage() == virtual_[c],
               "chunk {} of stage {} runs virtual stage {} of {} but holds a model built for "
               "stage {} of {}; build it with ModelOptions pp = {}, stage = {}",
               c, stage, virtual_[c], V, models_[c]->stage(), models_[c]->pp(), V, virtual_[c]);
  }

  make_message_streams();
  plan();

  // Each tensor's place in the whole model (the gradient norm's order); lm_head.weight, the
  // last virtual stage's copy of wte, is left out so that the tied weight counts once. (An
  // untied Llama head, output.weight, has no copy to sum.)
  const bool tied = models_[0]->config().tied_head();
  const ChunkLayout whole = make_layout(models_[0]->config());
  model_tensors_ = whole.num_tensors();
  for (int g = 0; g < model_tensors_; ++g) tp_sharded_.push_back(tp_sharded(whole.slot(g).name));
  for (int c = 0; c < chunks_; ++c) {
    const ChunkLayout& mine = models_[c]->store().layout();
    norm_index_.emplace_back();
    for (int id = 0; id < mine.num_tensors(); ++id) {
      const std::string& name = mine.slot(id).name;
      norm_index_[c].push_back(name == "lm_head.weight" ? -1 : whole.find(name));
      if (name == "wte" && V > 1 && tied) wte_chunk_ = c, wte_id_ = id;
      if (name == "lm_head.weight") head_chunk_ = c, head_id_ = id;
    }
  }
  // The tied embedding's two copies: on one rank (ZB-V) they are summed locally; on two, over
  // a group of the two (collective over the pipeline group: every rank takes part).
  const int emb_rank = schedule_.locate(0).first, head_rank = schedule_.locate(V - 1).first;
  if (V > 1 && emb_rank != head_rank && tied) tied_ = pp_->new_group({emb_rank, head_rank});
  // The ZeRO stage is the stores' slicing (zero_sliced_kinds), the same on every chunk.
  const ChunkStore& first = models_[0]->store();
  zero_stage_ = first.sliced(ChunkKind::PARAM)    ? 3
                : first.sliced(ChunkKind::GRAD)   ? 2
                : first.sliced(ChunkKind::MASTER) ? 1
                                                  : 0;
  for (GPT* m : models_) {
    const ChunkStore& st = m->store();
    TIDE_CHECK(st.options().sliced_kinds == first.options().sliced_kinds &&
                   st.options().sliced_kinds == zero_sliced_kinds(zero_stage_),
               "the chunks of stage {} slice their kinds differently, or not as a ZeRO stage "
               "does; build every chunk's model with store.sliced_kinds = zero_sliced_kinds(the "
               "same stage)",
               stage);
    // The dp group is one axis of a mesh, easy to confuse with the world: a store packed for
    // another group size (any but 1 at stage 0) means the wrong group was passed.
    TIDE_CHECK((zero_stage_ == 0 && st.layout().group_size() == 1) ||
                   (st.layout().group_size() == dp_->size() &&
                    (zero_stage_ == 0 || st.options().group_rank == dp_->rank())),
               "stage {}'s chunks are sliced over {} ranks as rank {} (ModelOptions::group_size, "
               "store.group_rank), but its data-parallel group has {} ranks and this is rank {}; "
               "pass the mesh's dp group (Topology::group_ptr(MeshAxis::DP)), not the world, and "
               "build the model with group_size = {} and store.group_rank = the dp rank",
               stage, st.layout().group_size(), st.options().group_rank, dp_->size(), dp_->rank(),
               dp_->size());
  }
  TIDE_CHECK(zero.stage == 0 || zero.stage == zero_stage_,
             "ZeroSettings::stage is {} but the models' stores are sliced for ZeRO stage {}; "
             "build them with store.sliced_kinds = zero_sliced_kinds({}) or pass that stage",
             zero.stage, zero_stage_, zero.stage);
  zero.stage = zero_stage_;
  check_dp_group();
  check_tp_group();
  check_device();
  build_stacks(zero, placement);
  // The tied sum's gather buffers (sum_tied_gradient), made now.
  const bool ties = (wte_id_ >= 0 && head_id_ >= 0) || tied_;
  if (ties && stacks_[0]->sliced() && dp_->size() > 1) {
    if (wte_id_ >= 0) size_tied_buffer(wte_chunk_, wte_id_, tied_wte_buf_);
    if (head_id_ >= 0) size_tied_buffer(head_chunk_, head_id_, tied_head_buf_);
  }
}

void PipelineEngine::size_tied_buffer(int chunk, int id, Arena& buf) {
  const ChunkStore& st = models_[chunk]->store();
  const int c = st.layout().slot(id).chunk;
  const Tensor mine = stacks_[chunk]->grad(c);
  const size_t bytes = Arena::aligned(st.layout().chunk_elems(c) * dtype_size(mine.dtype));
  if (buf.capacity() >= bytes && buf.device() == mine.device) return;
  if (buf.capacity() > 0) synchronize(models_[0]->op());  // the stream may still read it
  buf = Arena("tied gradient", bytes,
              mine.device.is_cpu() ? nullptr : models_[chunk]->activation_allocator());
}

namespace {
// The order in which the block parts of `stage` acquire its models' parameter groups in one step
// (model/param_groups.h; ZeRO-3 prefetches by it, auto placement plans by it); store c is
// model chunk c.
std::vector<PlacedAccess> group_accesses(const pipeline::Schedule& s, int stage,
                                         std::span<GPT* const> models) {
  std::vector<PlacedAccess> seq;
  for (const pipeline::Action& a : s.actions[stage]) {
    if (!pipeline::is_compute(a.op)) continue;
    const GPT& model = *models[a.chunk];
    const ParamGroups groups(model.all_block_groups());
    for (const pipeline::BlockPart& p :
         pipeline::block_parts(a.op, model.num_blocks(), s.split_backward)) {
      const Use use = p.op == Op::F ? Use::FORWARD : p.op == Op::B ? Use::BACKWARD : Use::WEIGHT;
      for (int g : part_groups(model.block_groups(p.block), use, model.policy()))
        seq.push_back({a.chunk, {groups.first[p.block] + g, use}});
    }
  }
  return seq;
}

// Model chunk c's part of `accesses`.
std::vector<ParamAccess> chunk_accesses(std::span<const PlacedAccess> accesses, int c) {
  std::vector<ParamAccess> seq;
  for (const PlacedAccess& a : accesses)
    if (a.store == c) seq.push_back(a.access);
  return seq;
}
}  // namespace

void PipelineEngine::build_stacks(const ZeroSettings& zero,
                                  const AutoPlacementSettings& placement) {
  const std::vector<PlacedAccess> accesses = group_accesses(schedule_, pp_->rank(), models_);
  // placement.policy=auto: one placement of every chunk's store under the stage's budget.
  if (placement.device) {
    TIDE_CHECK(placement.host != nullptr,
               "placement.policy=auto needs a host allocator for every kind");
    std::vector<PlacedStore> stores;
    for (GPT* m : models_) {
      PlacedStore& p = stores.emplace_back();
      p.store = &m->store();
      for (const std::vector<int>& ids : ParamGroups(m->all_block_groups()).ids)
        p.group_chunks.push_back(m->store().layout().chunks_of(ids));
    }
    // Non-model memory: the micro-batches' activations in use; on a device they are allocated
    // from the budgeted tier itself (in its allocated bytes already).
    std::function<size_t()> activations;
    if (models_[0]->activation_allocator() != placement.device)
      activations = [this] {
        size_t b = 0;
        for (const auto& mb : mbs_) b += mb->saved.used() + mb->workspace.used();
        return b;
      };
    placement_ = std::make_unique<AutoPlacement>(std::move(stores), *placement.device,
                                                 *placement.host, accesses, std::move(activations),
                                                 models_[0]->op(), models_[0]->copies());
  }
  for (int c = 0; c < chunks_; ++c)
    stacks_.push_back(std::make_unique<PolicyStack>(*models_[c], *dp_, zero, placement_.get(), c,
                                                    chunk_accesses(accesses, c),
                                                    omp_get_max_threads()));
}

void PipelineEngine::sum_tied_gradient() {
  if (!(wte_id_ >= 0 && head_id_ >= 0) && !tied_) return;
  const bool sliced = stacks_[0]->sliced();
  // On a device the collectives below read gradients the stream wrote (ordered after it by
  // events: model/stream_collectives.h); the sums are ops on the stream. Where they write host
  // memory (offload's host slices, auto placement's host tier), whose readers are on the host,
  // the host waits for them at the end.
  const OpContext& op = models_[0]->op();
  bool host_written = false;
  // The whole reduced gradient of tensor `id` of chunk `chunk`. Under ZeRO the owned slices
  // hold the replicas' mean, and a tensor spans the slices of several replicas (at other offsets
  // on the other end of the tie): its chunk is gathered whole over dp into `buf`, in the
  // gradients' memory (the host, or the device) and dtype (f32, or bf16/f16 under mixed
  // precision).
  auto whole = [&](int chunk, int id, Arena& buf, Tensor& gathered) -> Tensor {
    const ChunkStore& st = models_[chunk]->store();
    if (!sliced) {
      const Tensor t = st.tensor(ChunkKind::GRAD, id);
      host_written |= t.device.is_cpu();
      return t;
    }
    const TensorSlot& slot = st.layout().slot(id);
    const Tensor mine = stacks_[chunk]->grad(slot.chunk);
    const int64_t n = st.layout().chunk_elems(slot.chunk);
    if (dp_->size() == 1) {  // the slice is the whole chunk: summed where it is
      host_written |= mine.device.is_cpu();
      gathered = mine;
    } else {
      size_tied_buffer(chunk, id, buf);  // sized already, unless auto placement moved it
      buf.reset();
      gathered = buf.alloc_tensor({n}, mine.dtype);
      collective_on_stream(op, *dp_, gathered,
                           [&] { return dp_->all_gather_async(mine, gathered); });
    }
    return Tensor(static_cast<std::byte*>(gathered.data) + slot.offset * dtype_size(mine.dtype),
                  Shape{slot.numel}, mine.dtype, mine.device);
  };
  // Under ZeRO each replica keeps its slice of the summed chunk.
  auto keep_slice = [&](int chunk, int id, const Tensor& gathered) {
    if (!sliced) return;
    const PolicyStack& stack = *stacks_[chunk];
    const int c = models_[chunk]->store().layout().slot(id).chunk;
    const Tensor mine = stack.grad(c);
    if (mine.data == gathered.data) return;  // one replica: summed in place
    host_written |= mine.device.is_cpu();
    copy(op, mine,
         Tensor(
             static_cast<std::byte*>(gathered.data) + stack.grad_begin(c) * dtype_size(mine.dtype),
             mine.shape, mine.dtype, gathered.device));
  };
  // wte and lm_head.weight both become the sum of the two gradients (a + b = b + a: the same
  // bits on both copies, wherever they live).
  Tensor wte_all, head_all;
  if (wte_id_ >= 0 && head_id_ >= 0) {
    const Tensor a = whole(wte_chunk_, wte_id_, tied_wte_buf_, wte_all);
    const Tensor b = whole(head_chunk_, head_id_, tied_head_buf_, head_all);
    // Each element's f32 sum rounded once into the dtype (add_elements' bits, the same for
    // a + b and b + a). On the CPU at once. On a device an op where both are in its memory;
    // where one or both are in host memory (ZeRO-Offload's f32 slices, auto placement's host
    // tier) the host adds once the stream has run what it queued, as a GPU needs (no CPU
    // kernel runs on its stream): a copy on the device comes down into a host buffer first,
    // and the sum goes back up. Then the other copy = the sum: on the host when both are there
    // (a copy between two host buffers on a stream would block the host).
    if (op.device.is_cpu()) {
      add_elements(a.dtype, a.data, a.data, b.data, a.numel());
      copy(op, b, a);
    } else if (a.device == op.device && b.device == op.device) {
      residual_forward(op, a, a, b);
      copy(op, b, a);
    } else if (a.device.is_cpu() && b.device.is_cpu()) {
      synchronize(op);
      add_elements(a.dtype, a.data, a.data, b.data, a.numel());
      std::memcpy(b.data, a.data, a.nbytes());
    } else {
      const Tensor on_host = a.device.is_cpu() ? a : b, on_device = a.device.is_cpu() ? b : a;
      if (tied_host_buf_.capacity() < Arena::aligned(a.nbytes()))
        tied_host_buf_ = Arena("tied gradient (host)", Arena::aligned(a.nbytes()),
                               models_[0]->host_staging_allocator());
      tied_host_buf_.reset();
      const Tensor down = tied_host_buf_.alloc_tensor(a.shape, a.dtype);
      copy(op, down, on_device);
      synchronize(op);
      add_elements(a.dtype, on_host.data, on_host.data, down.data, a.numel());
      copy(op, on_device, on_host);
      tied_sums_across_tiers_ += 1;
    }
  } else {
    const Tensor mine = wte_id_ >= 0 ? whole(wte_chunk_, wte_id_, tied_wte_buf_, wte_all)
                                     : whole(head_chunk_, head_id_, tied_head_buf_, head_all);
    collective_on_stream(op, *tied_, mine,
                         [&] { return tied_->all_reduce_async(mine, ReduceOp::Sum); });
  }
  if (wte_id_ >= 0) keep_slice(wte_chunk_, wte_id_, wte_all);
  if (head_id_ >= 0) keep_slice(head_chunk_, head_id_, head_all);
  if (host_written) synchronize(op);
}

void PipelineEngine::check_dp_group() {
  if (dp_->size() == 1) return;
  // Every replica of this stage must hold the same stage of the same pipeline: gathered over
  // the dp group (collective), so that every member reaches the same verdict.
  std::vector<int32_t> mine = {pp_->rank(), pp_->size(), schedule_.microbatches, chunks_, B_, T_};
  const int64_t K = static_cast<int64_t>(mine.size());
  std::vector<int32_t> all(static_cast<size_t>(K * dp_->size()));
  dp_->all_gather(Tensor(mine.data(), Shape{K}, DType::I32),
                  Tensor(all.data(), Shape{K * dp_->size()}, DType::I32));
  for (int r = 0; r < dp_->size(); ++r) {
    const int32_t* o = &all[static_cast<size_t>(r * K)];
    TIDE_CHECK(std::equal(mine.begin(), mine.end(), o),
               "data-parallel rank {} runs stage {} of {} ({} micro-batches, {} chunks, B={}, "
               "T={}) but dp rank {} runs stage {} of {} ({} micro-batches, {} chunks, B={}, "
               "T={}); the dp group must hold the same stage of every pipeline replica (with a "
               "Topology: group_ptr(MeshAxis::DP)), and the replicas the same schedule and shapes",
               dp_->rank(), mine[0], mine[1], mine[2], mine[3], mine[4], mine[5], r, o[0], o[1],
               o[2], o[3], o[4], o[5]);
  }
}

void PipelineEngine::check_device() const {
  const Device d = models_[0]->op().device;
  for (const GPT* m : models_)
    TIDE_CHECK(m->op().device == d,
               "the chunks of stage {} run on {} and {}; build every chunk on the same device",
               pp_->rank(), d.str(), m->op().device.str());
}

void PipelineEngine::make_message_streams() {
  const bool device_group = dynamic_cast<const DeviceRoutedGroup*>(pp_.get()) != nullptr;
  if (models_[0]->op().device.is_cpu() || !device_group || pp_->size() == 1) return;
  const int V = schedule_.virtual_stages(), stage = pp_->rank();
  act_stream_.assign(static_cast<size_t>(V), nullptr);
  grad_stream_.assign(static_cast<size_t>(V), nullptr);
  // Collective over pp_, in message_streams' order on every rank: the stream's two ranks get
  // its group (the sender first), the others nullptr.
  for (const pipeline::MessageStream& m : pipeline::message_streams(schedule_)) {
    const bool member = stage == m.from || stage == m.to;
    std::shared_ptr<ProcessGroup> g = pp_->split(member ? 0 : -1, stage == m.from ? 0 : 1);
    (m.grad ? grad_stream_ : act_stream_)[static_cast<size_t>(m.consumer)] = std::move(g);
  }
}

void PipelineEngine::check_tp_group() {
  if (!tp_) return;
  // The tp ranks of a stage run every block part together: the same stage of the same replica,
  // the same schedule and shapes (gathered, so that every member reaches the same verdict).
  std::vector<int32_t> mine = {pp_->rank(), pp_->size(), dp_->rank(), schedule_.microbatches,
                               chunks_,     B_,          T_};
  const int64_t K = static_cast<int64_t>(mine.size());
  std::vector<int32_t> all(static_cast<size_t>(K * tp_->size()));
  tp_->all_gather(Tensor(mine.data(), Shape{K}, DType::I32),
                  Tensor(all.data(), Shape{K * tp_->size()}, DType::I32));
  for (int r = 0; r < tp_->size(); ++r) {
    const int32_t* o = &all[static_cast<size_t>(r * K)];
    TIDE_CHECK(std::equal(mine.begin(), mine.end(), o),
               "tensor-parallel rank {} runs stage {} of {} as dp rank {} ({} micro-batches, {} "
               "chunks, B={}, T={}) but tp rank {} runs stage {} of {} as dp rank {} ({} "
               "micro-batches, {} chunks, B={}, T={}); the tp group must hold the same stage of "
               "the same replica (with a Topology: the models' ModelOptions::tp = "
               "group_ptr(MeshAxis::TP), the pipeline group group_ptr(MeshAxis::PP))",
               tp_->rank(), mine[0], mine[1], mine[2], mine[3], mine[4], mine[5], mine[6], r, o[0],
               o[1], o[2], o[3], o[4], o[5], o[6]);
  }
}

void PipelineEngine::sum_over_tp(std::vector<double>& norms2) {
  if (!tp_) return;
  // A shard's sums added in tp rank order, a replicated tensor's (bitwise equal on every tp
  // rank) taken from tp rank 0.
  const int64_t G = static_cast<int64_t>(norms2.size()), n = tp_->size();
  std::vector<double> all(static_cast<size_t>(G * n));
  tp_->all_gather(Tensor(norms2.data(), Shape{2 * G}, DType::I32),
                  Tensor(all.data(), Shape{2 * G * n}, DType::I32));
  for (int64_t g = 0; g < G; ++g) {
    double t = all[g];
    if (tp_sharded_[g])
      for (int64_t r = 1; r < n; ++r) t += all[r * G + g];
    norms2[g] = t;
  }
}

void PipelineEngine::plan() {
  const int stage = pp_->rank(), M = schedule_.microbatches;
  std::vector<int> blocks;
  size_t stash_bytes = 0;
  for (int c = 0; c < chunks_; ++c) {
    GPT& m = *models_[c];
    blocks.push_back(m.num_blocks());
    b_parts_.push_back(pipeline::block_parts(Op::B, m.num_blocks(), schedule_.split_backward));
    w_parts_.push_back(pipeline::block_parts(Op::W, m.num_blocks(), schedule_.split_backward));
    stash_bytes = std::max(stash_bytes, m.stash_slot_bytes(B_, T_));
  }
  // A stream's messages match in issue order: its sends must come in its receives' order.
  if (!act_stream_.empty()) pipeline::check_stream_order(schedule_);
  const pipeline::StagePeaks peak = pipeline::stage_peaks(schedule_, stage, blocks);
  stash_ = StashPool(stash_bytes, peak.stashes, models_[0]->activation_allocator());
  for (int c = 0; c < chunks_; ++c)
    for (int i = 0; i < peak.slots[c]; ++i) {
      mbs_.push_back(models_[c]->make_micro_batch(B_, T_, &stash_));
      Slot& s = slots_.emplace_back();
      s.chunk = c;
      s.m = mbs_.back().get();
    }
  act_from_.assign(static_cast<size_t>(M) * chunks_, -1);
  grad_from_.assign(static_cast<size_t>(M) * chunks_, -1);
  for (const pipeline::Action& a : schedule_.actions[stage]) {
    if (a.op == Op::RecvAct) act_from_[key(a.mb, a.chunk)] = a.peer;
    if (a.op == Op::RecvGrad) grad_from_[key(a.mb, a.chunk)] = a.peer;
    if (a.op == Op::F) f_order_.push_back({a.mb, a.chunk});
  }
}

void PipelineEngine::reschedule(pipeline::Schedule schedule) {
  pipeline::validate(schedule);
  TIDE_CHECK(schedule.stages == schedule_.stages && schedule.chunks == schedule_.chunks &&
                 schedule.placement == schedule_.placement &&
                 schedule.microbatches == schedule_.microbatches,
             "reschedule: schedule '{}' ({} stages, {} chunks per stage, {} micro-batches) does "
             "not run the step of '{}' ({} stages, {} chunks, {} micro-batches); the new schedule "
             "must keep them and the placement (the models, the tied-embedding group and the "
             "batch are built for them)",
             schedule.name, schedule.stages, schedule.chunks, schedule.microbatches, schedule_.name,
             schedule_.stages, schedule_.chunks, schedule_.microbatches);
  // Between steps nothing is in flight (step() waits every send and consumes every receive).
  for (const Slot& s : slots_) TIDE_ASSERT(!s.recv);
  for (Slot& s : slots_)
    for (Transfer& t : s.sends) t.wait(models_[0]->op());
  slots_.clear();
  mbs_.clear();
  b_parts_.clear();
  w_parts_.clear();
  f_order_.clear();
  schedule_ = std::move(schedule);
  plan();
  std::vector<PlacedAccess> accesses = group_accesses(schedule_, pp_->rank(), models_);
  for (int c = 0; c < chunks_; ++c) stacks_[c]->set_accesses(chunk_accesses(accesses, c));
  // Auto placement follows the new order from its next step (a warm-up again).
  if (placement_) placement_->replan(std::move(accesses));
}

PipelineEngine::~PipelineEngine() {
  // On a device the stream may still run the step's last ops (AdamW) on the activations and
  // chunks about to be freed: it finishes first. (An error it raised was reported, or is moot.)
  for (GPT* m : models_) {
    try {
      synchronize(m->op());
    } catch (const Error&) {
    }
  }
  // Never leave a transfer reading or writing freed activation buffers.
  for (Slot& s : slots_) {
    if (s.recv) s.recv.work->wait();
    for (Transfer& t : s.sends) t.work->wait();
  }
  // The policies wait for their reductions and give their buffers back.
  stacks_.clear();
}

int PipelineEngine::tag(int mb, int consumer, bool grad) const {
  return (mb * schedule_.virtual_stages() + consumer) * 2 + (grad ? 1 : 0);
}

PipelineEngine::Slot& PipelineEngine::slot_of(int mb, int chunk, bool take) {
  for (Slot& s : slots_)
    if (s.mb == mb && s.chunk == chunk) return s;
  TIDE_CHECK(take, "micro-batch {} chunk {} is not in flight on stage {}", mb, chunk, pp_->rank());
  for (Slot& s : slots_) {
    if (s.mb >= 0 || s.chunk != chunk) continue;
    const OpContext& op = models_[0]->op();
    for (Transfer& t : s.sends) {  // its buffers are about to be overwritten
      const TraceSpan span(host_waits_for(op, *t.group, t.buf) ? tracer_ : nullptr, "wait send",
                           "comm", {{"mb", t.mb}});
      t.wait(op);
    }
    s.sends.clear();
    s.mb = mb;
    return s;
  }
  TIDE_FAIL("stage {} has no free slot for micro-batch {} of chunk {}", pp_->rank(), mb, chunk);
}

void PipelineEngine::wait_recv(Slot& s) {
  if (!s.recv) return;
  const OpContext& op = models_[0]->op();
  // The host idles: a bubble, in the trace. (On a device the stream waits, the host goes on.)
  const bool bubble = host_waits_for(op, *s.recv.group, s.recv.buf) && !s.recv.work->is_completed();
  {
    const TraceSpan span(bubble ? tracer_ : nullptr, "wait recv", "comm", {{"mb", s.mb}});
    if (bubble) fill_bubble(*s.recv.work);
    s.recv.wait(op);
  }
  s.recv = Transfer{};
}

void PipelineEngine::fill_bubble(Work& until) {
  // Pieces small enough that the message is noticed soon after it arrives (256 KiB: tens of
  // microseconds of memcpy), and each poll also lets MPI progress.
  constexpr size_t kPiece = size_t{256} << 10;
  if (!post_validate_ || snapshot_.pending_bytes() == 0) return;
  const TraceSpan span(tracer_, "save optimizer state", "optimizer", {{"bubble", 1}});
  while (!until.is_completed() && snapshot_.save_some(kPiece)) {
  }
}

void PipelineEngine::post_next_act(int done, const std::vector<int>& first) {
  if (next_f_ >= f_order_.size()) return;
  const auto [mb, chunk] = f_order_[next_f_];
  const int k = key(mb, chunk);
  if (act_from_[k] < 0 || act_posted_[k]) return;
  // Taking the slot now holds one more slot of this chunk than the schedule does until the
  // receive's own action; safe when the free slots also cover every other (micro-batch, chunk)
  // of this chunk whose span starts before then.
  int free = 0, starts = 0;
  for (const Slot& s : slots_) free += s.chunk == chunk && s.mb < 0;
  for (int j = done + 1; j < first[k]; ++j) {
    const pipeline::Action& a = schedule_.actions[pp_->rank()][j];
    if (a.op != Op::OptimizerStep && a.chunk == chunk && first[key(a.mb, a.chunk)] == j) ++starts;
  }
  if (free < starts + 1) return;
  // Only a free slot whose sends are done: waiting for a send here could stall this stage
  // where the schedule does not (the receive is then posted at its own action).
  for (Slot& s : slots_) {
    if (s.mb >= 0 || s.chunk != chunk) continue;
    for (const Transfer& t : s.sends)
      if (!t.work->is_completed()) return;
    Slot& mine = slot_of(mb, chunk, /*take=*/true);
    mine.recv = post_message(models_[chunk]->input_activation(*mine.m), false, act_from_[k], mb,
                             virtual_[chunk], false, "recv act");
    act_posted_[k] = true;
    return;
  }
}

ProcessGroup* PipelineEngine::message_stream(int consumer, bool grad) const {
  if (act_stream_.empty()) return nullptr;
  ProcessGroup* g = (grad ? grad_stream_ : act_stream_)[static_cast<size_t>(consumer)].get();
  TIDE_ASSERT(g != nullptr);  // this stage sends or receives on it
  return g;
}

PipelineEngine::Transfer PipelineEngine::post_message(Tensor buf, bool send, int peer, int mb,
                                                      int consumer, bool grad, const char* what) {
  Transfer t{nullptr, AsyncTrace::start(tracer_, what, {{"mb", mb}, {"peer", peer}}), mb, buf,
             pp_.get()};
  // A message stream's group (its sender is rank 0, its receiver rank 1) waits on the device for
  // the ops queued before: those that write a sent buffer, or may still read a received one
  // (the slot's previous micro-batch). Over pp_, tagged, the host waits for them first.
  int to = peer, message_tag = tag(mb, consumer, grad);
  if (ProcessGroup* g = message_stream(consumer, grad)) {
    TIDE_ASSERT(g->rank() == (send ? 0 : 1));
    t.group = g;
    to = send ? 1 : 0;
    message_tag = 0;
  }
  prepare_collective(models_[0]->op(), *t.group, buf);
  t.work =
      send ? t.group->send_async(buf, to, message_tag) : t.group->recv_async(buf, to, message_tag);
  return t;
}

void PipelineEngine::measure_memory() {
  size_t saved = 0, stash = 0;
  for (const Slot& s : slots_)
    if (s.live) saved += s.m->saved.used();
  for (int i = 0; i < stash_.slots(); ++i) stash += stash_.slot(i).used();
  mem_.peak_bytes = std::max(mem_.peak_bytes, saved);
  mem_.peak_stash_bytes = std::max(mem_.peak_stash_bytes, stash);
  mem_.peak_total_bytes = std::max(mem_.peak_total_bytes, saved + stash);
}

void PipelineEngine::release(Slot& s) {
  TIDE_ASSERT(!s.recv);  // every receive is consumed by a compute of the same micro-batch
  s.mb = -1;             // its sends are waited when the slot is taken again
  s.live = false;
}

StepStats PipelineEngine::step(int64_t step, uint64_t seed, const BatchFn& batch, Tracer* tracer) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  // This step is traced (the stores too: chunk moves), and only this step.
  struct TracerScope {
    PipelineEngine& e;
    ~TracerScope() {
      for (GPT* m : e.models_) m->store().set_tracer(nullptr);
      e.tracer_ = nullptr;
    }
  } tracer_scope{*this};
  tracer_ = tracer;
  for (GPT* m : models_) m->store().set_tracer(tracer);
  const int M = schedule_.microbatches, stage = pp_->rank();
  const std::vector<pipeline::Action>& actions = schedule_.actions[stage];
  const std::vector<pipeline::ActionSpan> sp = pipeline::action_spans(actions, M, chunks_);
  std::vector<int> first(sp.size());
  for (size_t j = 0; j < sp.size(); ++j) first[j] = sp[j].first;
  for (GPT* m : models_) m->store().zero(ChunkKind::GRAD, m->op());
  // dp traffic from here (ZeRO-3's begin_step already starts gathering), not the norm's few
  // bytes.
  const uint64_t dp_sent = dp_->counters().bytes_sent;
  // A chunk's gradients are reduced as soon as a micro-batch (stage 0: the last) completes them.
  // The chunks of the tied embedding are still summed after their reduction: no early Adam.
  // fp16: the loss is scaled, and as in DeepSpeed a skipped step advances neither the lr
  // schedule nor Adam's t: the optimizer counts the applied steps.
  const bool fp16 = models_[0]->store().compute_dtype() == DType::F16;
  const double scale = scaler_->scale();
  const int64_t opt_step = fp16 ? step - scaler_->skipped_steps() : step;
  if (placement_) placement_->begin_step();
  for (int c = 0; c < chunks_; ++c)
    stacks_[c]->begin_step(opt_step, M, opt_, /*early_adam=*/c != wte_chunk_ && c != head_chunk_);
  // Post-validation rolls back state updated in place (policy_stack.h; every chunk's stack has
  // the same policies).
  const bool post_validate = post_validate_ && stacks_[0]->updates_in_place();
  std::vector<ChunkStore*> stores;
  for (GPT* m : models_) stores.push_back(&m->store());
  // Post-validation's copy of the optimizer state: taken in this step's bubbles, finished
  // before the optimistic update (the state does not change until then).
  if (post_validate) snapshot_.begin(stores, models_[0]->op());
  next_f_ = 0;
  act_posted_.assign(static_cast<size_t>(M) * chunks_, false);
  grad_posted_.assign(static_cast<size_t>(M) * chunks_, false);
  // Each micro-batch's loss (the last virtual stage's), summed in micro-batch order at the end.
  // On a device they are read back without a wait of their own (MicroBatch::defer_loss): a
  // slot's loss is taken before its next forward, the rest after the step's last wait.
  std::vector<float> losses(static_cast<size_t>(M), 0.0f);
  auto take_loss = [&](GPT& model, MicroBatch& mb) {
    if (mb.loss_pending) losses[static_cast<size_t>(mb.index)] = model.finish_loss(mb);
  };
  mem_ = ActivationMemory{};
  post_next_act(-1, first);
  for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
    const pipeline::Action& a = actions[i];
    if (a.op == Op::OptimizerStep) continue;  // the rest of this function
    const int k = key(a.mb, a.chunk), v = virtual_[a.chunk];
    GPT& model = *models_[a.chunk];
    // A (micro-batch, chunk)'s slot is taken at its first action (unless its receive took it
    // early).
    Slot& s = slot_of(a.mb, a.chunk, /*take=*/sp[k].first == i);
    MicroBatch& mb = *s.m;
    switch (a.op) {
      case Op::RecvAct:  // usually posted already (post_next_act)
        if (!act_posted_[k])
          s.recv =
              post_message(model.input_activation(mb), false, a.peer, a.mb, v, false, "recv act");
        act_posted_[k] = true;
        break;
      case Op::RecvGrad:  // posted right after F (below)
        TIDE_ASSERT(grad_posted_[k]);
        break;
      case Op::SendAct:
        s.sends.push_back(post_message(model.output_activation(mb), true, a.peer, a.mb, v + 1,
                                       false, "send act"));
        break;
      case Op::SendGrad:
        s.sends.push_back(
            post_message(model.residual_grad(mb), true, a.peer, a.mb, v - 1, true, "send grad"));
        break;
      case Op::F: {
        take_loss(model, mb);  // the slot's previous micro-batch
        const GPT::HostBatch host = model.host_batch(mb);
        batch(a.mb, host.tokens, host.targets);
        mb.training = true;
        mb.seed = seed;
        mb.step = static_cast<uint64_t>(step);
        mb.index = a.mb;
        // The single-rank run's numbering: micro-batch mb of every replica, then the replica.
        mb.seq0 = (static_cast<uint64_t>(a.mb) * dp_->size() + dp_->rank()) * B_;
        mb.dloss = static_cast<float>(scale) / static_cast<float>(M);
        mb.tracer = tracer;
        mb.defer_loss = !model.op().device.is_cpu();
        if (v > 0 && act_from_[k] < 0) {  // the previous virtual stage is on this rank
          const int from = schedule_.locate(v - 1).second;
          copy(model.op(), model.input_activation(mb),
               models_[from]->output_activation(*slot_of(a.mb, from, false).m));
        }
        wait_recv(s);
        {
          const TraceSpan span(tracer, "F", "action", {{"mb", a.mb}, {"chunk", a.chunk}});
          const float loss = model.forward(mb);
          if (model.has_head() && !mb.loss_pending) losses[static_cast<size_t>(a.mb)] = loss;
          // A traced step times the stream's work, not its queueing (zb-auto schedules from
          // these spans); a no-op on the CPU.
          if (tracer) synchronize(model.op());
        }
        ++next_f_;
        // From here until B nothing touches the residual gradient: receive into it now.
        if (grad_from_[k] >= 0) {
          s.recv = post_message(model.residual_grad(mb), false, grad_from_[k], a.mb, v, true,
                                "recv grad");
          grad_posted_[k] = true;
        }
        break;
      }
      case Op::B:
      case Op::W: {
        wait_recv(s);
        {
          const TraceSpan span(tracer, a.op == Op::B ? "B" : "W", "action",
                               {{"mb", a.mb}, {"chunk", a.chunk}});
          for (const pipeline::BlockPart& part :
               a.op == Op::B ? b_parts_[a.chunk] : w_parts_[a.chunk])
            if (part.op == Op::B)
              model.backward_input_block(mb, part.block);
            else
              model.backward_weight_block(mb, part.block, /*mark_grads=*/true);
          if (tracer) synchronize(model.op());
        }
        // The input gradient goes to the previous virtual stage: by a copy when it is here
        // (its slot is in flight: its F came before this chunk's, its B comes after).
        if (a.op == Op::B && v > 0 && schedule_.locate(v - 1).first == stage) {
          const int to = schedule_.locate(v - 1).second;
          copy(model.op(), models_[to]->residual_grad(*slot_of(a.mb, to, false).m),
               model.residual_grad(mb));
        }
        break;
      }
      case Op::OptimizerStep:
        break;
    }
    if (pipeline::is_compute(a.op)) {
      if (a.op == Op::F) {
        s.live = true;
        mem_.micro_batch_bytes = std::max(mem_.micro_batch_bytes, mb.saved.used());
      }
      measure_memory();
    }
    if (sp[k].last == i) release(s);
    post_next_act(i, first);
  }
  StepStats st;
  // Every chunk's gradients are complete (the last W is done): the stacks finish their
  // reductions over dp once the last sends are done, then the tied copies are summed.
  {
    const TraceSpan span(tracer, "finish gradients", "comm");
    for (Slot& s : slots_) {
      for (Transfer& t : s.sends) t.wait(models_[0]->op());
      s.sends.clear();
    }
    // Stage 0's exposed communication: what of its all-reduces the schedule did not hide.
    const auto t_reduce = Clock::now();
    for (auto& stack : stacks_) stack->finish_gradients(tracer, st);
    st.comm_seconds = std::chrono::duration<double>(Clock::now() - t_reduce).count();
    sum_tied_gradient();
  }
  uint64_t dp_bytes = dp_->counters().bytes_sent - dp_sent;  // not the norm's few bytes

  if (gradient_hook_) gradient_hook_(step, models_);

  // The global gradient norm from per-tensor sums of squares: this rank's part of each tensor
  // (whole, or its ZeRO slice), added over dp in rank order, over tp, then over the pipeline in
  // whole-model tensor order: the same bits on every rank, for every schedule and placement.
  std::optional<TraceSpan> norm_span;
  norm_span.emplace(tracer, "grad norm", "optimizer");
  std::vector<double> norms2(model_tensors_, 0.0), all_norms2;
  std::vector<std::vector<double>> sums(static_cast<size_t>(chunks_));
  for (int c = 0; c < chunks_; ++c)
    sums[c].assign(static_cast<size_t>(models_[c]->store().layout().num_tensors()), 0.0);
  // On a device every chunk's sums are queued first and the host waits once for them all.
  const bool on_stream = stacks_[0]->sums_on_stream();
  if (on_stream) {
    for (int c = 0; c < chunks_; ++c) stacks_[c]->queue_device_tensor_sums();
    synchronize(models_[0]->op());
  }
  for (int c = 0; c < chunks_; ++c) {
    std::vector<int> fresh;  // the tied tensors, changed after their reduction
    if (c == wte_chunk_) fresh.push_back(wte_id_);
    if (c == head_chunk_) fresh.push_back(head_id_);
    if (on_stream)
      stacks_[c]->finish_tensor_sums(sums[c]);
    else
      stacks_[c]->tensor_sums(sums[c], fresh);
    for (size_t id = 0; id < sums[c].size(); ++id)
      if (norm_index_[c][id] >= 0) norms2[norm_index_[c][id]] = sums[c][id];
  }
  if (stacks_[0]->sliced()) norms2 = sum_over_dp(*dp_, norms2);
  sum_over_tp(norms2);
  const WorkPtr norm_work = gather_norms(*pp_, norms2, all_norms2);
  // If anything below throws, the gather must not go on writing into freed vectors.
  struct WaitOnUnwind {
    const WorkPtr& work;
    ~WaitOnUnwind() {
      if (std::uncaught_exceptions() == 0) return;
      try {
        work->wait();
      } catch (...) {  // the exception in flight is the one to report
      }
    }
  } wait_on_unwind{norm_work};
  auto update = [&](const UpdatePlan& plan, const char* what) {
    for (auto& stack : stacks_) stack->update(opt_, opt_step, plan, tracer, what);
  };
  double scaled_norm = 0;  // the norm of the gradients as they are: `scale` times the true one
  if (!post_validate) {
    norm_work->wait();
    scaled_norm = std::sqrt(sum_in_model_order(all_norms2, model_tensors_));
    norm_span.reset();
    const UpdatePlan plan = plan_update(opt_, opt_step, scaled_norm, scale);
    st.lr = plan.lr;
    st.skipped = plan.skip;
    update(plan, "optimizer");
  } else {
    norm_span.reset();
    // The update for a norm that needs no clipping: lr from the schedule, clip 1.
    const UpdatePlan optimistic = plan_update(opt_, opt_step, /*grad_norm=*/0.0, scale);
    if (snapshot_.pending_bytes() > 0) {  // what the bubbles did not copy
      const TraceSpan span(tracer, "save optimizer state", "optimizer");
      snapshot_.save_rest();
    }
    update(optimistic, "optimizer (optimistic)");
    {
      const TraceSpan span(tracer, "wait grad norm", "optimizer");
      norm_work->wait();
    }
    scaled_norm = std::sqrt(sum_in_model_order(all_norms2, model_tensors_));
    UpdatePlan plan;
    try {
      plan = plan_update(opt_, opt_step, scaled_norm, scale);
    } catch (...) {  // as the synchronous update: the error, with nothing changed
      snapshot_.restore();
      throw;
    }
    if (plan.skip || plan.clip != optimistic.clip) {
      {
        const TraceSpan span(tracer, "rollback", "optimizer");
        snapshot_.restore();
      }
      st.rollbacks = 1;
      update(plan, "optimizer (redo)");
    }
    st.lr = plan.lr;
    st.skipped = plan.skip;
  }
  st.grad_norm = scaled_norm / scale;
  st.loss_scale = scale;
  // The same decision on every rank: the norm is global, so an overflow on any rank is one
  // everywhere. Throws (the run cannot go on) on an overflow at the minimum scale.
  if (fp16) scaler_->update(st.skipped);
  st.next_loss_scale = scaler_->scale();

  // ZeRO: each replica updated its own slice of every chunk; gather the whole parameters.
  {
    const TraceSpan span(tracer, "gather params", "comm");
    const uint64_t before = dp_->counters().bytes_sent;
    for (auto& stack : stacks_) stack->after_update(st);
    dp_bytes += dp_->counters().bytes_sent - before;
  }
  if (placement_) {
    placement_->end_step();
    st.placement = placement_->counters();
  }
  st.bytes_sent = dp_bytes;
  // ZeRO counts every blocking wait (gathers, reductions); stage 0 waits only after backward.
  if (zero_stage_ > 0) {
    st.comm_seconds = 0;
    for (const auto& stack : stacks_) st.comm_seconds += stack->zero()->counters().wait_seconds;
  }

  // The loss lives with the last virtual stage.
  for (Slot& s : slots_)
    if (s.m) take_loss(*models_[s.chunk], *s.m);
  double loss_sum = 0;
  for (float l : losses) loss_sum += l;
  double loss = loss_sum / M;
  pp_->broadcast(Tensor(&loss, Shape{2}, DType::I32),
                 schedule_.locate(schedule_.virtual_stages() - 1).first);
  st.step = step + 1;
  st.loss = static_cast<float>(loss);
  st.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return st;
}

}  // namespace tide

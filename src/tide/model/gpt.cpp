#include "tide/model/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>

#include "tide/core/dtype.h"
#include "tide/core/sim_device.h"
#include "tide/core/trace.h"
#include "tide/kernels/host_upload.h"
#include "tide/kernels/mover.h"
#include "tide/kernels/rope_freq.h"
#include "tide/model/llama_blocks.h"

namespace tide {

GPT::GPT(const GPTConfig& config, ActivationPolicy policy, int64_t chunk_elems, bool with_optimizer,
         int group_size)
    : GPT(config, policy, [&] {
        ModelOptions o;
        o.chunk_elems = chunk_elems;
        o.group_size = group_size;
        o.store.with_optimizer = with_optimizer;
        return o;
      }()) {}

GPT::GPT(const GPTConfig& config, ActivationPolicy policy, const ModelOptions& options)
    : config_(config),
      pp_(options.pp),
      stage_(options.stage),
      activations_(options.activations),
      host_staging_(options.host_staging) {
  env_.op = options.op;
  copies_ = options.copies.device.is_cpu() ? options.op : options.copies;
  env_.copies = copies_;
  check_device(options);
  if (options.tp && options.tp->size() > 1) {
    tp_group_ = options.tp;
    env_.tp = tp_group_.get();
    env_.sp = options.sequence_parallel;
  }
  TIDE_CHECK(!options.sequence_parallel || options.tp,
             "sequence parallelism shards over the tensor-parallel group; give the model one "
             "(ModelOptions::tp) or turn sequence parallelism off");
  const int tp = env_.tp_size(), tp_rank = env_.tp_rank();
  if (options.partition_activations) {
    TIDE_CHECK(policy == ActivationPolicy::FULL,
               "partition_activations partitions the block inputs that the full recompute "
               "policy keeps; the activation policy is '{}': use 'full' or turn "
               "partition_activations off",
               activation_policy_name(policy));
    TIDE_CHECK(tp > 1,
               "partition_activations slices the block inputs over the tensor-parallel group, "
               "and there is none (tp = {}); give the model one (ModelOptions::tp, size > 1) or "
               "turn partition_activations off",
               tp);
    TIDE_CHECK(!options.sequence_parallel,
               "partition_activations with sequence parallelism: the block inputs are already "
               "1/{} sequence shards, nothing more to partition; turn one of them off",
               tp);
  }
  TIDE_CHECK(!options.cpu_checkpointing || options.partition_activations,
             "cpu_checkpointing moves the partitioned block inputs to host memory and needs "
             "partition_activations; turn partition_activations on or cpu_checkpointing off");
  env_.partition_activations = options.partition_activations;
  env_.cpu_checkpointing = options.cpu_checkpointing;
  if (tp > 1) {
    // The last rank must hold at least one real vocabulary row (the rows are ceil(V/t) each).
    TIDE_CHECK(int64_t{config_.vocab_size} > (tp - 1) * vocab_rows_per_rank(config_, tp),
               "model.vocab_size {} leaves tensor-parallel rank {} of {} without a vocabulary "
               "row ({} rows each); use fewer tensor-parallel ranks",
               config_.vocab_size, tp - 1, tp, vocab_rows_per_rank(config_, tp));
  }
  // make_layout checks the stage range, that the layers divide over the stages and that the
  // heads (hence the hidden size) divide over the tensor-parallel ranks.
  ChunkLayout layout =
      make_layout(config_, RankCoords{.tp = tp, .tp_rank = tp_rank, .pp = pp_, .stage = stage_});
  make_kv_group(options.kv_group);
  layout.pack(options.chunk_elems, options.group_size);
  store_ = std::make_unique<ChunkStore>(std::move(layout), options.store);
  env_.config = &config_;
  env_.policy = policy;
  env_.store = store_.get();
  env_.act = store_->compute_dtype();
  const int per_stage = config_.n_layer / pp_;
  first_layer_ = stage_ * per_stage;
  end_layer_ = first_layer_ + per_stage;

  const ChunkLayout& lay = store_->layout();
  groups_ = tide::block_groups(lay);
  if (config_.is_llama()) {
    build_llama_blocks();
    return;
  }
  if (has_embedding()) {
    const std::vector<int>& g = groups_.front().groups[0];  // wte, wpe
    blocks_.push_back(std::make_unique<EmbeddingBlock>(env_, g[0], g[1]));
  }
  for (int l = first_layer_; l < end_layer_; ++l)
    blocks_.push_back(std::make_unique<TransformerBlock>(
        env_, l, groups_[blocks_.size()].ids()));  // kLayerParamNames order
  if (has_head()) {
    // One stage: the head reads wte itself, whose gradient is complete after the embedding
    // (the last of its two users in backward order). Several: the last stage's own copy.
    const std::vector<int>& g = groups_.back().groups[0];  // ln_f w, b, the LM head weight
    blocks_.push_back(std::make_unique<HeadBlock>(env_, g[2], g[0], g[1]));
  }
  TIDE_ASSERT(blocks_.size() == groups_.size());
}

void GPT::make_kv_group(std::shared_ptr<ProcessGroup> given) {
  const int replicas = config_.is_llama() ? kv_head_replicas(config_, env_.tp_size()) : 1;
  if (replicas == 1) return;
  // Rank r holds kv head r / replicas: consecutive ranks share one (layout.h).
  const int tp_rank = env_.tp_rank();
  kv_group_ = given ? std::move(given) : tp_group_->split(tp_rank / replicas, tp_rank);
  TIDE_CHECK(kv_group_ && kv_group_->size() == replicas && kv_group_->rank() == tp_rank % replicas,
             "ModelOptions::kv_group has rank {} of {}, but tensor-parallel rank {} shares its "
             "key/value head with {} ranks as rank {} of them; leave kv_group unset (the model "
             "splits the tp group) or pass that split",
             kv_group_ ? kv_group_->rank() : -1, kv_group_ ? kv_group_->size() : 0, tp_rank,
             replicas, tp_rank % replicas);
  env_.kv_group = kv_group_.get();
}

uint64_t GPT::sim_host_waits() const {
  if (!env_.op.sim) return 0;
  const uint64_t op = env_.op.sim->synchronizations();
  return copies_.sim == env_.op.sim ? op : op + copies_.sim->synchronizations();
}

GPT::~GPT() {
  try {
    synchronize(env_.op);
    synchronize(copies_);
  } catch (const Error&) {  // an error the stream raised was reported at a wait, or is moot now
  }
}

void GPT::build_llama_blocks() {
  // RoPE's inverse frequencies, made once on the host and copied to the model's device.
  const std::vector<float> inv_freq = rope_inv_freq(config_.rope_spec());
  const int64_t n = static_cast<int64_t>(inv_freq.size());
  rope_ = Arena("rope inv_freq", Arena::aligned(static_cast<size_t>(n) * 4), activations_);
  env_.rope_inv_freq = rope_.alloc_tensor({n}, DType::F32);
  copy(env_.op, env_.rope_inv_freq, Tensor(const_cast<float*>(inv_freq.data()), {n}));
  synchronize(env_.op);  // before inv_freq goes
  if (has_embedding())
    blocks_.push_back(std::make_unique<LlamaEmbeddingBlock>(env_, groups_.front().groups[0][0]));
  for (int l = first_layer_; l < end_layer_; ++l)
    blocks_.push_back(
        std::make_unique<LlamaBlock>(env_, l, groups_[blocks_.size()].ids()));  // layout order
  if (has_head()) {
    const std::vector<int>& g = groups_.back().groups[0];  // ln_f.weight, the LM head weight
    blocks_.push_back(std::make_unique<LlamaHeadBlock>(env_, g[1], g[0]));
  }
  TIDE_ASSERT(blocks_.size() == groups_.size());
}

void GPT::init_weights(uint64_t seed) {
  const ChunkLayout& lay = store_->layout();
  // RNG streams are keyed by the tensor's position in the whole model's layout, so a stage
  // draws the values the whole model draws; the last stage's lm_head copy draws wte's. A
  // tensor-parallel shard draws, for each element, the whole tensor's element
  // (tp_global_index; -1: a vocabulary padding row, 0).
  const bool sharded = pp_ > 1 || env_.tp_size() > 1;
  const ChunkLayout whole = sharded ? make_layout(config_) : ChunkLayout();
  auto stream_id = [&](int id) {
    if (!sharded) return id;
    const std::string& name = lay.slot(id).name;
    return whole.find(name == "lm_head.weight" ? std::string("wte") : name);
  };
  // The Llama family: transformers' _init_weights with initializer_range 0.02: every matrix
  // and the embedding N(0, 0.02), no scaled residual projections, RMSNorm weights 1, the qkv
  // bias 0.
  const bool llama = config_.is_llama();
  const float proj_std = llama ? 0.02f : 0.02f / std::sqrt(2.0f * config_.n_layer);
  // Every kind that holds the weights gets them: PARAM, and a MASTER of its own (16-bit
  // compute, or offload's host copy) in f32, so PARAM is MASTER rounded. Under ZeRO a kind may
  // hold only this rank's slice.
  std::vector<ChunkKind> kinds = {ChunkKind::PARAM};
  if (store_->has(ChunkKind::MASTER) && !store_->master_aliases_param())
    kinds.push_back(ChunkKind::MASTER);
  // The values of tensor `id` that lie in [lo, lo + values.size()) of its chunk, into `values`.
  // Each element is its own draw (Philox is counter-based), so the threads share the work and
  // the values are those of one thread.
  auto draw = [&](int id, int64_t lo, std::vector<float>& values) {
    const TensorSlot& s = lay.slot(id);
    const bool is_bias = s.name.ends_with(".bias");
    const bool is_norm = s.name.find(llama ? "norm" : "ln_") != std::string::npos ||
                         (llama && s.name == "ln_f.weight");
    const float std = s.name.ends_with("c_proj.weight") ? proj_std : 0.02f;
    // One RNG stream per tensor, keyed by its name's position: independent of chunking, so
    // each rank draws exactly the elements it holds.
    const PhiloxStream rng{seed, rng_stream_id(0x1417, static_cast<uint64_t>(stream_id(id)))};
    const int tp = env_.tp_size();
    const RankCoords at = coords();
    // The tensor's elements [a, b): the part inside [lo, lo + values.size()).
    const int64_t a = std::clamp<int64_t>(lo - s.offset, 0, s.numel);
    const int64_t b = std::clamp<int64_t>(lo + std::ssize(values) - s.offset, a, s.numel);
    float* out = values.data() + (s.offset + a - lo);
    if (is_norm || is_bias) {
      std::fill(out, out + (b - a), (is_norm && !is_bias) ? 1.0f : 0.0f);
      return;
    }
#pragma omp parallel for schedule(static) if (b - a > (1 << 16))
    for (int64_t i = a; i < b; ++i) {
      int64_t g = i;  // the whole tensor's element (-1: a vocabulary padding row, 0)
      if (tp > 1) g = tp_global_index(config_, at, s.name, i);
      out[i - a] = g < 0 ? 0.0f : std * rng.normal(static_cast<uint64_t>(g));
    }
  };
  std::vector<std::vector<int>> ids_of(lay.num_chunks());  // [c]: the tensors of chunk c
  for (int id = 0; id < lay.num_tensors(); ++id) ids_of[lay.slot(id).chunk].push_back(id);
  // Each chunk's values are drawn once in f32 (zeros where no tensor lies, as the allocation
  // zeroed them), over the elements this rank owns of it in any kind, and each kind takes its
  // part rounded to its dtype. A device chunk is written through a host copy, sent up before
  // the next: the host holds one chunk at a time.
  std::vector<float> values;
  HostUpload upload;
  for (int c = 0; c < lay.num_chunks(); ++c) {
    // What this rank owns: the whole chunk, or under ZeRO its slice (also where a gathered copy
    // is attached over it, which the policy gathers again: sync_params).
    std::vector<Chunk> owned;
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (ChunkKind kind : kinds) {
      const Chunk ch = store_->owned(kind, c);
      TIDE_CHECK(ch.data != nullptr, "cannot initialise chunk {} ({}): it is not resident", c,
                 chunk_kind_name(kind));
      TIDE_CHECK(is_float_dtype(ch.dtype), "cannot initialise chunk {} ({}): parameters in {}", c,
                 chunk_kind_name(kind), dtype_name(ch.dtype));
      owned.push_back(ch);
      lo = std::min(lo, ch.begin);
      hi = std::max(hi, ch.begin + ch.elems);
    }
    values.assign(static_cast<size_t>(hi - lo), 0.0f);
    for (int id : ids_of[c]) draw(id, lo, values);
    for (size_t k = 0; k < kinds.size(); ++k) {
      const Chunk& ch = owned[k];
      const Tensor dst =
          store_->sliced(kinds[k]) ? store_->slice(kinds[k], c) : store_->chunk(kinds[k], c);
      auto* out = static_cast<std::byte*>(upload.bytes_for(dst));
      const float* in = values.data() + (ch.begin - lo);
      const int64_t block = 1 << 20, blocks = (ch.elems + block - 1) / block;
      const size_t width = dtype_size(ch.dtype);
#pragma omp parallel for schedule(static)
      for (int64_t j = 0; j < blocks; ++j) {
        const int64_t first = j * block, n = std::min(block, ch.elems - first);
        convert_elements(in + first, DType::F32, out + first * width, ch.dtype, n);
      }
      upload.send(env_.op, dst);
    }
  }
}

void GPT::check_device(const ModelOptions& o) const {
  const Device d = o.op.device;
  TIDE_CHECK(o.copies.device.is_cpu() || o.copies.device == d,
             "the model's ops run on {} but ModelOptions::copies is a context for {}; make it "
             "with make_copy_context(op)",
             d.str(), o.copies.device.str());
  auto on = [&](const Allocator* a) { return a ? a->device() : Device::cpu(); };
  if (d.is_cpu()) {
    TIDE_CHECK(on(o.activations).is_cpu() && on(o.store.compute).is_cpu(),
               "the model's ops run on the CPU but its memory is on {}; give ModelOptions::op a "
               "context for that device (make_op_context)",
               on(o.activations).is_cpu() ? on(o.store.compute).str() : on(o.activations).str());
    return;
  }
  // The chunks may start on the host: ZeRO-Offload keeps the optimizer state (and with
  // offload_param the parameter slices) there, and placement.policy=auto moves each chunk to
  // the device before an op reads it (the ops refuse host tensors).
  auto here_or_host = [&](const Allocator* a) { return on(a) == d || on(a).is_cpu(); };
  TIDE_CHECK(on(o.activations) == d && here_or_host(o.store.compute) &&
                 (!o.store.with_optimizer || here_or_host(o.store.optimizer)),
             "a model on {} keeps its activations there and its chunks there or on the host: "
             "ModelOptions::activations must allocate on {}, store.compute and store.optimizer "
             "on it or on the host (they are on {}, {} and {})",
             d.str(), d.str(), on(o.activations).str(), on(o.store.compute).str(),
             on(o.store.optimizer).str());
}

std::unique_ptr<MicroBatch> GPT::make_micro_batch(int B, int T, StashPool* stash,
                                                  bool training) const {
  TIDE_CHECK(B >= 1, "micro-batch size must be at least 1 (got {})", B);
  TIDE_CHECK(T >= 1 && T <= config_.max_seq_len,
             "sequence length {} is outside [1, model.max_seq_len = {}]; lower the sequence "
             "length or raise model.max_seq_len",
             T, config_.max_seq_len);
  TIDE_CHECK(!env_.sp || T % env_.tp_size() == 0,
             "sequence length {} does not divide over {} tensor-parallel ranks under sequence "
             "parallelism; pick a sequence length that is a multiple of {}",
             T, env_.tp_size(), env_.tp_size());
  auto mb = std::make_unique<MicroBatch>();
  mb->B = B;
  mb->T = T;
  // The residual stream: (B,T,C), or this rank's sequence shard (B,T/t,C) under SP.
  const int64_t Ts = env_.seq_local(T);
  const int64_t C = config_.n_embd;
  // The arenas' sizes (arena_bytes.h: the blocks' *_bytes, and what tide estimate counts).
  const MicroBatchArenas sizes = micro_batch_arenas(arena_shape(env_), first_layer_, end_layer_,
                                                    has_embedding(), has_head(), B, T, training);
  // P_a: the forward needs only the boundary it reads and the one it writes (ping-pong).
  const int boundaries = end_layer_ - first_layer_ + 1;
  const int buffers = env_.partition_activations && training ? std::min(boundaries, 2) : boundaries;
  mb->training = training;
  mb->sized_for_training = training;
  mb->saved = Arena("activations", sizes.saved, activations_);
  if (env_.cpu_checkpointing)
    mb->host_checkpoints = Arena("host checkpoints", sizes.host_checkpoints, host_staging_);
  mb->workspace = Arena("workspace", sizes.workspace, activations_);
  // An evaluation micro-batch keeps nothing from F to B: no stash either.
  if (!stash && training) {
    mb->own_stash = std::make_unique<StashPool>(stash_slot_bytes(B, T), 1, activations_);
    stash = mb->own_stash.get();
  }
  TIDE_CHECK(!stash || stash->slot_bytes() >= stash_slot_bytes(B, T),
             "the W stash pool's slots ({} bytes) are smaller than a ({},{}) micro-batch needs",
             stash ? stash->slot_bytes() : 0, B, T);
  mb->stash = stash;
  mb->stash_slot.assign(blocks_.size(), -1);
  mb->tokens = mb->saved.alloc_tensor({B, T}, DType::I32);
  mb->targets = mb->saved.alloc_tensor({B, T}, DType::I32);
  if (env_.op.device.is_cpu()) {
    mb->host_tokens = mb->tokens;
    mb->host_targets = mb->targets;
  } else {  // the host's side of the copies up (tokens, targets) and down (the losses)
    mb->host = Arena("host batch", 3 * Arena::aligned(size_t{4} * B * T), host_staging_);
    mb->host_tokens = mb->host.alloc_tensor({B, T}, DType::I32);
    mb->host_targets = mb->host.alloc_tensor({B, T}, DType::I32);
    if (has_head()) mb->host_losses = mb->host.alloc_tensor({B, T}, DType::F32);
  }
  // Residuals and saved tensors are indexed globally (by layer; block_saved: embedding 0,
  // layer l at l+1, head at L+1); a stage allocates only its own boundaries.
  mb->residual.resize(config_.n_layer + 1);
  for (int l = first_layer_; l <= end_layer_; ++l) {
    const int k = l - first_layer_;
    mb->residual[l] = k < buffers ? mb->saved.alloc_tensor({B, Ts, C}, env_.act)
                                  : mb->residual[first_layer_ + k % buffers];
  }
  mb->dresidual = mb->saved.alloc_tensor({B, Ts, C}, env_.act);
  mb->saved_mark = mb->saved.mark();
  mb->block_saved.resize(config_.n_layer + 2);
  return mb;
}

size_t GPT::stash_slot_bytes(int B, int T) const {
  size_t m = 0;
  for (const auto& b : blocks_) m = std::max(m, b->stash_bytes(B, T));
  return m;
}

// A block part under `access`: a block that acquires per op (a transformer block) calls
// access.use(g) before each op; the others have their one group (if the part reads any)
// acquired around the part.
void GPT::run_part(MicroBatch& mb, int i, GroupAccess& access, void (Block::*part)(MicroBatch&)) {
  const size_t mark = mb.workspace.mark();
  mb.params = &access;
  if (!groups_[i].per_op())
    for (int g : part_groups(groups_[i], access.use_of(), env_.policy)) access.use(g);
  (blocks_[i].get()->*part)(mb);
  access.finish();
  mb.params = nullptr;
  mb.workspace.rewind(mark);
}

void GPT::forward_block(MicroBatch& mb, int i) {
  TIDE_CHECK(!mb.training || mb.sized_for_training,
             "a training forward needs a micro-batch made for training (make_micro_batch with "
             "training = true); this one is sized for evaluation");
  const TraceSpan span(mb.tracer, "forward", "compute", {{"block", i}, {"mb", mb.index}});
  GroupAccess access(*store_, groups_[i], Use::FORWARD);
  run_part(mb, i, access, &Block::forward);
}

void GPT::backward_input_block(MicroBatch& mb, int i) {
  TIDE_CHECK(mb.training, "backward needs a micro-batch run forward with training = true");
  TIDE_CHECK(mb.stash_slot[i] < 0, "backward_input of block {} ran twice without its W", i);
  const int slot = mb.stash->take();
  mb.stash_slot[i] = slot;
  mb.stash_arena = &mb.stash->slot(slot);
  // The head starts the backward pass (a stage without it gets residual_grad from outside).
  if (has_head() && i == num_blocks() - 1) fill_zero(env_.op, mb.dresidual);
  const TraceSpan span(mb.tracer, "backward", "compute", {{"block", i}, {"mb", mb.index}});
  GroupAccess access(*store_, groups_[i], Use::BACKWARD);
  run_part(mb, i, access, &Block::backward_input);
  mb.stash_arena = nullptr;
}

void GPT::backward_weight_block(MicroBatch& mb, int i, bool mark_grads) {
  TIDE_CHECK(mb.stash_slot[i] >= 0, "backward_weight of block {} needs its backward_input first",
             i);
  const TraceSpan span(mb.tracer, "weight", "compute", {{"block", i}, {"mb", mb.index}});
  // With mark_grads each group's gradients are reported complete as the W lets go of it,
  // inside the span: the gradient reductions this starts are part of W.
  GroupAccess access(*store_, groups_[i], Use::WEIGHT, mark_grads ? mb.index : -1);
  run_part(mb, i, access, &Block::backward_weight);
  mb.stash->give_back(mb.stash_slot[i]);
  mb.stash_slot[i] = -1;
}

GPT::HostBatch GPT::host_batch(MicroBatch& mb) const {
  // The previous copy up must have read the buffers before the host writes them again (on the
  // CPU the event is already done).
  TIDE_CHECK(!mb.loss_pending,
             "the micro-batch's deferred loss still reads its targets; call finish_loss first");
  synchronize(mb.uploaded);
  return {mb.host_tokens.i32(), mb.host_targets.i32()};
}

float GPT::finish_loss(MicroBatch& mb) const {
  if (mb.loss_pending) {
    synchronize(mb.losses_down);
    sum_losses(mb, mb.host_losses.f32());
    mb.loss_pending = false;
  }
  return mb.loss;
}

float GPT::forward(MicroBatch& mb) {
  TIDE_ASSERT(mb.residual.size() == static_cast<size_t>(config_.n_layer) + 1);
  for (int s : mb.stash_slot)
    TIDE_CHECK(s < 0, "a forward cannot start while this micro-batch still waits for a W");
  if (mb.tokens.data != mb.host_tokens.data) {  // a device model: the batch goes up first
    copy(env_.op, mb.tokens, mb.host_tokens);
    copy(env_.op, mb.targets, mb.host_targets);
    mb.uploaded = record_event(env_.op);
  }
  // Drop the previous micro-batch's saved activations (everything after dresidual).
  mb.saved.rewind(mb.saved_mark);
  mb.host_checkpoints.reset();
  for (int i = 0; i < num_blocks(); ++i) forward_block(mb, i);
  return mb.loss;
}

void GPT::backward(MicroBatch& mb, bool mark_grads) {
  for (int i = num_blocks() - 1; i >= 0; --i) {
    backward_input_block(mb, i);
    backward_weight_block(mb, i, mark_grads);
  }
}

}  // namespace tide

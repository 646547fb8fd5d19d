#include "tide/model/block.h"

#include <algorithm>
#include <cstring>

#include "tide/kernels/cuda_table.h"
#include "tide/kernels/mover.h"
#include "tide/model/layout.h"
#include "tide/model/stream_collectives.h"
#include "tide/model/vocab_parallel.h"

namespace tide {

Tensor BlockEnv::zeros(Arena& arena, Shape shape, DType dtype) const {
  const Tensor t = arena.alloc_tensor(shape, dtype);
  fill_zero(op, t);
  return t;
}

// Keyed by global coordinates (see DropoutSpec): the stream names the site and the step, the
// counter the element's global sequence, position and unsharded feature. A DP rank, an
// accumulation micro-batch, a TP or SP shard therefore draws exactly the mask the single-rank
// run draws for the same element, and a recomputation redraws it.
DropoutSpec BlockEnv::dropout(const MicroBatch& mb, int layer, int site, int64_t width,
                              int64_t col0) const {
  DropoutSpec d;
  if (!mb.training || config->dropout <= 0.0f) return d;
  d.p = config->dropout;
  d.seed = mb.seed;
  d.stream = rng_stream_id(mb.step, static_cast<uint64_t>(layer), static_cast<uint64_t>(site));
  d.seq0 = mb.seq0;
  d.pos0 = 0;
  d.seq_stride = mb.T;
  d.width_full = width;
  d.col0 = col0;
  return d;
}

DropoutSpec BlockEnv::seq_dropout(const MicroBatch& mb, int layer, int site, int64_t width) const {
  DropoutSpec d = dropout(mb, layer, site, width);
  if (d.enabled()) d.pos0 = seq_begin(mb.T);  // a disabled spec describes the tensor itself
  return d;
}

ArenaShape arena_shape(const BlockEnv& env) {
  ArenaShape s;
  s.config = env.config;
  s.policy = env.policy;
  s.tp = env.tp_size();
  s.tp_rank = env.tp_rank();
  s.sp = env.sp;
  s.partition_activations = env.partition_activations;
  s.cpu_checkpointing = env.cpu_checkpointing;
  s.act_bytes = dtype_size(env.act);
  return s;
}

// The permutation between (B,T,C) and the rank-major (t,B,T/t,C) of the collectives: row
// (b, r T/t + u) of the whole is row (r, b, u) of the rank-major buffer. `es`: bytes per element.
static void permute_rows(void* dst, const void* src, size_t es, int64_t t, int64_t B, int64_t Ts,
                         int64_t C, bool to_rank_major) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  const size_t n = static_cast<size_t>(Ts * C) * es;
  for (int64_t r = 0; r < t; ++r)
    for (int64_t b = 0; b < B; ++b) {
      const size_t whole = static_cast<size_t>(b * t + r) * n,
                   major = static_cast<size_t>(r * B + b) * n;
      if (to_rank_major)
        std::memcpy(d + major, s + whole, n);
      else
        std::memcpy(d + whole, s + major, n);
    }
}

int64_t BlockEnv::vocab_begin() const {
  return tp_rank() * vocab_rows_per_rank(*config, tp_size());
}

int64_t BlockEnv::vocab_cols() const {
  if (!tp) return config->vocab_size;
  return std::min<int64_t>(vocab_rows_per_rank(*config, tp_size()),
                           config->vocab_size - vocab_begin());
}

Tensor BlockEnv::head_weight(Tensor w) const {
  return tp ? Tensor(w.data, {vocab_cols(), w.dim(1)}, w.dtype, w.device) : w;
}

void BlockEnv::tp_all_reduce(Tensor partial) const {
  if (!tp) return;
  collective_on_stream(op, *tp, partial, [&] { return tp->all_reduce_async(partial); });
}

Tensor BlockEnv::keep_input_slice(MicroBatch& mb, const Tensor& x) const {
  const int64_t n = x.numel() / tp_size();
  Arena& pool = cpu_checkpointing ? mb.host_checkpoints : mb.saved;
  Tensor slice = pool.alloc_tensor({n}, x.dtype);
  const size_t at = static_cast<size_t>(tp_rank() * n) * dtype_size(x.dtype);
  const Tensor part(static_cast<char*>(x.data) + at, {n}, x.dtype, x.device);
  if (slice.device == x.device) {
    copy(op, slice, part);
    return slice;
  }
  // Down on the copy stream, after the ops that wrote x, while the next block runs; the next
  // write of x's buffer (the next block's output) waits for it on the stream.
  wait_stream(copies, op);
  copy(copies, slice, part);
  mb.checkpoint_down = record_event(copies);
  return slice;
}

void BlockEnv::before_boundary_write(const MicroBatch& mb) const {
  if (mb.checkpoint_down) wait_event(op, *mb.checkpoint_down);
}

void BlockEnv::tp_gather_slices(Tensor slice, Tensor whole) const {
  const Tensor flat = whole.view({whole.numel()});
  if (slice.device == whole.device)
    return collective_on_stream(op, *tp, flat, [&] { return tp->all_gather_async(slice, flat); });
  // A host slice (cpu_checkpointing) goes up into its part of `whole` first, on the copy stream
  // after the ops queued so far (they may still use the memory) and after the slice's copy down
  // (the same stream); the gather waits for it on the device. No host wait: what writes the
  // host slice again (the next forward's copy down) is queued on the copy stream after this.
  const int64_t n = slice.numel();
  const Tensor mine(static_cast<char*>(whole.data) + tp_rank() * n * dtype_size(whole.dtype), {n},
                    whole.dtype, whole.device);
  wait_stream(copies, op);
  copy(copies, mine, slice);
  prepare_collective(op, *tp, flat, record_event(copies));
  WorkPtr work = tp->all_gather_async(mine, flat);
  consume_collective(op, *tp, *work, flat);
}

// The rank-major permutation on the context: the CUDA kernel on a GPU
// (kernels/cuda/tensor_parallel.cu, the same bytes moved), else a CPU kernel of the context.
static void permute_rows_on(const OpContext& op, Tensor dst, Tensor src, int64_t t, int64_t B,
                            int64_t Ts, int64_t C, bool to_rank_major) {
  if (op.device.is_cuda()) {
    TIDE_CHECK(op.cuda != nullptr,
               "sequence-parallel row permutation: the context says {} but has no CUDA kernels; "
               "make it with make_op_context",
               op.device.str());
    op.cuda->permute_sequence_rows(op, dst.data, src.data, dtype_size(src.dtype), t, B, Ts, C,
                                   to_rank_major);
    return;
  }
  run_cpu_kernel_on(op, "sequence-parallel row permutation", [=] {
    permute_rows(dst.data, src.data, dtype_size(src.dtype), t, B, Ts, C, to_rank_major);
  });
}

Tensor BlockEnv::to_shard(Tensor full, Arena& out, Arena& scratch) const {
  if (!sp) {
    tp_all_reduce(full);
    return full;
  }
  const int64_t t = tp_size(), B = full.dim(0), T = full.dim(1), C = full.dim(2), Ts = T / t;
  Tensor shard = out.alloc_tensor({B, Ts, C}, full.dtype);
  const size_t mark = scratch.mark();
  Tensor major = scratch.alloc_tensor({t * B * Ts * C}, full.dtype);
  permute_rows_on(op, major, full, t, B, Ts, C, true);
  // (The scratch is rewound with the collective in flight on a device: what reuses it is
  // queued on the stream after the stream's wait for the collective, or is a collective.)
  collective_on_stream(op, *tp, major,
                       [&] { return tp->reduce_scatter_async(major, shard.view({B * Ts * C})); });
  scratch.rewind(mark);
  return shard;
}

Tensor BlockEnv::to_full(Tensor shard, Arena& out, Arena& scratch) const {
  if (!sp) return shard;
  const int64_t t = tp_size(), B = shard.dim(0), Ts = shard.dim(1), C = shard.dim(2);
  Tensor full = out.alloc_tensor({B, Ts * t, C}, shard.dtype);
  const size_t mark = scratch.mark();
  Tensor major = scratch.alloc_tensor({t * B * Ts * C}, shard.dtype);
  collective_on_stream(op, *tp, major,
                       [&] { return tp->all_gather_async(shard.view({B * Ts * C}), major); });
  // (The scratch is rewound with the permutation still queued: what reuses it is queued after
  // it, or a collective, which waits for the stream's work first.)
  permute_rows_on(op, full, major, t, B, Ts, C, false);
  scratch.rewind(mark);
  return full;
}

void BlockEnv::add_sp_partial_grads(Tensor partial, const std::vector<Tensor>& grads) const {
  collective_on_stream(op, *tp, partial, [&] { return tp->all_reduce_async(partial); });
  add_partials(partial, grads);
}

void BlockEnv::add_partials(Tensor partial, const std::vector<Tensor>& grads) const {
  // grad += the summed partial, by the residual op: any dtype of either (a 16-bit gradient is
  // widened, added to in f32 and rounded once, as a single-rank layernorm_backward_weight
  // accumulates it).
  const size_t es = dtype_size(partial.dtype);
  int64_t at = 0;
  for (const Tensor& g : grads) {
    const Tensor p(static_cast<char*>(partial.data) + at * es, g.shape, partial.dtype,
                   partial.device);
    residual_forward(op, g, g, p);
    at += g.numel();
  }
  TIDE_ASSERT(at == partial.numel());
}

void BlockEnv::add_kv_replica_grads(Tensor partial, int64_t q_rows, Tensor grad_w,
                                    Tensor grad_b) const {
  const int64_t rows = grad_w.dim(0), C = grad_w.dim(1);
  TIDE_ASSERT(partial.dtype == DType::F32 &&
              partial.numel() == rows * (C + (grad_b.defined() ? 1 : 0)));
  // The k and v rows: [q_rows, rows) of dW, then of db (not adjacent: two all-reduces).
  float* p = partial.f32();
  const Tensor kv_w(p + q_rows * C, {(rows - q_rows) * C}, DType::F32, partial.device);
  collective_on_stream(op, *kv_group, kv_w, [&] { return kv_group->all_reduce_async(kv_w); });
  if (grad_b.defined()) {
    const Tensor kv_b(p + rows * C + q_rows, {rows - q_rows}, DType::F32, partial.device);
    collective_on_stream(op, *kv_group, kv_b, [&] { return kv_group->all_reduce_async(kv_b); });
  }
  std::vector<Tensor> grads = {grad_w};
  if (grad_b.defined()) grads.push_back(grad_b);
  add_partials(partial, grads);
}

void record_losses(const BlockEnv& env, MicroBatch& mb, Tensor losses) {
  // On a device the losses come down to the host: waited for now, or (defer_loss) by
  // GPT::finish_loss, so that a training step's host waits once, for the gradient norm.
  if (!env.op.device.is_cpu()) {
    copy(env.op, mb.host_losses, losses);
    if (mb.defer_loss) {
      mb.losses_down = record_event(env.op);
      mb.loss_pending = true;
      return;
    }
    synchronize(env.op);
    losses = mb.host_losses;
  }
  sum_losses(mb, losses.f32());
}

void sum_losses(MicroBatch& mb, const float* losses) {
  const int64_t B = mb.B, T = mb.T;
  // Per-sequence sums (in double, in position order) and the mean over the positions with a
  // target (ignored targets give loss 0 and do not count). Validation adds up the per-sequence
  // sums in a fixed order, so its mean does not depend on how sequences were batched.
  mb.seq_loss_sum.assign(B, 0.0);
  mb.seq_targets.assign(B, 0);
  const int32_t* tgt = mb.host_targets.i32();
  double sum = 0.0;
  int64_t counted = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      if (tgt[b * T + t] < 0) continue;
      mb.seq_loss_sum[b] += losses[b * T + t];
      ++mb.seq_targets[b];
    }
    sum += mb.seq_loss_sum[b];
    counted += mb.seq_targets[b];
  }
  mb.loss = counted ? static_cast<float>(sum / counted) : 0.0f;
}

namespace {

// d(mean loss)/d(loss_i) = 1/counted for each position with a target, times the micro-batch's
// weight in the objective.
float position_dloss(const MicroBatch& mb) {
  const int32_t* tgt = mb.host_targets.i32();
  int64_t counted = 0;
  for (int64_t i = 0; i < int64_t{mb.B} * mb.T; ++i) counted += tgt[i] >= 0;
  return counted ? mb.dloss / static_cast<float>(counted) : 0.0f;
}

}  // namespace

std::pair<Tensor, Tensor> head_loss_forward(const BlockEnv& env, MicroBatch& mb, Tensor logits,
                                            Arena& keep) {
  const int64_t B = mb.B, T = mb.T;
  Tensor losses = mb.workspace.alloc_tensor({B, T}, DType::F32);
  Tensor lse_max, lse_sum;
  const bool fused = !env.tp && mb.training && !mb.keep_logits;
  if (env.tp) {
    lse_max = keep.alloc_tensor({B, T}, DType::F32);
    lse_sum = keep.alloc_tensor({B, T}, DType::F32);
    vocab_parallel_crossentropy_forward(env.op, *env.tp, losses, lse_max, lse_sum, logits,
                                        mb.targets, env.vocab_begin(), mb.workspace);
  } else if (fused) {
    // The fused classifier: a training forward knows its backward's dloss, so the losses and
    // d(objective)/d(logits) come from one pass over the logits, written over them in place
    // (the bits of the forward and backward ops); the backward's part is then done.
    crossentropy_forward_backward(env.op, losses, logits, logits, mb.targets, position_dloss(mb));
  } else {
    crossentropy_forward(env.op, losses, logits, mb.targets);
  }
  mb.logits_hold_gradient = fused;
  mb.logits = logits;
  record_losses(env, mb, losses);
  return {lse_max, lse_sum};
}

void head_loss_backward(const BlockEnv& env, const MicroBatch& mb, Tensor logits, Tensor lse_max,
                        Tensor lse_sum) {
  if (mb.logits_hold_gradient) return;  // the fused classifier wrote them in the forward
  const float dloss = position_dloss(mb);
  if (env.tp)
    vocab_parallel_crossentropy_backward(env.op, logits, logits, mb.targets, lse_max, lse_sum,
                                         env.vocab_begin(), dloss);
  else
    crossentropy_backward(env.op, logits, logits, mb.targets, dloss);
}

}  // namespace tide

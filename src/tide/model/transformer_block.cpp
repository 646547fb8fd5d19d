#include <algorithm>

#include "tide/kernels/mover.h"
#include "tide/model/blocks.h"
#include "tide/model/group_access.h"

namespace tide {

// Parameter slots (index into param_ids_).
enum Param { LN1_W, LN1_B, ATTN_W, ATTN_B, PROJ_W, PROJ_B, LN2_W, LN2_B, FC_W, FC_B, FC2_W, FC2_B };

// The groups the ops acquire their parameters in (param_groups.h): every op below is preceded
// by use(its group), in the order part_groups() gives for each part.
enum Group { LN1_ATTN = 0, PROJ = 1, LN2_FC = 2, FC2 = 3 };

// Forward intermediates (index into block_saved), then the B->W gradients appended by
// backward_input.
enum Saved {
  LN1,
  LN1_MEAN,
  LN1_RSTD,  // ln_1(x): (B,Ts,C), (B,Ts), (B,Ts) (Ts = T/t under SP, else T)
  LN1F,      // ln_1(x) whole (B,T,C): all-gathered under SP, else LN1 itself
  QKV,       // (B,T,3C)
  LSE,       // the attention rows' log-sum-exp (B,NH,T), f32 (the probabilities are recomputed)
  ATTY,      // attention output before c_proj: (B,T,C)
  RES2,      // x + attention branch: (B,Ts,C)
  LN2,
  LN2_MEAN,
  LN2_RSTD,  // ln_2(x2), on the sequence shard as LN1
  LN2F,      // ln_2(x2) whole (B,T,C)
  FCH,
  FCH_GELU,  // mlp hidden before / after GELU: (B,T,4C)
  kNumForward,
  DFC2 = kNumForward,  // gradient of the mlp c_proj output (after dropout backward): (B,Ts,C)
  DFC2F,               // DFC2 whole (B,T,C): all-gathered under SP, else DFC2 itself
  DFCH,                // gradient of the mlp hidden before GELU: (B,T,4C)
  DLN2,                // gradient of ln_2's output: (B,Ts,C)
  DPROJ,               // gradient of the attention c_proj output: (B,Ts,C)
  DPROJF,              // DPROJ whole (B,T,C)
  DQKV,                // (B,T,3C)
  DLN1,                // gradient of ln_1's output: (B,Ts,C)
  XSLICE,              // P_a: this rank's 1/t of the flattened block input (F to B)
  XIN,                 // the block input whole (B,Ts,C) in B and W: the residual entry, or
                       // under P_a its slices all-gathered into the stash
  kNumSaved
};

// Dropout sites within a layer.
enum Site { ATTN_PROBS = 0, ATTN_RESID = 1, MLP_RESID = 2 };

TransformerBlock::TransformerBlock(const BlockEnv& env, int layer, std::vector<int> params)
    : env_(env), layer_(layer) {
  TIDE_ASSERT(params.size() == 12);
  param_ids_ = std::move(params);
}

std::vector<Tensor> TransformerBlock::compute_forward(MicroBatch& mb, Tensor x, bool recompute) {
  const GPTConfig& cfg = *env_.config;
  // Under tensor parallelism over t ranks this rank holds NHl = NH/t heads: Cl = C/t of the
  // attention width, and 4Cl of the mlp hidden width.
  const int64_t B = mb.B, T = mb.T, C = cfg.n_embd, NH = cfg.n_head, t = env_.tp_size();
  const int64_t Cl = C / t, NHl = NH / t, Ts = env_.seq_local(T);
  const OpContext& op = env_.op;
  const DType act = env_.act;
  auto p = [&](Param i) { return env_.param(param_ids_[i]); };
  auto use = [&](Group g) { mb.params->use(g); };
  // Where each intermediate goes: kept for backward in mb.saved, or temporary in the
  // workspace (during evaluation, a recomputation, or when the policy drops it).
  // A full recomputation (inside B) puts them in the stash: W reads them later.
  const bool keep_any = mb.training && !recompute && env_.policy != ActivationPolicy::FULL;
  const bool keep_att = keep_any && env_.policy == ActivationPolicy::SAVE_ALL;
  Arena& main = keep_any ? mb.saved : (recompute ? *mb.stash_arena : mb.workspace);
  Arena& attn = keep_att ? mb.saved : mb.workspace;
  // Under SP the all-gathered layernorm outputs are not kept from F to B (Korthikanti et al.
  // keep only the shards): B gathers them again, into the stash for W.
  Arena& whole = (env_.sp && keep_any) ? mb.workspace : main;

  std::vector<Tensor> s(kNumSaved);  // x: the block input (B,Ts,C)
  s[LN1] = main.alloc_tensor({B, Ts, C}, act);
  s[LN1_MEAN] = main.alloc_tensor({B, Ts}, DType::F32);
  s[LN1_RSTD] = main.alloc_tensor({B, Ts}, DType::F32);
  use(LN1_ATTN);
  layernorm_forward(op, s[LN1], s[LN1_MEAN], s[LN1_RSTD], x, p(LN1_W), p(LN1_B));
  s[LN1F] = env_.to_full(s[LN1], whole, mb.workspace);  // (B,T,C)
  s[QKV] = main.alloc_tensor({B, T, 3 * Cl}, act);
  matmul_forward(op, s[QKV], s[LN1F], p(ATTN_W), p(ATTN_B));
  s[LSE] = attn.alloc_tensor({B, NHl, T}, DType::F32);
  s[ATTY] = main.alloc_tensor({B, T, Cl}, act);
  attention_forward(op, s[ATTY], s[LSE], s[QKV], static_cast<int>(NHl), attn_dropout(mb));
  use(PROJ);
  Tensor proj = row_parallel_forward(mb, s[ATTY], p(PROJ_W), p(PROJ_B));  // (B,Ts,C)
  dropout_forward(op, proj, proj, env_.seq_dropout(mb, layer_, ATTN_RESID, C));
  s[RES2] = main.alloc_tensor({B, Ts, C}, act);
  s[LN2] = main.alloc_tensor({B, Ts, C}, act);
  s[LN2_MEAN] = main.alloc_tensor({B, Ts}, DType::F32);
  s[LN2_RSTD] = main.alloc_tensor({B, Ts}, DType::F32);
  use(LN2_FC);
  residual_layernorm_forward(op, s[RES2], s[LN2], s[LN2_MEAN], s[LN2_RSTD], x, proj, p(LN2_W),
                             p(LN2_B));
  s[LN2F] = env_.to_full(s[LN2], whole, mb.workspace);  // (B,T,C)
  s[FCH] = main.alloc_tensor({B, T, 4 * Cl}, act);
  matmul_forward(op, s[FCH], s[LN2F], p(FC_W), p(FC_B));
  s[FCH_GELU] = main.alloc_tensor({B, T, 4 * Cl}, act);
  gelu_forward(op, s[FCH_GELU], s[FCH]);
  if (!recompute) {  // a recomputation must not touch the block output (already consumed)
    use(FC2);
    Tensor fc2 = row_parallel_forward(mb, s[FCH_GELU], p(FC2_W), p(FC2_B));  // (B,Ts,C)
    dropout_forward(op, fc2, fc2, env_.seq_dropout(mb, layer_, MLP_RESID, C));
    env_.before_boundary_write(mb);
    residual_forward(op, mb.residual[layer_ + 1], s[RES2], fc2);
  }
  return s;
}

void TransformerBlock::forward(MicroBatch& mb) {
  std::vector<Tensor> s = compute_forward(mb, mb.residual[layer_], /*recompute=*/false);
  if (!mb.training) return;
  // ZeRO-R P_a: keep a slice; the input's buffer takes the next block's output (ping-pong).
  if (env_.partition_activations) s[XSLICE] = env_.keep_input_slice(mb, mb.residual[layer_]);
  mb.block_saved[layer_ + 1] = std::move(s);
}

// Row-parallel linear (t > 1): the rank's partial inp_r @ W_r^T (B,T,C), the bias added on
// rank 0 only, summed over the ranks (g): all-reduced, or under SP reduce-scattered into this
// rank's sequence shard (B,T/t,C). Without tensor parallelism the plain linear. The result
// is in the workspace.
Tensor TransformerBlock::row_parallel_forward(MicroBatch& mb, Tensor inp, Tensor w,
                                              Tensor bias) const {
  Tensor out = mb.workspace.alloc_tensor({inp.dim(0), inp.dim(1), w.dim(0)}, env_.act);
  if (!env_.tp) {
    matmul_forward(env_.op, out, inp, w, bias);
    return out;
  }
  matmul_forward(env_.op, out, inp, w, env_.tp_rank() == 0 ? bias : Tensor());
  return env_.to_shard(out, mb.workspace, mb.workspace);
}

// The attention probabilities' dropout: this rank's heads [r NH/t, (r+1) NH/t) of NH.
DropoutSpec TransformerBlock::attn_dropout(const MicroBatch& mb) const {
  const int64_t NH = env_.config->n_head, NHl = NH / env_.tp_size();
  return env_.dropout(mb, layer_, ATTN_PROBS, NH, env_.tp_rank() * NHl);
}

void TransformerBlock::backward_input(MicroBatch& mb) {
  const GPTConfig& cfg = *env_.config;
  const int64_t B = mb.B, T = mb.T, C = cfg.n_embd, t = env_.tp_size();
  const int64_t Cl = C / t, NHl = cfg.n_head / t, Ts = env_.seq_local(T);
  const OpContext& op = env_.op;
  auto p = [&](Param i) { return env_.param(param_ids_[i]); };
  auto use = [&](Group g) { mb.params->use(g); };
  std::vector<Tensor>& s = mb.block_saved[layer_ + 1];
  Arena& w = *mb.stash_arena;
  Arena& tmp = mb.workspace;
  const DType act = env_.act;

  // 0. P_a: the block input whole again, all-gathered from the ranks' slices into the stash
  //    (W reads it too); bitwise the forward's input.
  Tensor x = mb.residual[layer_];
  if (env_.partition_activations) {
    x = w.alloc_tensor({B, Ts, C}, s[XSLICE].dtype);
    env_.tp_gather_slices(s[XSLICE], x);
  }
  // 1. Bring back what the activation policy did not keep (same dropout masks: same RNG keys).
  if (env_.policy == ActivationPolicy::FULL) {
    s = compute_forward(mb, x, /*recompute=*/true);
  } else if (env_.policy == ActivationPolicy::SELECTIVE) {
    s[LSE] = mb.workspace.alloc_tensor({B, NHl, T}, DType::F32);
    Tensor atty = mb.workspace.alloc_tensor({B, T, Cl}, env_.act);  // equals s[ATTY]; discarded
    attention_forward(op, atty, s[LSE], s[QKV], static_cast<int>(NHl), attn_dropout(mb));
  }

  s[XIN] = x;
  if (env_.sp && env_.policy != ActivationPolicy::FULL) {  // F kept only the shards
    s[LN1F] = env_.to_full(s[LN1], w, tmp);
    s[LN2F] = env_.to_full(s[LN2], w, tmp);
  }

  // 2. Walk the block backwards. mb.dresidual holds dL/d(block output) on entry and
  //    dL/d(block input) on exit (the residual connections pass it through unchanged).
  //    What W needs goes to this (micro-batch, block)'s stash, temporaries to the workspace.
  Tensor dy = mb.dresidual;  // (B,Ts,C)
  // Under SP the gradients of the row-parallel outputs are all-gathered (the conjugate of the
  // forward's reduce-scatter) and the column-parallel inputs' partial gradients
  // reduce-scattered; under plain TP the former are whole already and the latter all-reduced.
  // MLP branch: y = x2 + dropout(fc2(gelu(fc(ln_2(x2)))))
  // dropout_backward into zeros, as one pass: dropout_forward applies the same mask (the
  // spec's counters) and writes instead of accumulating.
  s[DFC2] = w.alloc_tensor({B, Ts, C}, act);
  dropout_forward(op, s[DFC2], dy, env_.seq_dropout(mb, layer_, MLP_RESID, C));
  s[DFC2F] = env_.to_full(s[DFC2], w, tmp);  // (B,T,C)
  Tensor dgelu = env_.zeros(tmp, {B, T, 4 * Cl});
  use(FC2);
  matmul_backward_input(op, dgelu, s[DFC2F], p(FC2_W));
  s[DFCH] = env_.zeros(w, {B, T, 4 * Cl});
  gelu_backward(op, s[DFCH], dgelu, s[FCH]);
  Tensor dln2 = env_.sp ? env_.zeros(tmp, {B, T, C}) : env_.zeros(w, {B, T, C});
  use(LN2_FC);
  matmul_backward_input(op, dln2, s[DFCH], p(FC_W));
  s[DLN2] = env_.to_shard(dln2, w, tmp);  // f's backward: the ranks' partial d(ln_2 output)
  layernorm_backward_input(op, dy, s[DLN2], s[RES2], p(LN2_W), s[LN2_MEAN], s[LN2_RSTD]);
  // dy now holds dL/dx2. Attention branch: x2 = x + dropout(proj(attention(ln_1(x))))
  s[DPROJ] = w.alloc_tensor({B, Ts, C}, act);
  dropout_forward(op, s[DPROJ], dy, env_.seq_dropout(mb, layer_, ATTN_RESID, C));  // as DFC2
  s[DPROJF] = env_.to_full(s[DPROJ], w, tmp);
  Tensor datty = env_.zeros(tmp, {B, T, Cl});
  use(PROJ);
  matmul_backward_input(op, datty, s[DPROJF], p(PROJ_W));
  s[DQKV] = env_.zeros(w, {B, T, 3 * Cl});
  attention_backward(op, s[DQKV], datty, s[QKV], s[LSE], static_cast<int>(NHl), attn_dropout(mb));
  Tensor dln1 = env_.sp ? env_.zeros(tmp, {B, T, C}) : env_.zeros(w, {B, T, C});
  use(LN1_ATTN);
  matmul_backward_input(op, dln1, s[DQKV], p(ATTN_W));
  s[DLN1] = env_.to_shard(dln1, w, tmp);  // f's backward: the ranks' partial d(ln_1 output)
  layernorm_backward_input(op, dy, s[DLN1], s[XIN], p(LN1_W), s[LN1_MEAN], s[LN1_RSTD]);
}

void TransformerBlock::backward_weight(MicroBatch& mb) {
  const OpContext& op = env_.op;
  auto g = [&](Param i) { return env_.grad(param_ids_[i]); };
  auto use = [&](Group g) { mb.params->use(g); };
  const std::vector<Tensor>& s = mb.block_saved[layer_ + 1];
  // Under SP the layernorms see only this rank's positions: their gradients are partial sums,
  // computed into `part` and all-reduced while their group is held (the row-parallel biases'
  // come from the whole DFC2F / DPROJF, complete on every rank).
  const int64_t C = env_.config->n_embd;
  const Tensor part = env_.sp ? env_.zeros(mb.workspace, {4 * C}, DType::F32) : Tensor();
  auto ln_grad = [&](Param i, int k) {
    return env_.sp ? Tensor(part.f32() + k * C, {C}, DType::F32, part.device) : g(i);
  };
  auto sp_sum = [&](int k, Param w, Param b) {  // the partial sums k, k+1 into w's and b's grads
    if (env_.sp)
      env_.add_sp_partial_grads(Tensor(part.f32() + k * C, {2 * C}, DType::F32, part.device),
                                {g(w), g(b)});
  };
  use(FC2);
  matmul_backward_weight(op, g(FC2_W), g(FC2_B), s[DFC2F], s[FCH_GELU]);
  use(LN2_FC);
  matmul_backward_weight(op, g(FC_W), g(FC_B), s[DFCH], s[LN2F]);
  layernorm_backward_weight(op, ln_grad(LN2_W, 0), ln_grad(LN2_B, 1), s[DLN2], s[RES2], s[LN2_MEAN],
                            s[LN2_RSTD]);
  sp_sum(0, LN2_W, LN2_B);
  use(PROJ);
  matmul_backward_weight(op, g(PROJ_W), g(PROJ_B), s[DPROJF], s[ATTY]);
  use(LN1_ATTN);
  matmul_backward_weight(op, g(ATTN_W), g(ATTN_B), s[DQKV], s[LN1F]);
  layernorm_backward_weight(op, ln_grad(LN1_W, 2), ln_grad(LN1_B, 3), s[DLN1], s[XIN], s[LN1_MEAN],
                            s[LN1_RSTD]);
  sp_sum(2, LN1_W, LN1_B);
}

size_t TransformerBlock::saved_bytes(int B, int T) const {
  return transformer_saved_bytes(arena_shape(env_), B, T);
}

size_t TransformerBlock::workspace_bytes(int B, int T) const {
  return transformer_workspace_bytes(arena_shape(env_), B, T);
}

size_t TransformerBlock::stash_bytes(int B, int T) const {
  return transformer_stash_bytes(arena_shape(env_), B, T);
}

}  // namespace tide

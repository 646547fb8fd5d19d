#include <algorithm>

#include "tide/model/blocks.h"

namespace tide {

// Parameter slots (index into param_ids_).
enum Param { LN1_W, LN1_B, ATTN_W, ATTN_B, PROJ_W, PROJ_B, LN2_W, LN2_B, FC_W, FC_B, FC2_W, FC2_B };

// Forward intermediates (index into block_saved), then the B->W gradients appended by
// backward_input.
enum Saved {
  LN1,
  LN1_MEAN,
  LN1_RSTD,  // ln_1(x): (B,T,C), (B,T), (B,T)
  QKV,       // (B,T,3C)
  PREATT,
  ATT,   // softmax probabilities before / after dropout: (B,NH,T,T)
  ATTY,  // attention output before c_proj: (B,T,C)
  RES2,  // x + attention branch: (B,T,C)
  LN2,
  LN2_MEAN,
  LN2_RSTD,  // ln_2(x2)
  FCH,
  FCH_GELU,  // mlp hidden before / after GELU: (B,T,4C)
  kNumForward,
  DFC2 = kNumForward,  // gradient of the mlp c_proj output (after dropout backward): (B,T,C)
  DFCH,                // gradient of the mlp hidden before GELU: (B,T,4C)
  DLN2,                // gradient of ln_2's output: (B,T,C)
  DPROJ,               // gradient of the attention c_proj output: (B,T,C)
  DQKV,                // (B,T,3C)
  DLN1,                // gradient of ln_1's output: (B,T,C)
  kNumSaved
};

// Dropout sites within a layer.
enum Site { ATTN_PROBS = 0, ATTN_RESID = 1, MLP_RESID = 2 };

TransformerBlock::TransformerBlock(const BlockEnv& env, int layer, std::vector<int> params)
    : env_(env), layer_(layer) {
  TIDE_ASSERT(params.size() == 12);
  param_ids_ = std::move(params);
}

std::vector<Tensor> TransformerBlock::compute_forward(MicroBatch& mb, bool recompute) {
  const GPTConfig& cfg = *env_.config;
  // Under tensor parallelism over t ranks this rank holds NHl = NH/t heads: Cl = C/t of the
  // attention width, and 4Cl of the mlp hidden width.
  const int64_t B = mb.B, T = mb.T, C = cfg.n_embd, NH = cfg.n_head, t = env_.tp_size();
  const int64_t Cl = C / t, NHl = NH / t;
  const OpContext& op = env_.op;
  auto p = [&](Param i) { return env_.param(param_ids_[i]); };
  // Where each intermediate goes: kept for backward in mb.saved, or temporary in the
  // workspace (during evaluation, a recomputation, or when the policy drops it).
  // A full recomputation (inside B) puts them in the stash: W reads them later.
  const bool keep_any = mb.training && !recompute && env_.policy != ActivationPolicy::FULL;
  const bool keep_att = keep_any && env_.policy == ActivationPolicy::SAVE_ALL;
  Arena& main = keep_any ? mb.saved : (recompute ? *mb.stash_arena : mb.workspace);
  Arena& attn = keep_att ? mb.saved : mb.workspace;

  std::vector<Tensor> s(kNumSaved);
  Tensor x = mb.residual[layer_];  // (B,T,C)
  s[LN1] = main.alloc_tensor({B, T, C});
  s[LN1_MEAN] = main.alloc_tensor({B, T});
  s[LN1_RSTD] = main.alloc_tensor({B, T});
  layernorm_forward(op, s[LN1], s[LN1_MEAN], s[LN1_RSTD], x, p(LN1_W), p(LN1_B));
  s[QKV] = main.alloc_tensor({B, T, 3 * Cl});
  matmul_forward(op, s[QKV], s[LN1], p(ATTN_W), p(ATTN_B));
  s[PREATT] = attn.alloc_tensor({B, NHl, T, T});
  s[ATT] = attn.alloc_tensor({B, NHl, T, T});
  s[ATTY] = main.alloc_tensor({B, T, Cl});
  attention_forward(op, s[ATTY], s[PREATT], s[ATT], s[QKV], static_cast<int>(NHl),
                    attn_dropout(mb));
  Tensor proj = mb.workspace.alloc_tensor({B, T, C});
  row_parallel_forward(proj, s[ATTY], p(PROJ_W), p(PROJ_B));
  dropout_forward(op, proj, proj, env_.dropout(mb, layer_, ATTN_RESID, C));
  s[RES2] = main.alloc_tensor({B, T, C});
  residual_forward(op, s[RES2], x, proj);
  s[LN2] = main.alloc_tensor({B, T, C});
  s[LN2_MEAN] = main.alloc_tensor({B, T});
  s[LN2_RSTD] = main.alloc_tensor({B, T});
  layernorm_forward(op, s[LN2], s[LN2_MEAN], s[LN2_RSTD], s[RES2], p(LN2_W), p(LN2_B));
  s[FCH] = main.alloc_tensor({B, T, 4 * Cl});
  matmul_forward(op, s[FCH], s[LN2], p(FC_W), p(FC_B));
  s[FCH_GELU] = main.alloc_tensor({B, T, 4 * Cl});
  gelu_forward(op, s[FCH_GELU], s[FCH]);
  if (!recompute) {  // a recomputation must not touch the block output (already consumed)
    Tensor fc2 = mb.workspace.alloc_tensor({B, T, C});
    row_parallel_forward(fc2, s[FCH_GELU], p(FC2_W), p(FC2_B));
    dropout_forward(op, fc2, fc2, env_.dropout(mb, layer_, MLP_RESID, C));
    residual_forward(op, mb.residual[layer_ + 1], s[RES2], fc2);
  }
  return s;
}

void TransformerBlock::forward(MicroBatch& mb) {
  std::vector<Tensor> s = compute_forward(mb, /*recompute=*/false);
  if (mb.training) mb.block_saved[layer_ + 1] = std::move(s);
}

// Row-parallel linear (t > 1): the rank's partial inp_r @ W_r^T, the bias added on rank 0
// only, summed over the ranks (g). Without tensor parallelism the plain linear.
void TransformerBlock::row_parallel_forward(Tensor out, Tensor inp, Tensor w, Tensor bias) const {
  if (!env_.tp) {
    matmul_forward(env_.op, out, inp, w, bias);
    return;
  }
  matmul_forward(env_.op, out, inp, w, env_.tp_rank() == 0 ? bias : Tensor());
  env_.tp_all_reduce(out);
}

// The attention probabilities' dropout: this rank's heads [r NH/t, (r+1) NH/t) of NH.
DropoutSpec TransformerBlock::attn_dropout(const MicroBatch& mb) const {
  const int64_t NH = env_.config->n_head, NHl = NH / env_.tp_size();
  return env_.dropout(mb, layer_, ATTN_PROBS, NH, env_.tp_rank() * NHl);
}

void TransformerBlock::backward_input(MicroBatch& mb) {
  const GPTConfig& cfg = *env_.config;
  const int64_t B = mb.B, T = mb.T, C = cfg.n_embd, t = env_.tp_size();
  const int64_t Cl = C / t, NHl = cfg.n_head / t;
  const OpContext& op = env_.op;
  auto p = [&](Param i) { return env_.param(param_ids_[i]); };
  std::vector<Tensor>& s = mb.block_saved[layer_ + 1];

  // 1. Bring back what the activation policy did not keep (same dropout masks: same RNG keys).
  if (env_.policy == ActivationPolicy::FULL) {
    s = compute_forward(mb, /*recompute=*/true);
  } else if (env_.policy == ActivationPolicy::SELECTIVE) {
    s[PREATT] = mb.workspace.alloc_tensor({B, NHl, T, T});
    s[ATT] = mb.workspace.alloc_tensor({B, NHl, T, T});
    Tensor atty = mb.workspace.alloc_tensor({B, T, Cl});  // equals s[ATTY]; discarded
    attention_forward(op, atty, s[PREATT], s[ATT], s[QKV], static_cast<int>(NHl), attn_dropout(mb));
  }

  // 2. Walk the block backwards. mb.dresidual holds dL/d(block output) on entry and
  //    dL/d(block input) on exit (the residual connections pass it through unchanged).
  //    What W needs goes to this (micro-batch, block)'s stash, temporaries to the workspace.
  Arena& w = *mb.stash_arena;
  Arena& tmp = mb.workspace;
  Tensor dy = mb.dresidual;  // (B,T,C)
  // MLP branch: y = x2 + dropout(fc2(gelu(fc(ln_2(x2)))))
  // dropout_backward into zeros, as one pass: dropout_forward applies the same mask (the
  // spec's counters) and writes instead of accumulating.
  s[DFC2] = w.alloc_tensor({B, T, C});
  dropout_forward(op, s[DFC2], dy, env_.dropout(mb, layer_, MLP_RESID, C));
  Tensor dgelu = tmp.zeros({B, T, 4 * Cl});
  matmul_backward_input(op, dgelu, s[DFC2], p(FC2_W));
  s[DFCH] = w.zeros({B, T, 4 * Cl});
  gelu_backward(op, s[DFCH], dgelu, s[FCH]);
  s[DLN2] = w.zeros({B, T, C});
  matmul_backward_input(op, s[DLN2], s[DFCH], p(FC_W));
  env_.tp_all_reduce(s[DLN2]);  // f's backward: the ranks' partial d(ln_2 output)
  layernorm_backward_input(op, dy, s[DLN2], s[RES2], p(LN2_W), s[LN2_MEAN], s[LN2_RSTD]);
  // dy now holds dL/dx2. Attention branch: x2 = x + dropout(proj(attention(ln_1(x))))
  s[DPROJ] = w.alloc_tensor({B, T, C});
  dropout_forward(op, s[DPROJ], dy, env_.dropout(mb, layer_, ATTN_RESID, C));  // as DFC2
  Tensor datty = tmp.zeros({B, T, Cl});
  matmul_backward_input(op, datty, s[DPROJ], p(PROJ_W));
  s[DQKV] = w.zeros({B, T, 3 * Cl});
  attention_backward(op, s[DQKV], datty, s[QKV], s[PREATT], s[ATT], static_cast<int>(NHl),
                     attn_dropout(mb));
  s[DLN1] = w.zeros({B, T, C});
  matmul_backward_input(op, s[DLN1], s[DQKV], p(ATTN_W));
  env_.tp_all_reduce(s[DLN1]);  // f's backward: the ranks' partial d(ln_1 output)
  layernorm_backward_input(op, dy, s[DLN1], mb.residual[layer_], p(LN1_W), s[LN1_MEAN],
                           s[LN1_RSTD]);
}

void TransformerBlock::backward_weight(MicroBatch& mb) {
  const OpContext& op = env_.op;
  auto g = [&](Param i) { return env_.grad(param_ids_[i]); };
  const std::vector<Tensor>& s = mb.block_saved[layer_ + 1];
  matmul_backward_weight(op, g(FC2_W), g(FC2_B), s[DFC2], s[FCH_GELU]);
  matmul_backward_weight(op, g(FC_W), g(FC_B), s[DFCH], s[LN2]);
  layernorm_backward_weight(op, g(LN2_W), g(LN2_B), s[DLN2], s[RES2], s[LN2_MEAN], s[LN2_RSTD]);
  matmul_backward_weight(op, g(PROJ_W), g(PROJ_B), s[DPROJ], s[ATTY]);
  matmul_backward_weight(op, g(ATTN_W), g(ATTN_B), s[DQKV], s[LN1]);
  layernorm_backward_weight(op, g(LN1_W), g(LN1_B), s[DLN1], mb.residual[layer_], s[LN1_MEAN],
                            s[LN1_RSTD]);
}

// Sizes, per the allocations above, with Cl = C/t, NHl = NH/t over t tensor-parallel ranks:
// LN1, RES2, LN2 (B,T,C); ATTY (B,T,Cl); four (B,T) statistics; QKV (B,T,3Cl); FCH,
// FCH_GELU (B,T,4Cl).
static size_t main_bytes(int64_t N, int64_t C, int64_t t = 1) {
  const int64_t Cl = C / t;
  return 3 * f32_bytes(N * C) + f32_bytes(N * Cl) + 4 * f32_bytes(N) + f32_bytes(N * 3 * Cl) +
         2 * f32_bytes(N * 4 * Cl);
}
static size_t att_bytes(int64_t B, int64_t T, int64_t NHl) {
  return 2 * f32_bytes(B * NHl * T * T);
}

size_t TransformerBlock::saved_bytes(int B, int T) const {
  const int64_t N = int64_t{B} * T, C = env_.config->n_embd, t = env_.tp_size();
  const int64_t NHl = env_.config->n_head / t;
  switch (env_.policy) {
    case ActivationPolicy::SAVE_ALL:
      return main_bytes(N, C, t) + att_bytes(B, T, NHl);
    case ActivationPolicy::SELECTIVE:
      return main_bytes(N, C, t);
    case ActivationPolicy::FULL:
      return 0;
  }
  return 0;
}

// What B leaves for W: DFC2, DLN2, DPROJ, DLN1 (B,T,C); DFCH (B,T,4Cl); DQKV (B,T,3Cl).
static size_t grad_stash_bytes(int64_t N, int64_t C, int64_t t) {
  const int64_t Cl = C / t;
  return 4 * f32_bytes(N * C) + f32_bytes(N * 4 * Cl) + f32_bytes(N * 3 * Cl);
}

size_t TransformerBlock::workspace_bytes(int B, int T) const {
  const int64_t N = int64_t{B} * T, C = env_.config->n_embd, t = env_.tp_size();
  const int64_t NHl = env_.config->n_head / t;
  // Worst part: evaluation keeps everything temporary (main + attention + proj, fc2); B needs
  // the recomputed attention matrices, their output or proj, dgelu (B,T,4Cl) and datty. (With
  // t = 1 the bound of the single-rank model: 2 (B,T,C) + (B,T,4C).)
  const size_t eval = main_bytes(N, C, t) + att_bytes(B, T, NHl) + 2 * f32_bytes(N * C);
  const size_t bwd = att_bytes(B, T, NHl) + 2 * f32_bytes(N * C) + f32_bytes(N * 4 * C / t);
  return std::max(eval, bwd);
}

size_t TransformerBlock::stash_bytes(int B, int T) const {
  const int64_t N = int64_t{B} * T, C = env_.config->n_embd, t = env_.tp_size();
  // A full recomputation also leaves the block's intermediates for W.
  const size_t recomputed = env_.policy == ActivationPolicy::FULL ? main_bytes(N, C, t) : 0;
  return grad_stash_bytes(N, C, t) + recomputed;
}

}  // namespace tide

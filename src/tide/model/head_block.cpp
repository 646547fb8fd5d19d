#include <algorithm>

#include "tide/kernels/mover.h"
#include "tide/model/blocks.h"
#include "tide/model/layout.h"
#include "tide/model/vocab_parallel.h"

namespace tide {

// Saved tensors of the head, in block_saved order.
// LSE_MAX, LSE_SUM: the vocabulary-parallel cross-entropy's row maxima and sums of exp(B,T).
// Under SP, LNF / LNF_MEAN / LNF_RSTD / DLNF are on this rank's sequence shard (B,T/t,..) and
// LNF_FULL is ln_f's output all-gathered (B,T,C) (otherwise LNF itself).
enum HeadSaved { LNF, LNF_MEAN, LNF_RSTD, LOGITS, DLNF, LSE_MAX, LSE_SUM, LNF_FULL, kHeadSaved };

HeadBlock::HeadBlock(const BlockEnv& env, int wte, int lnf_w, int lnf_b)
    : env_(env), wte_(wte), lnf_w_(lnf_w), lnf_b_(lnf_b) {
  param_ids_ = {lnf_w, lnf_b, wte};
}

void HeadBlock::forward(MicroBatch& mb) {
  const GPTConfig& cfg = *env_.config;
  const int64_t B = mb.B, T = mb.T, C = cfg.n_embd, V = env_.vocab_cols();
  // In training the logits are kept (backward turns them into dlogits in place); in
  // evaluation everything is temporary.
  Arena& keep = (mb.training || mb.keep_logits) ? mb.saved : mb.workspace;
  const int64_t Ts = env_.seq_local(T);
  Tensor x = mb.residual[cfg.n_layer];  // (B,Ts,C)
  Tensor lnf = keep.alloc_tensor({B, Ts, C}, env_.act);
  Tensor mean = keep.alloc_tensor({B, Ts}, DType::F32),
         rstd = keep.alloc_tensor({B, Ts}, DType::F32);
  layernorm_forward(env_.op, lnf, mean, rstd, x, env_.param(lnf_w_), env_.param(lnf_b_));
  Tensor lnf_full = env_.to_full(lnf, keep, mb.workspace);  // (B,T,C)
  // (B,T,V), (B,T,V/t) under tensor parallelism. f32 in every precision: the cross-entropy and
  // its in-place gradient run in f32 (as Megatron's and Hugging Face's .float() before the loss).
  Tensor logits = keep.alloc_tensor({B, T, V}, DType::F32);
  matmul_forward(env_.op, logits, lnf_full, env_.head_weight(env_.param(wte_)),
                 Tensor());  // tied LM head
  const auto [lse_max, lse_sum] = head_loss_forward(env_, mb, logits, keep);
  if (mb.training)
    mb.block_saved[cfg.n_layer + 1] = {lnf,      mean,    rstd,    logits,
                                       Tensor(), lse_max, lse_sum, lnf_full};
}

void HeadBlock::backward_input(MicroBatch& mb) {
  const GPTConfig& cfg = *env_.config;
  std::vector<Tensor>& s = mb.block_saved[cfg.n_layer + 1];
  Tensor dlogits = s[LOGITS];  // (B,T,V), overwritten in place
  head_loss_backward(env_, mb, dlogits, s[LSE_MAX], s[LSE_SUM]);
  // (B,T,C), for W: the ranks' partial d(ln_f output) summed (f's backward); under SP
  // reduce-scattered to this rank's shard (B,T/t,C).
  Tensor dlnf = env_.zeros(env_.sp ? mb.workspace : *mb.stash_arena, s[LNF_FULL].shape);
  matmul_backward_input(env_.op, dlnf, dlogits, env_.head_weight(env_.param(wte_)));
  s[DLNF] = env_.to_shard(dlnf, *mb.stash_arena, mb.workspace);
  // The head starts the backward pass: dresidual = d(loss)/d(residual[L]).
  layernorm_backward_input(env_.op, mb.dresidual, s[DLNF], mb.residual[cfg.n_layer],
                           env_.param(lnf_w_), s[LNF_MEAN], s[LNF_RSTD]);
}

void HeadBlock::backward_weight(MicroBatch& mb) {
  const GPTConfig& cfg = *env_.config;
  const std::vector<Tensor>& s = mb.block_saved[cfg.n_layer + 1];
  matmul_backward_weight(env_.op, env_.head_weight(env_.grad(wte_)), Tensor(), s[LOGITS],
                         s[LNF_FULL]);
  if (!env_.sp) {
    layernorm_backward_weight(env_.op, env_.grad(lnf_w_), env_.grad(lnf_b_), s[DLNF],
                              mb.residual[cfg.n_layer], s[LNF_MEAN], s[LNF_RSTD]);
    return;
  }
  // Under SP ln_f saw only this rank's positions: partial gradients, all-reduced.
  const int64_t C = cfg.n_embd;
  Tensor part = env_.zeros(mb.workspace, {2 * C}, DType::F32);
  layernorm_backward_weight(env_.op, Tensor(part.f32(), {C}, DType::F32, part.device),
                            Tensor(part.f32() + C, {C}, DType::F32, part.device), s[DLNF],
                            mb.residual[cfg.n_layer], s[LNF_MEAN], s[LNF_RSTD]);
  env_.add_sp_partial_grads(part, {env_.grad(lnf_w_), env_.grad(lnf_b_)});
}

size_t HeadBlock::saved_bytes(int B, int T) const {
  return head_saved_bytes(arena_shape(env_), B, T);
}

size_t HeadBlock::stash_bytes(int B, int T) const {
  return head_stash_bytes(arena_shape(env_), B, T);
}

size_t HeadBlock::workspace_bytes(int B, int T) const {
  return head_workspace_bytes(arena_shape(env_), B, T);
}

}  // namespace tide

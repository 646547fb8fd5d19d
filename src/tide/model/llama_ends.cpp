// The Llama family's embedding and head blocks (llama_blocks.h): a token embedding without
// positions, and the final RMSNorm + LM head (tied to wte, or its own output.weight) + loss.
// Under tensor parallelism both are vocabulary-parallel, as GPT-2's (embedding_block.cpp,
// head_block.cpp).

#include <algorithm>

#include "tide/kernels/mover.h"
#include "tide/model/layout.h"
#include "tide/model/llama_blocks.h"
#include "tide/model/vocab_parallel.h"

namespace tide {

LlamaEmbeddingBlock::LlamaEmbeddingBlock(const BlockEnv& env, int wte) : env_(env), wte_(wte) {
  param_ids_ = {wte};
}

// One rank: the embedding op adds a position table; a zero one (T,C) in the workspace leaves
// wte[tokens] exactly (x + 0 = x), and W gives the op a scratch table for the position gradient
// it drops. (An embedding op without positions in kernels/ would save the (T,C) pass.)
// Tensor parallelism: this rank's rows of wte, zeros for the others' tokens; the all-reduce of
// the partial embeddings completes every row exactly (one term is not zero; under SP a
// reduce-scatter to this rank's positions).
void LlamaEmbeddingBlock::forward(MicroBatch& mb) {
  Tensor x = mb.residual[0];  // (B,T,C); (B,T/t,C) under SP
  if (env_.tp) {
    Tensor partial = x;
    if (env_.sp) partial = mb.workspace.alloc_tensor({mb.B, mb.T, x.dim(2)}, x.dtype);
    vocab_parallel_embedding_forward(env_.op, partial, mb.tokens, env_.param(wte_),
                                     env_.vocab_begin(), env_.config->vocab_size);
    const Tensor summed = env_.to_shard(partial, mb.workspace, mb.workspace);
    if (env_.sp) copy(env_.op, x, summed);
    return;
  }
  const Tensor no_positions = env_.zeros(mb.workspace, {mb.T, x.dim(2)});  // (T,C)
  embedding_forward(env_.op, x, mb.tokens, env_.param(wte_), no_positions);
}

// Under SP the shard's gradient is all-gathered: W needs every position's.
void LlamaEmbeddingBlock::backward_input(MicroBatch& mb) {
  Arena& out = env_.sp ? mb.workspace : *mb.stash_arena;
  Tensor demb = out.alloc_tensor(mb.dresidual.shape, mb.dresidual.dtype);  // (B,T,C)
  copy(env_.op, demb, mb.dresidual);
  mb.block_saved[0] = {env_.to_full(demb, *mb.stash_arena, mb.workspace)};
}

// Under tensor parallelism the gradient is the same on every rank (the all-reduce's backward
// is the identity): each rank scatters its own tokens' rows.
void LlamaEmbeddingBlock::backward_weight(MicroBatch& mb) {
  const Tensor dwte = env_.grad(wte_);
  if (env_.tp) {
    vocab_parallel_embedding_backward(env_.op, dwte, mb.block_saved[0][0], mb.tokens,
                                      env_.vocab_begin());
    return;
  }
  const Tensor dpositions = env_.zeros(mb.workspace, {mb.T, dwte.dim(1)}, dwte.dtype);  // dropped
  embedding_backward(env_.op, dwte, dpositions, mb.block_saved[0][0], mb.tokens);
}

size_t LlamaEmbeddingBlock::saved_bytes(int B, int T) const {
  return llama_embedding_saved_bytes(arena_shape(env_), B, T);
}

size_t LlamaEmbeddingBlock::workspace_bytes(int B, int T) const {
  return llama_embedding_workspace_bytes(arena_shape(env_), B, T);
}

size_t LlamaEmbeddingBlock::stash_bytes(int B, int T) const {
  return llama_embedding_stash_bytes(arena_shape(env_), B, T);
}

namespace {
// Saved tensors of the Llama head, in block_saved order. Under SP NORM, RSTD and DNORM are on
// this rank's sequence shard (B,T/t,..) and NORM_FULL is the norm's output all-gathered
// (B,T,C) (otherwise NORM itself); LSE_MAX, LSE_SUM: the vocabulary-parallel cross-entropy's
// row maxima and sums of exp (B,T).
enum LlamaHeadSaved { LH_NORM, LH_RSTD, LH_LOGITS, LH_DNORM, LH_LSE_MAX, LH_LSE_SUM, LH_NORM_FULL };
}  // namespace

LlamaHeadBlock::LlamaHeadBlock(const BlockEnv& env, int head_weight, int norm_weight)
    : env_(env), head_(head_weight), norm_(norm_weight) {
  param_ids_ = {norm_weight, head_weight};
}

void LlamaHeadBlock::forward(MicroBatch& mb) {
  const GPTConfig& cfg = *env_.config;
  const int64_t B = mb.B, T = mb.T, Ts = env_.seq_local(T), C = cfg.n_embd;
  Arena& keep = (mb.training || mb.keep_logits) ? mb.saved : mb.workspace;
  const Tensor x = mb.residual[cfg.n_layer];  // (B,Ts,C)
  Tensor norm = keep.alloc_tensor({B, Ts, C}, env_.act);
  Tensor rstd = keep.alloc_tensor({B, Ts}, DType::F32);
  rmsnorm_forward(env_.op, norm, rstd, x, env_.param(norm_), static_cast<float>(cfg.rms_norm_eps));
  const Tensor norm_full = env_.to_full(norm, keep, mb.workspace);  // (B,T,C)
  // (B,T,V), (B,T,V/t) under tensor parallelism; f32 in every precision, as the GPT-2 head's.
  Tensor logits = keep.alloc_tensor({B, T, env_.vocab_cols()}, DType::F32);
  matmul_forward(env_.op, logits, norm_full, env_.head_weight(env_.param(head_)), Tensor());
  const auto [lse_max, lse_sum] = head_loss_forward(env_, mb, logits, keep);
  if (mb.training)
    mb.block_saved[cfg.n_layer + 1] = {norm, rstd, logits, Tensor(), lse_max, lse_sum, norm_full};
}

void LlamaHeadBlock::backward_input(MicroBatch& mb) {
  const GPTConfig& cfg = *env_.config;
  std::vector<Tensor>& s = mb.block_saved[cfg.n_layer + 1];
  Tensor dlogits = s[LH_LOGITS];  // (B,T,V), overwritten in place
  head_loss_backward(env_, mb, dlogits, s[LH_LSE_MAX], s[LH_LSE_SUM]);
  // (B,T,C): the ranks' partial d(norm output) summed; under SP reduce-scattered to this
  // rank's shard (B,T/t,C).
  Tensor dnorm = env_.zeros(env_.sp ? mb.workspace : *mb.stash_arena, s[LH_NORM_FULL].shape);
  matmul_backward_input(env_.op, dnorm, dlogits, env_.head_weight(env_.param(head_)));
  s[LH_DNORM] = env_.to_shard(dnorm, *mb.stash_arena, mb.workspace);
  // The head starts the backward pass: dresidual = d(loss)/d(residual[L]).
  rmsnorm_backward_input(env_.op, mb.dresidual, s[LH_DNORM], mb.residual[cfg.n_layer],
                         env_.param(norm_), s[LH_RSTD]);
}

void LlamaHeadBlock::backward_weight(MicroBatch& mb) {
  const GPTConfig& cfg = *env_.config;
  const std::vector<Tensor>& s = mb.block_saved[cfg.n_layer + 1];
  matmul_backward_weight(env_.op, env_.head_weight(env_.grad(head_)), Tensor(), s[LH_LOGITS],
                         s[LH_NORM_FULL]);
  if (!env_.sp) {
    rmsnorm_backward_weight(env_.op, env_.grad(norm_), s[LH_DNORM], mb.residual[cfg.n_layer],
                            s[LH_RSTD]);
    return;
  }
  // Under SP the norm saw only this rank's positions: a partial gradient, all-reduced.
  Tensor part = env_.zeros(mb.workspace, {cfg.n_embd}, DType::F32);
  rmsnorm_backward_weight(env_.op, part, s[LH_DNORM], mb.residual[cfg.n_layer], s[LH_RSTD]);
  env_.add_sp_partial_grads(part, {env_.grad(norm_)});
}

size_t LlamaHeadBlock::saved_bytes(int B, int T) const {
  return llama_head_saved_bytes(arena_shape(env_), B, T);
}

size_t LlamaHeadBlock::workspace_bytes(int B, int T) const {
  return llama_head_workspace_bytes(arena_shape(env_), B, T);
}

size_t LlamaHeadBlock::stash_bytes(int B, int T) const {
  return llama_head_stash_bytes(arena_shape(env_), B, T);
}

}  // namespace tide

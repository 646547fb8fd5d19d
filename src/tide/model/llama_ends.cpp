// The Llama family's embedding and head blocks (llama_blocks.h): a token embedding without
// positions, and the final RMSNorm + LM head (tied to wte, or its own output.weight) + loss.

#include "tide/kernels/mover.h"
#include "tide/model/llama_blocks.h"

namespace tide {

LlamaEmbeddingBlock::LlamaEmbeddingBlock(const BlockEnv& env, int wte) : env_(env), wte_(wte) {
  param_ids_ = {wte};
}

// The embedding op adds a position table; a zero one (T,C) in the workspace leaves wte[tokens]
// exactly (x + 0 = x), and W gives the op a scratch table for the position gradient it drops.
// (An embedding op without positions in kernels/ would save the (T,C) pass.)
void LlamaEmbeddingBlock::forward(MicroBatch& mb) {
  Tensor x = mb.residual[0];                                               // (B,T,C)
  const Tensor no_positions = env_.zeros(mb.workspace, {mb.T, x.dim(2)});  // (T,C)
  embedding_forward(env_.op, x, mb.tokens, env_.param(wte_), no_positions);
}

void LlamaEmbeddingBlock::backward_input(MicroBatch& mb) {
  Tensor demb = mb.stash_arena->alloc_tensor(mb.dresidual.shape, mb.dresidual.dtype);  // (B,T,C)
  copy(env_.op, demb, mb.dresidual);
  mb.block_saved[0] = {demb};
}

void LlamaEmbeddingBlock::backward_weight(MicroBatch& mb) {
  const Tensor dwte = env_.grad(wte_);
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
// Saved tensors of the Llama head, in block_saved order.
enum LlamaHeadSaved { LH_NORM, LH_RSTD, LH_LOGITS, LH_DNORM, kLlamaHeadSaved };
}  // namespace

LlamaHeadBlock::LlamaHeadBlock(const BlockEnv& env, int head_weight, int norm_weight)
    : env_(env), head_(head_weight), norm_(norm_weight) {
  param_ids_ = {norm_weight, head_weight};
}

void LlamaHeadBlock::forward(MicroBatch& mb) {
  const GPTConfig& cfg = *env_.config;
  const int64_t B = mb.B, T = mb.T, C = cfg.n_embd, V = cfg.vocab_size;
  Arena& keep = (mb.training || mb.keep_logits) ? mb.saved : mb.workspace;
  const Tensor x = mb.residual[cfg.n_layer];  // (B,T,C)
  Tensor norm = keep.alloc_tensor({B, T, C}, env_.act);
  Tensor rstd = keep.alloc_tensor({B, T}, DType::F32);
  rmsnorm_forward(env_.op, norm, rstd, x, env_.param(norm_), static_cast<float>(cfg.rms_norm_eps));
  // (B,T,V) f32 in every precision, as the GPT-2 head's.
  Tensor logits = keep.alloc_tensor({B, T, V}, DType::F32);
  matmul_forward(env_.op, logits, norm, env_.param(head_), Tensor());
  Tensor losses = mb.workspace.alloc_tensor({B, T}, DType::F32);
  crossentropy_forward(env_.op, losses, logits, mb.targets);
  mb.logits = logits;
  record_losses(env_, mb, losses);
  if (mb.training) mb.block_saved[cfg.n_layer + 1] = {norm, rstd, logits, Tensor()};
}

void LlamaHeadBlock::backward_input(MicroBatch& mb) {
  const GPTConfig& cfg = *env_.config;
  std::vector<Tensor>& s = mb.block_saved[cfg.n_layer + 1];
  const int32_t* tgt = mb.host_targets.i32();
  int64_t counted = 0;
  for (int64_t i = 0; i < int64_t{mb.B} * mb.T; ++i) counted += tgt[i] >= 0;
  // d(mean loss)/d(loss_i) = 1/counted, times the micro-batch's weight in the objective.
  const float dloss = counted ? mb.dloss / static_cast<float>(counted) : 0.0f;
  Tensor dlogits = s[LH_LOGITS];  // (B,T,V), overwritten in place
  crossentropy_backward(env_.op, dlogits, s[LH_LOGITS], mb.targets, dloss);
  s[LH_DNORM] = env_.zeros(*mb.stash_arena, s[LH_NORM].shape);  // (B,T,C)
  matmul_backward_input(env_.op, s[LH_DNORM], dlogits, env_.param(head_));
  // The head starts the backward pass: dresidual = d(loss)/d(residual[L]).
  rmsnorm_backward_input(env_.op, mb.dresidual, s[LH_DNORM], mb.residual[cfg.n_layer],
                         env_.param(norm_), s[LH_RSTD]);
}

void LlamaHeadBlock::backward_weight(MicroBatch& mb) {
  const GPTConfig& cfg = *env_.config;
  const std::vector<Tensor>& s = mb.block_saved[cfg.n_layer + 1];
  matmul_backward_weight(env_.op, env_.grad(head_), Tensor(), s[LH_LOGITS], s[LH_NORM]);
  rmsnorm_backward_weight(env_.op, env_.grad(norm_), s[LH_DNORM], mb.residual[cfg.n_layer],
                          s[LH_RSTD]);
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


#include "tide/kernels/mover.h"
#include "tide/model/blocks.h"
#include "tide/model/layout.h"
#include "tide/model/vocab_parallel.h"

namespace tide {

// Dropout site of the embedding output (transformer blocks use sites 0..2 of their layer).
constexpr int kEmbeddingDropoutSite = 3;

EmbeddingBlock::EmbeddingBlock(const BlockEnv& env, int wte, int wpe)
    : env_(env), wte_(wte), wpe_(wpe) {
  param_ids_ = {wte, wpe};
}

void EmbeddingBlock::forward(MicroBatch& mb) {
  Tensor x = mb.residual[0];  // (B,T,C); (B,T/t,C) under SP
  if (env_.tp) {
    // Vocabulary-parallel: this rank's rows of wte, zeros for the others' tokens; the
    // all-reduce of the partial embeddings completes every row (exactly: one term is not
    // zero; under SP a reduce-scatter to this rank's positions), then the replicated wpe is
    // added as the single-rank op adds it.
    Tensor partial = x;
    if (env_.sp) partial = mb.workspace.alloc_tensor({mb.B, mb.T, x.dim(2)}, x.dtype);
    vocab_parallel_embedding_forward(env_.op, partial, mb.tokens, env_.param(wte_),
                                     env_.vocab_begin(), env_.config->vocab_size);
    Tensor summed = env_.to_shard(partial, mb.workspace, mb.workspace);
    if (env_.sp) copy(env_.op, x, summed);
    add_position_embedding(env_.op, x, env_.param(wpe_), env_.seq_begin(mb.T));
  } else {
    // wpe is (max_seq_len, C); the op uses its first T rows.
    embedding_forward(env_.op, x, mb.tokens, env_.param(wte_), env_.param(wpe_));
  }
  dropout_forward(env_.op, x, x, env_.seq_dropout(mb, -1, kEmbeddingDropoutSite, x.shape[2]));
}

// Tokens have no gradient; B stashes d(wte[tokens] + wpe) = dropout_backward(dresidual[0]).
void EmbeddingBlock::backward_input(MicroBatch& mb) {
  // dropout_backward into zeros, as one pass: dropout_forward applies the same mask.
  // Under SP the shard's gradient is all-gathered: W needs every position's.
  Arena& out = env_.sp ? mb.workspace : *mb.stash_arena;
  Tensor demb =
      out.alloc_tensor(mb.dresidual.shape, mb.dresidual.dtype);  // (B,T,C); (B,T/t,C) under SP
  dropout_forward(env_.op, demb, mb.dresidual,
                  env_.seq_dropout(mb, -1, kEmbeddingDropoutSite, demb.shape[2]));
  mb.block_saved[0] = {env_.to_full(demb, *mb.stash_arena, mb.workspace)};
}

// Under tensor parallelism the gradient is the same on every rank (the embedding's all-reduce
// is the identity backward): each rank scatters its own tokens' rows and the whole of wpe.
void EmbeddingBlock::backward_weight(MicroBatch& mb) {
  if (env_.tp) {
    vocab_parallel_embedding_backward(env_.op, env_.grad(wte_), mb.block_saved[0][0], mb.tokens,
                                      env_.vocab_begin());
    position_embedding_backward(env_.op, env_.grad(wpe_), mb.block_saved[0][0]);
    return;
  }
  embedding_backward(env_.op, env_.grad(wte_), env_.grad(wpe_), mb.block_saved[0][0], mb.tokens);
}

size_t EmbeddingBlock::saved_bytes(int B, int T) const {
  return embedding_saved_bytes(arena_shape(env_), B, T);
}

size_t EmbeddingBlock::workspace_bytes(int B, int T) const {
  return embedding_workspace_bytes(arena_shape(env_), B, T);
}

size_t EmbeddingBlock::stash_bytes(int B, int T) const {
  return embedding_stash_bytes(arena_shape(env_), B, T);
}

}  // namespace tide

// The arena sizes of the Llama family's blocks (arena_bytes.h): what llama_block.cpp and
// llama_ends.cpp allocate, as functions of the shape, for make_micro_batch and tide estimate.

#include <algorithm>

#include "tide/core/arena.h"
#include "tide/model/arena_bytes.h"

namespace tide {

namespace {

// `n` f32 values and `n` activations of `es` bytes, as the arena rounds them.
size_t llama_f32(int64_t n) {
  return Arena::aligned(static_cast<size_t>(n) * 4);
}
size_t llama_act(int64_t n, size_t es) {
  return Arena::aligned(static_cast<size_t>(n) * es);
}

// A layer's forward intermediates (llama_block.cpp), N = B T positions: NORM1, ATTY, RES2,
// NORM2 (N,C); RSTD1, RSTD2 (N) f32; QKV (N,W); GATE_UP (N,2I); ACT (N,I).
size_t llama_main_bytes(const GPTConfig& c, size_t es, int64_t N) {
  const int64_t C = c.n_embd, W = c.qkv_width(), I = c.ffn_size();
  return 4 * llama_act(N * C, es) + 2 * llama_f32(N) + llama_act(N * W, es) +
         llama_act(N * 2 * I, es) + llama_act(N * I, es);
}
// PREATT and ATT (B,NH,T,T).
size_t llama_att_bytes(const GPTConfig& c, size_t es, int64_t B, int64_t T) {
  return 2 * llama_act(B * c.n_head * T * T, es);
}

}  // namespace

size_t llama_layer_saved_bytes(const ArenaShape& s, int B, int T) {
  const GPTConfig& c = *s.config;
  const int64_t N = int64_t{B} * T;
  switch (s.policy) {
    case ActivationPolicy::SAVE_ALL:
      return llama_main_bytes(c, s.act_bytes, N) + llama_att_bytes(c, s.act_bytes, B, T);
    case ActivationPolicy::SELECTIVE:
      return llama_main_bytes(c, s.act_bytes, N);
    case ActivationPolicy::FULL:
      return 0;
  }
  return 0;
}

size_t llama_layer_workspace_bytes(const ArenaShape& s, int B, int T) {
  const GPTConfig& c = *s.config;
  const int64_t N = int64_t{B} * T, C = c.n_embd;
  const size_t es = s.act_bytes;
  // Evaluation keeps everything temporary, plus the o_proj and down_proj outputs (N,C). B:
  // the recomputed attention matrices and their output (or the recomputation's o_proj
  // output), then dact (N,I), datty (N,C) and the rotated qkv's gradient (N,W).
  const size_t eval =
      llama_main_bytes(c, es, N) + llama_att_bytes(c, es, B, T) + 2 * llama_act(N * C, es);
  const size_t bwd = llama_att_bytes(c, es, B, T) + 2 * llama_act(N * C, es) +
                     llama_act(N * c.ffn_size(), es) + llama_act(N * c.qkv_width(), es);
  return std::max(eval, bwd);
}

size_t llama_layer_stash_bytes(const ArenaShape& s, int B, int T) {
  const GPTConfig& c = *s.config;
  const int64_t N = int64_t{B} * T, C = c.n_embd;
  const size_t es = s.act_bytes;
  // DDOWN, DNORM2, DO, DNORM1 (N,C); DGATE_UP (N,2I); DQKV (N,W); under the full policy the
  // recomputed intermediates too.
  const size_t grads = 4 * llama_act(N * C, es) + llama_act(N * 2 * c.ffn_size(), es) +
                       llama_act(N * c.qkv_width(), es);
  return grads + (s.policy == ActivationPolicy::FULL ? llama_main_bytes(c, es, N) : 0);
}

size_t llama_embedding_saved_bytes(const ArenaShape&, int, int) {
  return 0;  // its output is residual[0]
}

size_t llama_embedding_workspace_bytes(const ArenaShape& s, int, int T) {
  // The zero position table (T,C) of F, or W's dropped position gradient in the gradient's
  // dtype (f32 at most).
  return llama_f32(int64_t{T} * s.config->n_embd);
}

size_t llama_embedding_stash_bytes(const ArenaShape& s, int B, int T) {
  return llama_act(int64_t{B} * T * s.config->n_embd, s.act_bytes);
}

size_t llama_head_saved_bytes(const ArenaShape& s, int B, int T) {
  const int64_t N = int64_t{B} * T;
  // The normed input (N,C), its rstd (N) and the f32 logits (N,V).
  return llama_act(N * s.config->n_embd, s.act_bytes) + llama_f32(N) +
         llama_f32(N * s.config->vocab_size);
}

size_t llama_head_workspace_bytes(const ArenaShape& s, int B, int T) {
  // Evaluation keeps everything in the workspace, and the losses (N) f32.
  return llama_head_saved_bytes(s, B, T) + llama_f32(int64_t{B} * T);
}

size_t llama_head_stash_bytes(const ArenaShape& s, int B, int T) {
  return llama_act(int64_t{B} * T * s.config->n_embd, s.act_bytes);
}

}  // namespace tide

// The arena sizes of the Llama family's blocks (arena_bytes.h): what llama_block.cpp and
// llama_ends.cpp allocate, as functions of the shape, for make_micro_batch and tide estimate.

#include <algorithm>

#include "tide/core/arena.h"
#include "tide/model/arena_bytes.h"
#include "tide/model/layout.h"
#include "tide/model/vocab_parallel.h"

namespace tide {

namespace {

// `n` f32 values and `n` activations of `es` bytes, as the arena rounds them.
size_t llama_f32(int64_t n) {
  return Arena::aligned(static_cast<size_t>(n) * 4);
}
size_t llama_act(int64_t n, size_t es) {
  return Arena::aligned(static_cast<size_t>(n) * es);
}

// A layer's forward intermediates (llama_block.cpp) over t tensor-parallel ranks (Cl = C/t,
// Wl = qkv_rows_per_rank, Il = I/t), with N = B T positions and Ns = B Ts of the residual stream (B
// T/t under SP, else N): NORM1, RES2, NORM2 (Ns,C); under SP NORM1F, NORM2F (N,C) unless they are
// not kept (`kept`, F's saved set); ATTY (N,Cl); RSTD1, RSTD2 (Ns) f32; QKV (N,Wl); GATE_UP
// (N,2Il); ACT (N,Il).
size_t llama_main_bytes(const ArenaShape& s, int64_t N, int64_t Ns, bool kept) {
  const GPTConfig& c = *s.config;
  const int64_t t = s.tp, C = c.n_embd, W = qkv_rows_per_rank(c, s.tp), I = c.ffn_size() / t;
  const size_t es = s.act_bytes;
  const size_t whole = s.sp && !kept ? 2 * llama_act(N * C, es) : 0;
  return 3 * llama_act(Ns * C, es) + whole + llama_act(N * C / t, es) + 2 * llama_f32(Ns) +
         llama_act(N * W, es) + llama_act(N * 2 * I, es) + llama_act(N * I, es);
}
// LSE (B,NHl,T) f32: what the attention op keeps.
size_t llama_att_bytes(const ArenaShape& s, int64_t B, int64_t T) {
  return llama_f32(B * (s.config->n_head / s.tp) * T);
}
// Under SP, what the collectives add to a part's workspace. Evaluation: the permutation
// scratch (N,C) and the (Ns,C) shards of the o_proj and down_proj outputs. B: the partial
// d(norm output)s (N,C) of both norms and their scratch, the recomputed o_proj output's shard
// (Ns,C) under the full policy; W: the 2C f32 RMSNorm partial gradients.
size_t llama_sp_eval_bytes(const ArenaShape& s, int64_t N, int64_t Ns) {
  const int64_t C = s.config->n_embd;
  return llama_act(N * C, s.act_bytes) + 2 * llama_act(Ns * C, s.act_bytes);
}
size_t llama_sp_backward_bytes(const ArenaShape& s, int64_t N, int64_t Ns) {
  const int64_t C = s.config->n_embd;
  return 3 * llama_act(N * C, s.act_bytes) + llama_act(Ns * C, s.act_bytes) + llama_f32(2 * C);
}

}  // namespace

size_t llama_layer_saved_bytes(const ArenaShape& s, int B, int T) {
  const int64_t N = int64_t{B} * T, Ns = B * s.seq_local(T);
  switch (s.policy) {
    case ActivationPolicy::SAVE_ALL:
      return llama_main_bytes(s, N, Ns, true) + llama_att_bytes(s, B, T);
    case ActivationPolicy::SELECTIVE:
      return llama_main_bytes(s, N, Ns, true);
    case ActivationPolicy::FULL:
      return 0;
  }
  return 0;
}

size_t llama_layer_workspace_bytes(const ArenaShape& s, int B, int T) {
  const GPTConfig& c = *s.config;
  const int64_t N = int64_t{B} * T, Ns = B * s.seq_local(T), C = c.n_embd, t = s.tp;
  const size_t es = s.act_bytes;
  // Evaluation keeps everything temporary, plus the o_proj and down_proj outputs (N,C). B:
  // the recomputed attention matrices and their output (N,Cl) (or the recomputation's o_proj
  // output (N,C)), then dact (N,Il), datty (N,Cl) and the rotated qkv's gradient (N,Wl); under
  // SP also the partial d(norm output)s and their shards.
  const size_t eval = llama_main_bytes(s, N, Ns, false) + llama_att_bytes(s, B, T) +
                      2 * llama_act(N * C, es) + (s.sp ? llama_sp_eval_bytes(s, N, Ns) : 0);
  const int64_t Wl = qkv_rows_per_rank(c, s.tp);
  const size_t bwd = llama_att_bytes(s, B, T) + llama_act(N * C, es) + llama_act(N * C / t, es) +
                     llama_act(N * c.ffn_size() / t, es) + llama_act(N * Wl, es) +
                     (s.sp ? llama_sp_backward_bytes(s, N, Ns) : 0);
  // W: under SP the RMSNorms' f32 partial gradients (2C), then with replicated kv heads
  // qkv_proj's f32 partial gradient [dW (Wl,C) | db (Wl)] (Wl C elements: W's alone can exceed
  // B's temporaries when B T is small).
  const size_t kv_partial =
      kv_head_replicas(c, s.tp) > 1 ? llama_f32(Wl * (C + (c.qkv_bias ? 1 : 0))) : 0;
  const size_t w = (s.sp ? llama_f32(2 * C) : 0) + kv_partial;
  return std::max({eval, bwd, w});
}

size_t llama_layer_stash_bytes(const ArenaShape& s, int B, int T) {
  const GPTConfig& c = *s.config;
  const int64_t N = int64_t{B} * T, Ns = B * s.seq_local(T), C = c.n_embd, t = s.tp;
  const size_t es = s.act_bytes;
  // DDOWN, DNORM2, DO, DNORM1 (Ns,C); under SP DDOWNF, DOF (N,C); DGATE_UP (N,2Il); DQKV
  // (N,Wl); under the full policy the recomputed intermediates too, under SP with the other
  // policies NORM1F and NORM2F re-gathered (N,C), under P_a the gathered input (Ns,C).
  const bool full = s.policy == ActivationPolicy::FULL;
  const size_t grads = 4 * llama_act(Ns * C, es) + (s.sp ? 2 * llama_act(N * C, es) : 0) +
                       llama_act(N * 2 * c.ffn_size() / t, es) +
                       llama_act(N * qkv_rows_per_rank(c, s.tp), es);
  const size_t recomputed = full ? llama_main_bytes(s, N, Ns, false) : 0;
  const size_t regathered = s.sp && !full ? 2 * llama_act(N * C, es) : 0;
  const size_t input = s.partition_activations ? llama_act(Ns * C, es) : 0;
  return grads + recomputed + regathered + input;
}

size_t llama_embedding_saved_bytes(const ArenaShape&, int, int) {
  return 0;  // its output is residual[0]
}

size_t llama_embedding_workspace_bytes(const ArenaShape& s, int B, int T) {
  // One rank: the zero position table (T,C) of F, or W's dropped position gradient in the
  // gradient's dtype (f32 at most). Under SP: the partial (B,T,C) and its shard in F, the
  // shard's gradient in B, and the collectives' permutation scratch.
  const int64_t C = s.config->n_embd;
  if (s.tp > 1) return s.sp ? 3 * llama_act(int64_t{B} * T * C, s.act_bytes) : 0;
  return llama_f32(int64_t{T} * C);
}

size_t llama_embedding_stash_bytes(const ArenaShape& s, int B, int T) {
  return llama_act(int64_t{B} * T * s.config->n_embd, s.act_bytes);
}

size_t llama_head_saved_bytes(const ArenaShape& s, int B, int T) {
  const int64_t N = int64_t{B} * T, Ns = B * s.seq_local(T), C = s.config->n_embd;
  const size_t lse = s.tp > 1 ? 2 * llama_f32(N) : 0;            // LSE_MAX, LSE_SUM
  const size_t full = s.sp ? llama_act(N * C, s.act_bytes) : 0;  // NORM_FULL
  // The normed input (Ns,C), its rstd (Ns) and the f32 logits (N, this rank's vocabulary).
  return llama_act(Ns * C, s.act_bytes) + llama_f32(Ns) + llama_f32(N * head_vocab_cols(s)) + lse +
         full;
}

size_t llama_head_workspace_bytes(const ArenaShape& s, int B, int T) {
  // Evaluation keeps everything in the workspace, and the losses (N) f32; under tensor
  // parallelism the cross-entropy's buffers, under SP the partial d(norm output) (N,C), the
  // collectives' scratch and W's C partial gradient.
  const int64_t N = int64_t{B} * T, C = s.config->n_embd;
  const size_t ce = s.tp > 1 ? vocab_parallel_crossentropy_scratch(N, s.tp) : 0;
  const size_t sp = s.sp ? 2 * llama_act(N * C, s.act_bytes) + llama_f32(C) : 0;
  return llama_head_saved_bytes(s, B, T) + llama_f32(N) + ce + sp;
}

size_t llama_head_stash_bytes(const ArenaShape& s, int B, int T) {
  return llama_act(int64_t{B} * s.seq_local(T) * s.config->n_embd, s.act_bytes);
}

}  // namespace tide

#include "tide/model/arena_bytes.h"

#include <algorithm>

#include "tide/core/arena.h"
#include "tide/model/layout.h"
#include "tide/model/vocab_parallel.h"

namespace tide {

namespace {

// Bytes of `n` f32 values (statistics) and of `n` activations of `es` bytes each, as the arena
// rounds them.
size_t f32(int64_t n) {
  return Arena::aligned(static_cast<size_t>(n) * 4);
}
size_t act(int64_t n, size_t es) {
  return Arena::aligned(static_cast<size_t>(n) * es);
}

// A transformer block's sizes (transformer_block.cpp's allocations), with Cl = C/t, NHl = NH/t
// over t tensor-parallel ranks and Ns = B Ts positions of the residual stream (B T/t under SP,
// else N = B T):
// LN1, RES2, LN2 (Ns,C); under SP LN1F, LN2F (N,C) unless they are not kept (`kept`, F's
// saved set); ATTY (N,Cl); four (Ns) f32 statistics; QKV (N,3Cl); FCH, FCH_GELU (N,4Cl).
size_t main_bytes(size_t es, int64_t N, int64_t C, int64_t t = 1, int64_t Ns = -1,
                  bool kept = false) {
  const int64_t Cl = C / t;
  const bool sp = Ns >= 0 && Ns != N && !kept;
  if (Ns < 0) Ns = N;
  return 3 * act(Ns * C, es) + (sp ? 2 * act(N * C, es) : 0) + act(N * Cl, es) + 4 * f32(Ns) +
         act(N * 3 * Cl, es) + 2 * act(N * 4 * Cl, es);
}
// Under SP: what the collectives add to a part's workspace: the (B,T,C) partial sums and
// permutation scratch, the shards they produce, and W's 4C f32 layernorm partial gradients.
size_t sp_workspace_bytes(size_t es, int64_t N, int64_t Ns, int64_t C) {
  return 3 * act(N * C, es) + 2 * act(Ns * C, es) + f32(4 * C);
}
// LSE (B,NHl,T) f32: what the attention op keeps.
size_t att_bytes(int64_t B, int64_t T, int64_t NHl) {
  return f32(B * NHl * T);
}
// What B leaves for W: DFC2, DLN2, DPROJ, DLN1 (Ns,C); under SP DFC2F, DPROJF (N,C);
// DFCH (N,4Cl); DQKV (N,3Cl).
size_t grad_stash_bytes(size_t es, int64_t N, int64_t C, int64_t t, int64_t Ns) {
  const int64_t Cl = C / t;
  return 4 * act(Ns * C, es) + (Ns != N ? 2 * act(N * C, es) : 0) + act(N * 4 * Cl, es) +
         act(N * 3 * Cl, es);
}

}  // namespace

size_t transformer_saved_bytes(const ArenaShape& s, int B, int T) {
  const int64_t N = int64_t{B} * T, C = s.config->n_embd, t = s.tp;
  const int64_t NHl = s.config->n_head / t, Ns = B * s.seq_local(T);
  const size_t es = s.act_bytes;
  switch (s.policy) {
    case ActivationPolicy::SAVE_ALL:
      return main_bytes(es, N, C, t, Ns, true) + att_bytes(B, T, NHl);
    case ActivationPolicy::SELECTIVE:
      return main_bytes(es, N, C, t, Ns, true);
    case ActivationPolicy::FULL:
      return 0;
  }
  return 0;
}

size_t transformer_workspace_bytes(const ArenaShape& s, int B, int T) {
  const int64_t N = int64_t{B} * T, C = s.config->n_embd, t = s.tp;
  const int64_t NHl = s.config->n_head / t, Ns = B * s.seq_local(T);
  const size_t es = s.act_bytes;
  // Worst part: evaluation keeps everything temporary (main + attention + proj, fc2); B needs
  // the recomputed attention matrices, their output or proj, dgelu (B,T,4Cl) and datty. (With
  // t = 1 the bound of the single-rank model: 2 (B,T,C) + (B,T,4C).)
  const size_t sp = s.sp ? sp_workspace_bytes(es, N, Ns, C) : 0;
  const size_t eval = main_bytes(es, N, C, t, Ns) + att_bytes(B, T, NHl) + 2 * act(N * C, es) + sp;
  const size_t bwd = att_bytes(B, T, NHl) + 2 * act(N * C, es) + act(N * 4 * C / t, es) + sp;
  return std::max(eval, bwd);
}

size_t transformer_stash_bytes(const ArenaShape& s, int B, int T) {
  const int64_t N = int64_t{B} * T, C = s.config->n_embd, t = s.tp;
  const int64_t Ns = B * s.seq_local(T);
  const size_t es = s.act_bytes;
  // A full recomputation also leaves the block's intermediates for W; under SP the other
  // policies re-gather LN1F and LN2F (N,C) into it.
  const bool full = s.policy == ActivationPolicy::FULL;
  const size_t recomputed = full ? main_bytes(es, N, C, t, Ns) : 0;
  const size_t regathered = s.sp && !full ? 2 * act(N * C, es) : 0;
  const size_t input = s.partition_activations ? act(Ns * C, es) : 0;  // P_a's gather
  return grad_stash_bytes(es, N, C, t, Ns) + recomputed + regathered + input;
}

size_t embedding_saved_bytes(const ArenaShape&, int, int) {
  return 0;  // its output is residual[0]
}

size_t embedding_workspace_bytes(const ArenaShape& s, int B, int T) {
  // Under SP: the partial (B,T,C) and its shard in F, the shard's gradient in B, and the
  // collectives' permutation scratch.
  const int64_t N = int64_t{B} * T, C = s.config->n_embd;
  return s.sp ? 3 * act(N * C, s.act_bytes) : 0;
}

size_t embedding_stash_bytes(const ArenaShape& s, int B, int T) {
  return act(int64_t{B} * T * s.config->n_embd, s.act_bytes);
}

int64_t head_vocab_cols(const ArenaShape& s) {
  if (s.tp == 1) return s.config->vocab_size;
  const int64_t rows = vocab_rows_per_rank(*s.config, s.tp);
  return std::min<int64_t>(rows, s.config->vocab_size - s.tp_rank * rows);
}

size_t head_saved_bytes(const ArenaShape& s, int B, int T) {
  const int64_t N = int64_t{B} * T;
  const size_t es = s.act_bytes;
  const size_t lse = s.tp > 1 ? 2 * f32(N) : 0;                  // LSE_MAX, LSE_SUM
  const size_t full = s.sp ? act(N * s.config->n_embd, es) : 0;  // LNF_FULL
  // LNF, its mean and rstd, the logits (f32 in every precision).
  return act(N * s.config->n_embd, es) + 2 * f32(N) + f32(N * head_vocab_cols(s)) + lse + full;
}

size_t head_stash_bytes(const ArenaShape& s, int B, int T) {
  return act(int64_t{B} * T * s.config->n_embd, s.act_bytes);
}

size_t head_workspace_bytes(const ArenaShape& s, int B, int T) {
  // Evaluation keeps everything in the workspace: the saved set plus the losses.
  const int64_t N = int64_t{B} * T;
  const int64_t C = s.config->n_embd;
  const size_t ce = s.tp > 1 ? vocab_parallel_crossentropy_scratch(N, s.tp) : 0;
  // Under SP: the partial d(ln_f output) (B,T,C), the collectives' scratch, W's 2C partials.
  const size_t es = s.act_bytes;
  const size_t sp = s.sp ? 2 * act(N * C, es) + f32(2 * C) : 0;
  // The losses (f32) and one (B,T,C) activation.
  return head_saved_bytes(s, B, T) + f32(N) + act(N * C, es) + ce + sp;
}

MicroBatchArenas micro_batch_arenas(const ArenaShape& s, int first_layer, int end_layer,
                                    bool embedding, bool head, int B, int T, bool training) {
  // The residual stream: (B,T,C), or this rank's sequence shard (B,T/t,C) under SP.
  const int64_t N = int64_t{B} * s.seq_local(T), C = s.config->n_embd;
  // saved: tokens, targets, the stage's residuals (layer boundaries first..end), dresidual,
  // then every block's saved tensors (in training).
  const int boundaries = end_layer - first_layer + 1;
  // P_a: the forward needs only the boundary it reads and the one it writes (ping-pong);
  // each transformer block's input survives to B as a 1/t slice (in `saved`, or the host pool).
  const bool pa = s.partition_activations && training;
  const int buffers = pa ? std::min(boundaries, 2) : boundaries;
  const size_t es = s.act_bytes;
  const size_t slices = pa ? (boundaries - 1) * act(N * C / s.tp, es) : 0;
  MicroBatchArenas a;
  a.saved = 2 * Arena::aligned(static_cast<size_t>(B) * T * 4) + (buffers + 1) * act(N * C, es) +
            (s.cpu_checkpointing ? 0 : slices);
  a.host_checkpoints = s.cpu_checkpointing ? slices : 0;
  auto block = [&](size_t saved, size_t workspace, size_t stash) {
    if (training) a.saved += saved;
    a.workspace = std::max(a.workspace, workspace);
    a.stash_slot = std::max(a.stash_slot, stash);
  };
  if (s.config->is_llama()) {
    if (embedding)
      block(llama_embedding_saved_bytes(s, B, T), llama_embedding_workspace_bytes(s, B, T),
            llama_embedding_stash_bytes(s, B, T));
    if (end_layer > first_layer)
      block((end_layer - first_layer) * llama_layer_saved_bytes(s, B, T),
            llama_layer_workspace_bytes(s, B, T), llama_layer_stash_bytes(s, B, T));
    if (head)
      block(llama_head_saved_bytes(s, B, T), llama_head_workspace_bytes(s, B, T),
            llama_head_stash_bytes(s, B, T));
    return a;
  }
  if (embedding)
    block(embedding_saved_bytes(s, B, T), embedding_workspace_bytes(s, B, T),
          embedding_stash_bytes(s, B, T));
  if (end_layer > first_layer)  // every layer of a stage has the same sizes
    block((end_layer - first_layer) * transformer_saved_bytes(s, B, T),
          transformer_workspace_bytes(s, B, T), transformer_stash_bytes(s, B, T));
  if (head)
    block(head_saved_bytes(s, B, T), head_workspace_bytes(s, B, T), head_stash_bytes(s, B, T));
  return a;
}

}  // namespace tide

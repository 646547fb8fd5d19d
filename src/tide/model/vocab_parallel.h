#pragma once
// The vocabulary-parallel ends of GPT-2 under tensor parallelism (Megatron-LM's
// VocabParallelEmbedding and vocab_parallel_cross_entropy): rank r of t holds rows
// [v0, v0 + rows) of wte, and no rank ever holds the full (B,T,V) logits.
//
// Embedding: each rank looks up the tokens that fall in its rows (zeros elsewhere); the
// caller all-reduces the partial (B,T,C) and adds wpe. Cross-entropy over the rank's logit
// columns: the row maxima are all-gathered (ProcessGroup has no max reduction) and their
// maximum taken, then sum(exp(logit - max)) and the target's logit (held by one rank, 0 on the
// others) are all-reduced together, so loss = log(sum) + max - target logit.
//
// Kernels of the context `op`: on a GPU the CUDA kernels (kernels/cuda/tensor_parallel.cu),
// elsewhere host loops (kernels/ops.h run_cpu_kernel_on: at once on the CPU, queued on the
// simulated device's stream); the collectives wait for the stream first. Parameters, gradients
// and activations may be f32, bf16 or f16, as in the ops (kernels/ops.h: computed in f32, each
// written 16-bit tensor rounded once); the cross-entropy's max, sum and losses are f32. On a GPU
// a token outside the vocabulary gives a NaN row instead of an error (no round trip to check).

#include "tide/comm/process_group.h"
#include "tide/core/arena.h"
#include "tide/core/tensor.h"
#include "tide/kernels/ops.h"

namespace tide {

// out(B,T,C) = wte_shard[token - v0] for tokens in [v0, v0 + rows of wte_shard), else 0.
// Throws on a token outside [0, vocab) (on a GPU: NaN rows).
void vocab_parallel_embedding_forward(const OpContext& op, Tensor out, Tensor tokens,
                                      Tensor wte_shard, int64_t v0, int64_t vocab);
// dwte_shard[token - v0] += dout rows of this rank's tokens (in (b,t) order).
void vocab_parallel_embedding_backward(const OpContext& op, Tensor dwte_shard, Tensor dout,
                                       Tensor tokens, int64_t v0);
// out(B,T,C) += wpe[pos0 + t] (wpe is (maxT, C); out holds positions pos0.. of each sequence).
void add_position_embedding(const OpContext& op, Tensor out, Tensor wpe, int64_t pos0 = 0);
// dwpe[t] += sum over b of dout(B,T,C) (in b order).
void position_embedding_backward(const OpContext& op, Tensor dwpe, Tensor dout);

// logits(B,T,Vr): this rank's columns [v0, v0 + Vr) of the logits; targets(B,T) (< 0:
// ignored, loss 0). Writes losses(B,T) (the same on every rank) and, for backward, the row
// maxima max(B,T) and sums of exp(logit - max) sum(B,T). Collective over `tp`. Its
// communication buffers come from `scratch`: vocab_parallel_crossentropy_scratch(N, t) bytes.
void vocab_parallel_crossentropy_forward(const OpContext& op, ProcessGroup& tp, Tensor losses,
                                         Tensor max, Tensor sum, Tensor logits, Tensor targets,
                                         int64_t v0, Arena& scratch);
size_t vocab_parallel_crossentropy_scratch(int64_t N, int tp);
// dlogits(B,T,Vr) = (softmax - onehot(target)) * dloss over this rank's columns, from the
// forward's max and sum; may alias logits (overwritten in place). No communication.
void vocab_parallel_crossentropy_backward(const OpContext& op, Tensor dlogits, Tensor logits,
                                          Tensor targets, Tensor max, Tensor sum, int64_t v0,
                                          float dloss);

}  // namespace tide

#pragma once
// The three kinds of blocks of GPT-2 (see block.h for the forward / B / W contract).

#include "tide/model/block.h"

namespace tide {

// tokens -> residual[0] = dropout(wte[tokens] + wpe[t]). Tokens have no gradient: B only
// stashes the gradient through dropout, W scatters it into wte and wpe.
class EmbeddingBlock : public Block {
 public:
  EmbeddingBlock(const BlockEnv& env, int wte, int wpe);
  void forward(MicroBatch& mb) override;
  void backward_input(MicroBatch& mb) override;
  void backward_weight(MicroBatch& mb) override;
  size_t saved_bytes(int B, int T) const override;
  size_t workspace_bytes(int B, int T) const override;
  size_t stash_bytes(int B, int T) const override;

 private:
  const BlockEnv& env_;
  int wte_, wpe_;
};

// Pre-LayerNorm transformer block `layer`: residual[layer] -> residual[layer+1]:
//   x2 = x + dropout(proj(attention(ln_1(x))))
//   y  = x2 + dropout(mlp_proj(gelu(mlp_fc(ln_2(x2)))))
// Under tensor parallelism over t ranks (Megatron-LM): c_attn and mlp_fc are column-parallel
// (the rank's n_head/t heads, 4C/t hidden units), proj and mlp_proj row-parallel (partial
// (B,T,C) sums all-reduced, their bias added by rank 0 only); layernorms, dropout on the
// residual branches and the residual adds run on the replicated (B,T,C). The all-reduces:
// 2 in forward (after each row-parallel linear: g), 2 in backward_input (into ln_2's and
// ln_1's output gradients: f's backward); a full recomputation repeats the first forward one
// (it stops before the mlp c_proj: the block output is already consumed). Under P_a
// (BlockEnv::partition_activations) F keeps a 1/t slice of its input and B all-gathers it
// first: one more all-gather of (B,T,C) per B.
class TransformerBlock : public Block {
 public:
  // Parameter ids in declaration order: ln_1 w/b, c_attn w/b, attn c_proj w/b, ln_2 w/b,
  // c_fc w/b, mlp c_proj w/b.
  TransformerBlock(const BlockEnv& env, int layer, std::vector<int> params);
  void forward(MicroBatch& mb) override;
  void backward_input(MicroBatch& mb) override;
  void backward_weight(MicroBatch& mb) override;
  size_t saved_bytes(int B, int T) const override;
  size_t workspace_bytes(int B, int T) const override;
  size_t stash_bytes(int B, int T) const override;

 private:
  // Runs the forward pass, allocating intermediates in mb.saved (kept) or mb.workspace
  // (temporary, or recomputed for backward); returns the intermediates.
  // x: the block input (B,Ts,C) (the residual entry, or under P_a its all-gathered copy).
  std::vector<Tensor> compute_forward(MicroBatch& mb, Tensor x, bool recompute);
  Tensor row_parallel_forward(MicroBatch& mb, Tensor inp, Tensor w, Tensor bias) const;
  DropoutSpec attn_dropout(const MicroBatch& mb) const;
  const BlockEnv& env_;
  int layer_;
};

// residual[L] -> ln_f -> logits = x @ wte^T (tied) -> mean cross-entropy loss. Under tensor
// parallelism the LM head is vocabulary-parallel and fused with the cross-entropy: each rank
// computes only its (B,T,V/t) columns of the logits (vocab_parallel.h).
class HeadBlock : public Block {
 public:
  HeadBlock(const BlockEnv& env, int wte, int lnf_w, int lnf_b);
  void forward(MicroBatch& mb) override;
  void backward_input(MicroBatch& mb) override;
  void backward_weight(MicroBatch& mb) override;
  size_t saved_bytes(int B, int T) const override;
  size_t workspace_bytes(int B, int T) const override;
  size_t stash_bytes(int B, int T) const override;

 private:
  const BlockEnv& env_;
  int wte_, lnf_w_, lnf_b_;
};

}  // namespace tide

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
  std::vector<Tensor> compute_forward(MicroBatch& mb, bool recompute);
  const BlockEnv& env_;
  int layer_;
};

// residual[L] -> ln_f -> logits = x @ wte^T (tied) -> mean cross-entropy loss.
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

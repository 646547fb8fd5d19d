#pragma once
// The three kinds of blocks of the Llama family (Llama 3, Qwen2, Mistral; GPTConfig::family
// llama), beside GPT-2's in blocks.h and with the same forward / B / W contract (block.h), and
// GPT-2's tensor parallelism (Megatron-LM, with sequence parallelism and P_a; the per-rank
// shards in layout.h): vocabulary-parallel embedding and head, column-parallel qkv_proj (the
// rank's query and key/value heads) and gate_up_proj, row-parallel o_proj and down_proj,
// replicated RMSNorm weights. No dropout (GPTConfig::validate refuses it).

#include "tide/model/block.h"

namespace tide {

// tokens -> residual[0] = wte[tokens] (no position embedding: RoPE turns q and k in each
// layer). B stashes the output gradient, W scatters it into wte.
class LlamaEmbeddingBlock : public Block {
 public:
  LlamaEmbeddingBlock(const BlockEnv& env, int wte);
  void forward(MicroBatch& mb) override;
  void backward_input(MicroBatch& mb) override;
  void backward_weight(MicroBatch& mb) override;
  size_t saved_bytes(int B, int T) const override;
  size_t workspace_bytes(int B, int T) const override;
  size_t stash_bytes(int B, int T) const override;

 private:
  const BlockEnv& env_;
  int wte_;
};

// Pre-RMSNorm decoder layer `layer`: residual[layer] -> residual[layer+1]:
//   x2 = x + o_proj(attention(rope(qkv_proj(rmsnorm_1(x)))))      grouped-query attention
//   y  = x2 + down_proj(silu(gate) * up),  [gate | up] = gate_up_proj(rmsnorm_2(x2))
// qkv_proj's rows are the n_head query heads, then the n_kv_head key heads, then the value
// heads (the attention and rope ops' layout); only qkv_proj may have a bias (qkv_bias).
class LlamaBlock : public Block {
 public:
  // Parameter ids in layout order: input_layernorm, qkv_proj w (+ b with qkv_bias), o_proj,
  // post_attention_layernorm, gate_up_proj, down_proj.
  LlamaBlock(const BlockEnv& env, int layer, std::vector<int> params);
  void forward(MicroBatch& mb) override;
  void backward_input(MicroBatch& mb) override;
  void backward_weight(MicroBatch& mb) override;
  size_t saved_bytes(int B, int T) const override;
  size_t workspace_bytes(int B, int T) const override;
  size_t stash_bytes(int B, int T) const override;

 private:
  // The forward pass; intermediates in mb.saved (kept), mb.workspace or, when recomputed in
  // B under the full policy, the stash (W reads them). x: the block input (B,T,C).
  std::vector<Tensor> compute_forward(MicroBatch& mb, Tensor x, bool recompute);
  // W of qkv_proj (weight, and bias with qkv_bias), in the NORM1_QKV group; with replicated
  // kv heads (BlockEnv::kv_group) the k and v rows' part summed over the head's ranks.
  void qkv_backward_weight(MicroBatch& mb);
  // The attention's (disabled) dropout spec, for this rank's query heads.
  DropoutSpec attn_dropout(const MicroBatch& mb) const;
  Tensor param(int slot) const;
  Tensor grad(int slot) const;
  const BlockEnv& env_;
  int layer_;
  bool bias_;  // qkv_proj has a bias
};

// residual[L] -> RMSNorm (ln_f) -> logits = x @ W^T, W = wte (tied) or output.weight ->
// mean cross-entropy loss.
class LlamaHeadBlock : public Block {
 public:
  LlamaHeadBlock(const BlockEnv& env, int head_weight, int norm_weight);
  void forward(MicroBatch& mb) override;
  void backward_input(MicroBatch& mb) override;
  void backward_weight(MicroBatch& mb) override;
  size_t saved_bytes(int B, int T) const override;
  size_t workspace_bytes(int B, int T) const override;
  size_t stash_bytes(int B, int T) const override;

 private:
  const BlockEnv& env_;
  int head_, norm_;
};

}  // namespace tide

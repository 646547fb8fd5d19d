#pragma once
// The per-rank parameter layout: the single source of truth for which tensors (and which
// shards of them) a rank holds. The model's chunk store, the memory estimator and the
// checkpoint all derive from it.
//
// GPT-2 under tensor parallelism over t ranks (Megatron-LM) and pipeline parallelism over p
// stages, for the rank (tp_rank, stage):
//   stage 0         wte (ceil(V/t), C) vocabulary-parallel, wpe (maxT, C) replicated
//   each layer      ln_1, ln_2 (C) replicated;
//                   attn.c_attn (3C/t, C) + bias (3C/t): column-parallel, heads split;
//                   attn.c_proj (C, C/t) row-parallel, bias (C) replicated;
//                   mlp.c_fc (4C/t, C) + bias (4C/t) column-parallel;
//                   mlp.c_proj (C, 4C/t) row-parallel, bias (C) replicated
//   last stage      ln_f (C); with p > 1 also lm_head.weight, the last stage's copy of the
//                   tied wte (its gradient is summed with the first stage's)
// Layers are split evenly over stages, in order. Tensors are declared in forward-use order,
// which is the chunk packing order, so the next tensor needed is usually in the same chunk;
// each parameter group (model/param_groups.h) is a packing unit, kept in one chunk, and the
// head's ln_f starts a chunk of its own: the head's W, the first in backward, would otherwise
// hold the last layer's chunk's gradient buffer through that layer's B.
// With t = p = 1 the sizes add up to GPTConfig::num_parameters().
//
// The Llama family (GPTConfig::family llama; I = intermediate_size, HS = head_size, over t
// tensor-parallel ranks NHl = n_head/t query and KVl = kv_heads_per_rank key/value heads,
// Il = I/t):
//   stage 0         wte (ceil(V/t), C) vocabulary-parallel (no position embedding: RoPE)
//   each layer      input_layernorm (C) replicated; self_attn.qkv_proj ((NHl + 2 KVl) HS, C)
//                   column-parallel, rows: this rank's q heads, then its k heads, then its v
//                   heads (the attention and rope ops' layout), + bias with qkv_bias, split the
//                   same way; self_attn.o_proj (C, C/t) row-parallel; post_attention_layernorm
//                   (C) replicated; mlp.gate_up_proj (2Il, C) column-parallel, rows this rank's
//                   gate then its up (the swiglu op's input order); mlp.down_proj (C, Il)
//                   row-parallel
//   last stage      ln_f.weight (C) (the final RMSNorm); output.weight (ceil(V/t), C)
//                   vocabulary-parallel when the head is untied (tie_word_embeddings false; HF's
//                   lm_head.weight, named apart from the pipeline's tied copy lm_head.weight),
//                   with p > 1 and a tied head lm_head.weight as GPT-2's
// I must divide over t, and n_kv_head must divide over t (KVl = n_kv_head/t) or be a divisor
// of t (check_tensor_parallel_shape). In the second case (n_kv_head < t) each key/value
// head is replicated over r = t/n_kv_head consecutive ranks, as Megatron-LM does: rank r' holds
// KVl = 1 head, kv head r'/r (the one its n_head/t query heads read), so the k and v rows of
// its qkv_proj (and bias) are a copy of the same rows the other r - 1 ranks hold
// (tp_global_index maps them all to one whole row). The copies stay bitwise equal: the model
// sums their weight gradients over the r ranks in W (each computes only its own query heads'
// part; BlockEnv::kv_group), and the gradient norm counts them on the first copy only
// (TensorSlot::norm_numel).

#include <string>

#include "tide/memory/chunk_layout.h"
#include "tide/model/config.h"

namespace tide {

struct RankCoords {
  int tp = 1;       // tensor-parallel degree
  int tp_rank = 0;  // this rank's index in its tp group
  int pp = 1;       // pipeline stages
  int stage = 0;    // this rank's stage
};

// Names of a transformer layer's 12 parameters, in declaration order.
extern const char* const kLayerParamNames[12];
// Where a transformer layer's parameter groups begin in kLayerParamNames
// (model/param_groups.h): ln_1 + attn.c_attn, attn.c_proj, ln_2 + mlp.c_fc, mlp.c_proj.
inline constexpr int kLayerGroupBegin[4] = {0, 4, 6, 10};
// The Llama family's layer parameters, in declaration order (qkv_proj.bias only with
// qkv_bias), and where its groups begin: input_layernorm + qkv_proj, o_proj,
// post_attention_layernorm + gate_up_proj, down_proj.
extern const char* const kLlamaLayerParamNames[7];
inline constexpr int kLlamaLayerGroupBegin[4] = {0, 3, 4, 6};

// Rows of the vocabulary-parallel token embedding on each of `tp` ranks.
int64_t vocab_rows_per_rank(const GPTConfig& config, int tp);

// The Llama family's key/value heads on each of `tp` ranks: n_kv_head/tp, or 1 when the heads
// are replicated (n_kv_head < tp); and the ranks that hold each one (1, or tp/n_kv_head).
int64_t kv_heads_per_rank(const GPTConfig& config, int tp);
int kv_head_replicas(const GPTConfig& config, int tp);
// Rows of qkv_proj on each of `tp` ranks: (n_head/tp + 2 kv_heads_per_rank) head_size.
int64_t qkv_rows_per_rank(const GPTConfig& config, int tp);

// Tensor parallelism: where element `i` (row-major) of this rank's tensor `name` sits in the
// unsharded (t = 1) tensor of the same name, or -1 for the padding rows of the vocabulary-
// parallel wte / lm_head (vocab_size rounded up to a multiple of t). The inverse of the
// sharding in make_layout: wte rows [r V_t, (r+1) V_t); c_attn rows q, k and v each
// [r C/t, (r+1) C/t) (the rank's heads); c_fc rows [r 4C/t, ..); the two c_proj columns
// [r C/t, ..) and [r 4C/t, ..); every other tensor whole. The Llama family: output.weight as
// wte; qkv_proj rows q, k and v heads each the rank's share (with replicated kv heads the k
// and v rows of kv head r/(t/n_kv_head): the same whole rows on each of its ranks, a many-to-one
// map); gate_up_proj rows gate and up [r Il, ..) each; o_proj and down_proj columns [r C/t, ..)
// and [r Il, ..). init_weights draws the single-rank values through it (so the copies of a kv
// head start equal), the checkpoint gathers (each copy writes the same whole rows) and scatters
// (each copy reads them) with it, and tests gather shards with it.
int64_t tp_global_index(const GPTConfig& config, RankCoords at, const std::string& name, int64_t i);
// Tensor parallelism: whether tensor `name` is split over the tp ranks (wte / lm_head.weight,
// c_attn, c_fc, the two c_proj weights) rather than held whole and bitwise equal on every tp
// rank (wpe, the layernorms, the two c_proj biases). The global gradient norm sums the first
// over the ranks and counts the second once. The Llama family: wte, output.weight and the
// layers' five matrices (and qkv bias) are split, the RMSNorm weights replicated. (Replicated
// kv rows of a sharded qkv_proj are counted once through TensorSlot::norm_numel.)
bool tp_sharded(const std::string& name);

// Throws a tide::Error naming the fix when the model does not divide over `tp` tensor-parallel
// ranks: the query heads, and for the Llama family the MLP width and the key/value heads
// (n_kv_head dividing tp, or tp dividing n_kv_head: each kv head replicated over tp/n_kv_head
// ranks).
void check_tensor_parallel_shape(const GPTConfig& config, int tp);

// The unpacked layout of rank `at`. Throws a tide::Error naming the fix when the model does
// not divide over tp or pp (heads, hidden size, layers).
ChunkLayout make_layout(const GPTConfig& config, RankCoords at = {});

}  // namespace tide

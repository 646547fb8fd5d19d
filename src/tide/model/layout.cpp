#include "tide/model/layout.h"

#include <algorithm>
#include <iterator>

#include "tide/core/error.h"

namespace tide {

const char* const kLayerParamNames[12] = {
    "ln_1.weight",        "ln_1.bias",        "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
    "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};

const char* const kLlamaLayerParamNames[7] = {
    "input_layernorm.weight",  "self_attn.qkv_proj.weight",       "self_attn.qkv_proj.bias",
    "self_attn.o_proj.weight", "post_attention_layernorm.weight", "mlp.gate_up_proj.weight",
    "mlp.down_proj.weight"};

int64_t vocab_rows_per_rank(const GPTConfig& config, int tp) {
  return (int64_t{config.vocab_size} + tp - 1) / tp;
}

int64_t kv_heads_per_rank(const GPTConfig& c, int tp) {
  return c.kv_heads() < tp ? 1 : c.kv_heads() / tp;
}

int kv_head_replicas(const GPTConfig& c, int tp) {
  return c.kv_heads() < tp ? tp / c.kv_heads() : 1;
}

int64_t qkv_rows_per_rank(const GPTConfig& c, int tp) {
  return (c.n_head / tp + 2 * kv_heads_per_rank(c, tp)) * c.head_size();
}

int64_t tp_global_index(const GPTConfig& c, RankCoords at, const std::string& name, int64_t i) {
  const int64_t t = at.tp, r = at.tp_rank, C = c.n_embd;
  if (t == 1) return i;
  if (name == "wte" || name == "lm_head.weight") {
    const int64_t row = r * vocab_rows_per_rank(c, at.tp) + i / C;
    return row < c.vocab_size ? row * C + i % C : -1;
  }
  if (name == "output.weight") {  // the untied Llama head: vocabulary-parallel as wte
    const int64_t row = r * vocab_rows_per_rank(c, at.tp) + i / C;
    return row < c.vocab_size ? row * C + i % C : -1;
  }
  auto is = [&](const char* suffix) { return name.ends_with(suffix); };
  if (c.is_llama()) {
    const int64_t HS = c.head_size(), NHl = c.n_head / t, KVl = kv_heads_per_rank(c, at.tp);
    const int64_t I = c.ffn_size(), Il = I / t;
    if (is("self_attn.qkv_proj.weight") || is("self_attn.qkv_proj.bias")) {
      // Rank rows: q heads [r NHl, ..), then k heads [kv0 KVl, ..), then v heads [kv0 KVl, ..),
      // each of HS rows, in the whole tensor's q | k | v blocks; kv0 = r, or with replicated
      // kv heads r / replicas (the copies of one kv head map to the same whole rows).
      const int64_t kv0 = r / kv_head_replicas(c, at.tp);
      const int64_t width = is(".weight") ? C : 1;  // elements per row
      const int64_t row = i / width, q = NHl * HS, kv = KVl * HS;
      const int64_t whole_row = row < q ? r * q + row
                                : row < q + kv
                                    ? c.n_head * HS + kv0 * kv + (row - q)
                                    : (c.n_head + c.kv_heads()) * HS + kv0 * kv + (row - q - kv);
      return whole_row * width + i % width;
    }
    if (is("mlp.gate_up_proj.weight")) {  // rows gate [r Il, ..), then up [I + r Il, ..)
      const int64_t row = i / C;
      return ((row < Il ? 0 : I - Il) + r * Il + row) * C + i % C;
    }
    if (is("self_attn.o_proj.weight") || is("mlp.down_proj.weight")) {  // (C, K/t) of (C, K)
      const int64_t cols = is("o_proj.weight") ? C / t : Il;
      return (i / cols) * cols * t + r * cols + i % cols;
    }
    return i;  // replicated: the RMSNorm weights
  }
  if (is("attn.c_attn.weight") || is("attn.c_attn.bias")) {
    const int64_t width = is(".weight") ? C : 1;  // elements per row
    const int64_t row = i / width, part = row / (C / t), within = row % (C / t);  // q, k or v
    return (part * C + r * (C / t) + within) * width + i % width;
  }
  if (is("mlp.c_fc.weight")) return r * (4 * C / t) * C + i;
  if (is("mlp.c_fc.bias")) return r * (4 * C / t) + i;
  if (is("c_proj.weight")) {  // (C, K/t) of (C, K): columns [r K/t, (r+1) K/t)
    const int64_t cols = is("mlp.c_proj.weight") ? 4 * C / t : C / t;
    return (i / cols) * cols * t + r * cols + i % cols;
  }
  return i;  // replicated
}

bool tp_sharded(const std::string& name) {
  for (const char* suffix :
       {"attn.c_attn.weight", "attn.c_attn.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
        "c_proj.weight", "self_attn.qkv_proj.weight", "self_attn.qkv_proj.bias",
        "self_attn.o_proj.weight", "mlp.gate_up_proj.weight", "mlp.down_proj.weight"})
    if (name.ends_with(suffix)) return true;
  return name == "wte" || name == "lm_head.weight" || name == "output.weight";
}

void check_tensor_parallel_shape(const GPTConfig& c, int tp) {
  TIDE_CHECK(c.n_head % tp == 0,
             "model.n_head {} does not divide over {} tensor-parallel ranks: each rank computes "
             "n_head/{} whole heads; pick a tensor_parallel.size that divides {}",
             c.n_head, tp, tp, c.n_head);
  if (!c.is_llama() || tp == 1) return;
  // Fewer key/value heads than ranks: each kv head replicated over tp/n_kv_head ranks
  // (Megatron-LM's rule), which needs whole copies: n_kv_head dividing tp. Then rank r's
  // query heads [r n_head/tp, ..) all read kv head r/(tp/n_kv_head): the n_head/n_kv_head
  // query heads of a kv head are n_head/tp on each of its tp/n_kv_head ranks (n_kv_head
  // divides n_head: GPTConfig::validate), so nothing more is to check.
  TIDE_CHECK(c.kv_heads() % tp == 0 || tp % c.kv_heads() == 0,
             "model.n_kv_head {} does not divide over {} tensor-parallel ranks and is not a "
             "divisor of {}: each rank holds n_kv_head/{} key/value heads or, with fewer "
             "key/value heads than ranks, one head replicated over tensor_parallel.size/n_kv_head "
             "ranks (Megatron-LM's rule); pick a tensor_parallel.size that divides {} or is a "
             "multiple of it",
             c.kv_heads(), tp, tp, tp, c.kv_heads());
  TIDE_CHECK(c.ffn_size() % tp == 0,
             "model.intermediate_size {} does not divide over {} tensor-parallel ranks: the "
             "SwiGLU MLP's gate, up and down projections are split evenly; pick a size that "
             "divides it",
             c.ffn_size(), tp);
}

namespace {

// The Llama family's layout (layout.h); make_layout has checked the coordinates and that
// the heads and the MLP divide over tp.
ChunkLayout make_llama_layout(const GPTConfig& c, RankCoords at) {
  const int64_t C = c.n_embd, t = at.tp, W = qkv_rows_per_rank(c, at.tp), I = c.ffn_size() / t;
  const Shape shapes[7] = {{C}, {W, C}, {W}, {C, C / t}, {C}, {2 * I, C}, {C, I}};
  const int64_t vocab_rows = vocab_rows_per_rank(c, at.tp);
  ChunkLayout layout;
  if (at.stage == 0) {
    layout.begin_unit();
    layout.add("wte", {vocab_rows, C}, true);
  }
  const int per_stage = c.n_layer / at.pp;
  for (int l = at.stage * per_stage; l < (at.stage + 1) * per_stage; ++l)
    for (int i = 0; i < 7; ++i) {
      if (i == 2 && !c.qkv_bias) continue;
      if (std::ranges::find(kLlamaLayerGroupBegin, i) != std::end(kLlamaLayerGroupBegin))
        layout.begin_unit();
      const int id = layout.add(fmt::format("h.{}.{}", l, kLlamaLayerParamNames[i]), shapes[i],
                                shapes[i].ndim >= 2);  // decay matrices, not biases or norms
      // Replicated kv heads: a copy other than a head's first counts only its q rows (the
      // first rows) in the gradient norm, so each kv row counts once over the tp ranks.
      if ((i == 1 || i == 2) && at.tp_rank % kv_head_replicas(c, at.tp) != 0)
        layout.set_norm_numel(id, c.n_head / t * c.head_size() * (i == 1 ? C : 1));
    }
  if (at.stage == at.pp - 1) {
    layout.begin_unit(/*own_chunk=*/true);
    layout.add("ln_f.weight", {C}, false);
    if (!c.tie_word_embeddings)
      layout.add("output.weight", {vocab_rows, C}, true);
    else if (at.pp > 1)
      layout.add("lm_head.weight", {vocab_rows, C}, true);
  }
  return layout;
}

}  // namespace

ChunkLayout make_layout(const GPTConfig& c, RankCoords at) {
  c.validate();
  TIDE_CHECK(at.tp >= 1 && at.tp_rank >= 0 && at.tp_rank < at.tp,
             "tensor-parallel rank {} is outside a group of {}", at.tp_rank, at.tp);
  TIDE_CHECK(at.pp >= 1 && at.stage >= 0 && at.stage < at.pp,
             "pipeline stage {} is outside {} stages", at.stage, at.pp);
  check_tensor_parallel_shape(c, at.tp);
  TIDE_CHECK(c.n_layer % at.pp == 0,
             "model.n_layer {} does not divide over {} pipeline stages; pick a stage count that "
             "divides it",
             c.n_layer, at.pp);
  if (c.is_llama()) return make_llama_layout(c, at);
  const int64_t C = c.n_embd, t = at.tp;
  const Shape layer_shapes[12] = {{C}, {C}, {3 * C / t, C}, {3 * C / t}, {C, C / t},     {C},
                                  {C}, {C}, {4 * C / t, C}, {4 * C / t}, {C, 4 * C / t}, {C}};
  const int64_t vocab_rows = vocab_rows_per_rank(c, at.tp);
  ChunkLayout layout;
  if (at.stage == 0) {
    layout.begin_unit();
    layout.add("wte", {vocab_rows, C}, true);
    layout.add("wpe", {c.max_seq_len, C}, true);
  }
  const int per_stage = c.n_layer / at.pp;
  for (int l = at.stage * per_stage; l < (at.stage + 1) * per_stage; ++l)
    for (int i = 0; i < 12; ++i) {
      if (std::ranges::find(kLayerGroupBegin, i) != std::end(kLayerGroupBegin)) layout.begin_unit();
      layout.add(fmt::format("h.{}.{}", l, kLayerParamNames[i]), layer_shapes[i],
                 layer_shapes[i].ndim >= 2);  // decay matrices, not biases or norms
    }
  if (at.stage == at.pp - 1) {
    layout.begin_unit(/*own_chunk=*/true);
    layout.add("ln_f.weight", {C}, false);
    layout.add("ln_f.bias", {C}, false);
    if (at.pp > 1) layout.add("lm_head.weight", {vocab_rows, C}, true);
  }
  return layout;
}

}  // namespace tide

// `tide export` of the Llama family (hf_export.h): tide's tensor names and fused layouts as
// transformers' LlamaForCausalLM / Qwen2ForCausalLM / MistralForCausalLM names, and their
// config.json. The inverse of hf_import_llama.cpp (a round trip is bitwise in f32).
#include <nlohmann/json.hpp>

#include "tide/checkpoint/hf_export.h"
#include "tide/core/error.h"

namespace tide {

using json = nlohmann::json;

std::vector<HfOutTensor> hf_llama_tensors(const GPTConfig& c, const std::string& name) {
  if (name == "wte") return {{"model.embed_tokens.weight", 0, c.vocab_size}};
  if (name == "ln_f.weight") return {{"model.norm.weight", 0, c.n_embd}};
  if (name == "output.weight") return {{"lm_head.weight", 0, c.vocab_size}};
  TIDE_CHECK(name.starts_with("h."), "tensor '{}' is not one of a Llama-family model", name);
  const size_t dot = name.find('.', 2);
  const std::string layer = "model.layers." + name.substr(2, dot - 2) + ".";
  const std::string rest = name.substr(dot + 1);
  // qkv_proj (W, C) rows: the n_head query heads, the key heads, the value heads (layout.h).
  const int64_t q = int64_t{c.n_head} * c.head_size(), kv = int64_t{c.kv_heads()} * c.head_size();
  if (rest == "self_attn.qkv_proj.weight" || rest == "self_attn.qkv_proj.bias") {
    const std::string kind = rest.substr(rest.rfind('.'));  // .weight or .bias
    return {{layer + "self_attn.q_proj" + kind, 0, q},
            {layer + "self_attn.k_proj" + kind, q, q + kv},
            {layer + "self_attn.v_proj" + kind, q + kv, q + 2 * kv}};
  }
  // gate_up_proj (2I, C) rows: gate, then up (the swiglu op's layout).
  const int64_t I = c.ffn_size();
  if (rest == "mlp.gate_up_proj.weight")
    return {{layer + "mlp.gate_proj.weight", 0, I}, {layer + "mlp.up_proj.weight", I, 2 * I}};
  // The norms, o_proj and down_proj keep HF's names, whole.
  const int64_t rows = rest == "mlp.down_proj.weight" || rest == "self_attn.o_proj.weight" ||
                               rest.ends_with("layernorm.weight")
                           ? c.n_embd
                           : -1;
  TIDE_CHECK(rows > 0, "tensor '{}' is not one of a Llama-family model", name);
  return {{layer + rest, 0, rows}};
}

std::string hf_llama_model_type(const GPTConfig& c, const std::string& requested) {
  // Qwen2 always has q/k/v biases; Llama's and Mistral's attention has none (Llama's
  // attention_bias would bias o_proj too, which tide's has not).
  if (requested.empty()) return c.qkv_bias ? "qwen2" : "llama";
  TIDE_CHECK(requested == "llama" || requested == "qwen2" || requested == "mistral",
             "export --architecture '{}': the Llama family is written as llama, qwen2 or mistral",
             requested);
  TIDE_CHECK(c.qkv_bias == (requested == "qwen2"),
             "export --architecture {}: the model {} q/k/v biases, which {}; export it as {}",
             requested, c.qkv_bias ? "has" : "has no",
             requested == "qwen2" ? "Qwen2 always has" : "Llama and Mistral have not",
             c.qkv_bias ? "qwen2" : "llama or mistral");
  return requested;
}

json hf_llama_config(const GPTConfig& c, const std::string& model_type, std::optional<int> bos_id,
                     std::optional<int> eos_id, DType dtype) {
  const std::string arch = model_type == "qwen2"     ? "Qwen2ForCausalLM"
                           : model_type == "mistral" ? "MistralForCausalLM"
                                                     : "LlamaForCausalLM";
  json j = {{"architectures", {arch}},
            {"model_type", model_type},
            {"vocab_size", c.vocab_size},
            {"hidden_size", c.n_embd},
            {"intermediate_size", c.ffn_size()},
            {"num_hidden_layers", c.n_layer},
            {"num_attention_heads", c.n_head},
            {"num_key_value_heads", c.kv_heads()},
            {"head_dim", c.head_size()},
            {"hidden_act", "silu"},
            {"max_position_embeddings", c.max_seq_len},
            {"rms_norm_eps", c.rms_norm_eps},
            {"rope_theta", c.rope_theta},
            {"tie_word_embeddings", c.tie_word_embeddings},
            {"attention_dropout", c.dropout},  // tide's only dropout in the family
            {"initializer_range", 0.02},
            {"use_cache", true},
            {"torch_dtype", dtype == DType::BF16 ? "bfloat16" : "float32"}};
  // rope_scaling as transformers 4 writes it (transformers 5 reads it into rope_parameters).
  if (c.rope_scaling == RopeScaling::llama3)
    j["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", c.rope_factor},
        {"low_freq_factor", c.rope_low_freq_factor},
        {"high_freq_factor", c.rope_high_freq_factor},
        {"original_max_position_embeddings", c.rope_original_max_position_embeddings}};
  else
    j["rope_scaling"] = nullptr;
  if (model_type == "llama") {
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
    j["pretraining_tp"] = 1;
  } else {
    // No window: attention over every position up to max_position_embeddings, as tide's.
    j["sliding_window"] = nullptr;
    if (model_type == "qwen2") {
      j["use_sliding_window"] = false;
      j["max_window_layers"] = c.n_layer;
    }
  }
  j["bos_token_id"] = bos_id ? json(*bos_id) : json(nullptr);
  j["eos_token_id"] = eos_id ? json(*eos_id) : json(nullptr);
  return j;
}

}  // namespace tide

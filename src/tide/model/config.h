#pragma once
// The shape of a model: GPT-2 (learned positions, LayerNorm, GELU MLP, tied head) or the Llama
// family (family llama: RoPE, RMSNorm, SwiGLU MLP, grouped-query attention, optional qkv bias
// and untied head; Llama 3, Qwen2, Mistral). Presets give the published sizes; any other shape
// can be spelled out. Parameters are counted the way the model lays them out (layout.h).

#include <cstdint>
#include <string>
#include <vector>

#include "tide/kernels/rope_freq.h"

namespace tide {

enum class ModelFamily { gpt2, llama };

// "gpt2" or "llama"; parse throws a tide::Error naming model.family and the choices.
ModelFamily parse_model_family(const std::string& s);
const char* model_family_name(ModelFamily f);

struct GPTConfig {
  int n_layer = 4;
  int n_head = 4;
  int n_embd = 128;
  int vocab_size = 2048;
  int max_seq_len = 128;
  float dropout = 0.0f;  // one rate for embedding, attention-probability and residual dropout

  // ---- family llama only (GPT-2 ignores these; their defaults are Llama 3's) ----
  ModelFamily family = ModelFamily::gpt2;
  int n_kv_head = 0;            // key/value heads (grouped-query attention); 0 = n_head
  int intermediate_size = 0;    // SwiGLU hidden width I; 0 = 4 n_embd
  double rope_theta = 10000.0;  // transformers' LlamaConfig default
  // rope_scaling: none, or llama3 with these four (transformers' rope_scaling fields).
  RopeScaling rope_scaling = RopeScaling::none;
  double rope_factor = 8.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int64_t rope_original_max_position_embeddings = 8192;
  double rms_norm_eps = 1e-5;
  bool tie_word_embeddings = true;
  bool qkv_bias = false;  // q/k/v projections with a bias (Qwen2)

  // "gpt2-124m" (alias "gpt2"), "gpt2-350m" ("gpt2-medium"), "gpt2-774m" ("gpt2-large"),
  // "gpt2-1.5b" ("gpt2-xl"); llama3.2-1b, llama3.2-3b, llama3.1-8b, qwen2.5-0.5b, qwen2.5-7b,
  // mistral-7b; throws a tide::Error listing the presets for anything else.
  static GPTConfig preset(const std::string& name);
  static std::vector<std::string> preset_names();

  bool is_llama() const { return family == ModelFamily::llama; }
  // The LM head is the token embedding (GPT-2 always; Llama with tie_word_embeddings).
  bool tied_head() const { return !is_llama() || tie_word_embeddings; }
  int head_size() const { return n_embd / n_head; }
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int64_t ffn_size() const { return intermediate_size > 0 ? intermediate_size : 4 * n_embd; }
  // Llama: the fused qkv row width (n_head + 2 n_kv_head) head_size.
  int64_t qkv_width() const { return int64_t{n_head + 2 * kv_heads()} * head_size(); }
  // RoPE's spec (head size and theta from the shape).
  RopeSpec rope_spec() const;
  // Parameters of one transformer block: GPT-2 12 C^2 + 13 C; Llama
  // C W (+ W with qkv bias) + C^2 + 3 C I + 2 C, W = qkv_width().
  int64_t block_parameters() const;
  // All parameters: GPT-2 V C + maxT C + L (12 C^2 + 13 C) + 2 C (LM head tied to the token
  // embedding); Llama V C + L block + C (+ V C for an untied head).
  int64_t num_parameters() const;
  // Throws a tide::Error naming the field and the fix when the shape is impossible.
  void validate() const;
  std::string str() const;  // "L=12 H=12 C=768 V=50257 T=1024 (124.4M params)"

  bool operator==(const GPTConfig&) const = default;
};

}  // namespace tide

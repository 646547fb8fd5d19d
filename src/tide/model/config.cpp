#include "tide/model/config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tide/core/error.h"

namespace tide {

ModelFamily parse_model_family(const std::string& s) {
  if (s == "gpt2") return ModelFamily::gpt2;
  if (s == "llama") return ModelFamily::llama;
  TIDE_FAIL(
      "model.family '{}' is not a model family tide knows; use gpt2, or llama (Llama 3, Qwen2, "
      "Mistral)",
      s);
}

const char* model_family_name(ModelFamily f) {
  return f == ModelFamily::llama ? "llama" : "gpt2";
}

namespace {

// A Llama-family preset: the published config.json's shape.
struct LlamaShape {
  int L, H, KV, C, I, V, T;
  double theta, eps;
  bool tied, bias;
  double llama3_factor;  // 0: no rope scaling
};

GPTConfig llama_preset(const LlamaShape& s) {
  GPTConfig c;
  c.family = ModelFamily::llama;
  c.n_layer = s.L;
  c.n_head = s.H;
  c.n_kv_head = s.KV;
  c.n_embd = s.C;
  c.intermediate_size = s.I;
  c.vocab_size = s.V;
  c.max_seq_len = s.T;
  c.rope_theta = s.theta;
  c.rms_norm_eps = s.eps;
  c.tie_word_embeddings = s.tied;
  c.qkv_bias = s.bias;
  if (s.llama3_factor > 0) {
    c.rope_scaling = RopeScaling::llama3;
    c.rope_factor = s.llama3_factor;
    c.rope_low_freq_factor = 1.0;
    c.rope_high_freq_factor = 4.0;
    c.rope_original_max_position_embeddings = 8192;
  }
  return c;
}

}  // namespace

GPTConfig GPTConfig::preset(const std::string& name) {
  auto make = [](int L, int H, int C) {
    GPTConfig c;
    c.n_layer = L;
    c.n_head = H;
    c.n_embd = C;
    c.vocab_size = 50257;
    c.max_seq_len = 1024;
    return c;
  };
  if (name == "gpt2-124m" || name == "gpt2") return make(12, 12, 768);
  if (name == "gpt2-350m" || name == "gpt2-medium") return make(24, 16, 1024);
  if (name == "gpt2-774m" || name == "gpt2-large") return make(36, 20, 1280);
  if (name == "gpt2-1.5b" || name == "gpt2-xl") return make(48, 25, 1600);
  // meta-llama/Llama-3.2-1B, -3B, Llama-3.1-8B; Qwen/Qwen2.5-0.5B, -7B;
  // mistralai/Mistral-7B-v0.1 (their config.json).
  if (name == "llama3.2-1b")
    return llama_preset({16, 32, 8, 2048, 8192, 128256, 131072, 500000, 1e-5, true, false, 32});
  if (name == "llama3.2-3b")
    return llama_preset({28, 24, 8, 3072, 8192, 128256, 131072, 500000, 1e-5, true, false, 32});
  if (name == "llama3.1-8b")
    return llama_preset({32, 32, 8, 4096, 14336, 128256, 131072, 500000, 1e-5, false, false, 8});
  if (name == "qwen2.5-0.5b")
    return llama_preset({24, 14, 2, 896, 4864, 151936, 32768, 1000000, 1e-6, true, true, 0});
  if (name == "qwen2.5-7b")
    return llama_preset({28, 28, 4, 3584, 18944, 152064, 131072, 1000000, 1e-6, false, true, 0});
  if (name == "mistral-7b")
    return llama_preset({32, 32, 8, 4096, 14336, 32000, 32768, 10000, 1e-5, false, false, 0});
  TIDE_FAIL("unknown model preset '{}'; use one of {} or give n_layer/n_head/n_embd explicitly",
            name, fmt::join(preset_names(), ", "));
}

std::vector<std::string> GPTConfig::preset_names() {
  return {"gpt2-124m",   "gpt2-350m",   "gpt2-774m",    "gpt2-1.5b",  "llama3.2-1b",
          "llama3.2-3b", "llama3.1-8b", "qwen2.5-0.5b", "qwen2.5-7b", "mistral-7b"};
}

RopeSpec GPTConfig::rope_spec() const {
  RopeSpec s;
  s.head_size = head_size();
  s.theta = rope_theta;
  s.type = rope_scaling;
  s.factor = rope_factor;
  s.low_freq_factor = rope_low_freq_factor;
  s.high_freq_factor = rope_high_freq_factor;
  s.original_max_position_embeddings = rope_original_max_position_embeddings;
  return s;
}

int64_t GPTConfig::block_parameters() const {
  const int64_t C = n_embd;
  if (!is_llama()) return 12 * C * C + 13 * C;
  const int64_t W = qkv_width();
  return C * W + (qkv_bias ? W : 0) + C * C + 3 * C * ffn_size() + 2 * C;
}

namespace {
// The parameter count in double: exact enough for messages, and no int64 overflow for the
// absurd shapes of damaged files (validate() refuses those before num_parameters() is used).
double approx_parameters(const GPTConfig& c) {
  const double C = c.n_embd;
  if (c.is_llama()) {
    const double W = double{1.0} * (c.n_head + 2.0 * c.kv_heads()) * c.head_size();
    const double I = c.intermediate_size > 0 ? c.intermediate_size : 4 * C;
    const double heads = c.tie_word_embeddings ? 1 : 2;
    return heads * c.vocab_size * C + C +
           c.n_layer * (C * W + (c.qkv_bias ? W : 0) + C * C + 3 * C * I + 2 * C);
  }
  return (double{1.0} * c.vocab_size + c.max_seq_len + 2) * C + c.n_layer * (12 * C * C + 13 * C);
}
}  // namespace

int64_t GPTConfig::num_parameters() const {
  const int64_t C = n_embd;
  if (is_llama())
    return int64_t{vocab_size} * C * (tie_word_embeddings ? 1 : 2) + n_layer * block_parameters() +
           C;
  return int64_t{vocab_size} * C + int64_t{max_seq_len} * C + n_layer * block_parameters() + 2 * C;
}

void GPTConfig::validate() const {
  TIDE_CHECK(n_layer >= 1, "model.n_layer must be at least 1 (got {})", n_layer);
  TIDE_CHECK(n_head >= 1, "model.n_head must be at least 1 (got {})", n_head);
  TIDE_CHECK(n_embd >= 1, "model.n_embd must be at least 1 (got {})", n_embd);
  TIDE_CHECK(n_embd % n_head == 0,
             "model.n_embd ({}) must be divisible by model.n_head ({}); pick a head count that "
             "divides it",
             n_embd, n_head);
  TIDE_CHECK(vocab_size >= 2, "model.vocab_size must be at least 2 (got {})", vocab_size);
  TIDE_CHECK(max_seq_len >= 1, "model.max_seq_len must be at least 1 (got {})", max_seq_len);
  TIDE_CHECK(dropout >= 0.0f && dropout < 1.0f, "model.dropout must be in [0, 1) (got {})",
             dropout);
  if (is_llama()) {
    TIDE_CHECK(n_kv_head >= 0 && kv_heads() <= n_head && n_head % kv_heads() == 0,
               "model.n_kv_head ({}) must divide model.n_head ({}) (grouped-query attention: "
               "n_head/n_kv_head query heads share a key/value head); use a divisor of n_head, "
               "or 0 for n_head",
               n_kv_head, n_head);
    TIDE_CHECK(head_size() % 2 == 0,
               "the head size n_embd/n_head = {} is odd; RoPE turns pairs of features: pick "
               "model.n_embd and model.n_head with an even quotient",
               head_size());
    TIDE_CHECK(intermediate_size >= 0,
               "model.intermediate_size must be at least 0 (got {}; 0 = 4 n_embd)",
               intermediate_size);
    TIDE_CHECK(rope_theta > 0, "model.rope_theta must be positive (got {})", rope_theta);
    TIDE_CHECK(rms_norm_eps > 0, "model.rms_norm_eps must be positive (got {})", rms_norm_eps);
    if (rope_scaling == RopeScaling::llama3) {
      TIDE_CHECK(rope_factor > 0, "model.rope_scaling.factor must be positive (got {})",
                 rope_factor);
      TIDE_CHECK(rope_low_freq_factor > 0 && rope_high_freq_factor > rope_low_freq_factor,
                 "model.rope_scaling.low_freq_factor ({}) must be positive and below "
                 "model.rope_scaling.high_freq_factor ({})",
                 rope_low_freq_factor, rope_high_freq_factor);
      TIDE_CHECK(rope_original_max_position_embeddings >= 1,
                 "model.rope_scaling.original_max_position_embeddings must be at least 1 (got "
                 "{})",
                 rope_original_max_position_embeddings);
    }
  }
  TIDE_CHECK(approx_parameters(*this) < 0x1p62,
             "model shape L={} C={} V={} T={} has about {:.3g} parameters, more than tide can "
             "count; use a smaller model",
             n_layer, n_embd, vocab_size, max_seq_len, approx_parameters(*this));
}

std::string GPTConfig::str() const {
  if (is_llama())
    return fmt::format("llama L={} H={} KV={} C={} I={} V={} T={}{} ({:.2f}M params)", n_layer,
                       n_head, kv_heads(), n_embd, ffn_size(), vocab_size, max_seq_len,
                       tie_word_embeddings ? "" : " untied", approx_parameters(*this) / 1e6);
  return fmt::format("L={} H={} C={} V={} T={} ({:.2f}M params)", n_layer, n_head, n_embd,
                     vocab_size, max_seq_len, approx_parameters(*this) / 1e6);
}

}  // namespace tide

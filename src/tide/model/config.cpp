#include "tide/model/config.h"

#include <fmt/format.h>

#include "tide/core/error.h"

namespace tide {

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
  TIDE_FAIL(
      "unknown model preset '{}'; use one of gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b "
      "or give n_layer/n_head/n_embd explicitly",
      name);
}

std::vector<std::string> GPTConfig::preset_names() {
  return {"gpt2-124m", "gpt2-350m", "gpt2-774m", "gpt2-1.5b"};
}

int64_t GPTConfig::block_parameters() const {
  const int64_t C = n_embd;
  return 12 * C * C + 13 * C;
}

namespace {
// The parameter count in double: exact enough for messages, and no int64 overflow for the
// absurd shapes of damaged files (validate() refuses those before num_parameters() is used).
double approx_parameters(const GPTConfig& c) {
  const double C = c.n_embd;
  return (double{1.0} * c.vocab_size + c.max_seq_len + 2) * C + c.n_layer * (12 * C * C + 13 * C);
}
}  // namespace

int64_t GPTConfig::num_parameters() const {
  const int64_t C = n_embd;
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
  TIDE_CHECK(approx_parameters(*this) < 0x1p62,
             "model shape L={} C={} V={} T={} has about {:.3g} parameters, more than tide can "
             "count; use a smaller model",
             n_layer, n_embd, vocab_size, max_seq_len, approx_parameters(*this));
}

std::string GPTConfig::str() const {
  return fmt::format("L={} H={} C={} V={} T={} ({:.2f}M params)", n_layer, n_head, n_embd,
                     vocab_size, max_seq_len, approx_parameters(*this) / 1e6);
}

}  // namespace tide

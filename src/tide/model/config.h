#pragma once
// The shape of a GPT-2 model. Presets give the four GPT-2 sizes; any other shape can be
// spelled out. Parameters are counted the way the model lays them out (see gpt.h).

#include <cstdint>
#include <string>
#include <vector>

namespace tide {

struct GPTConfig {
  int n_layer = 4;
  int n_head = 4;
  int n_embd = 128;
  int vocab_size = 2048;
  int max_seq_len = 128;
  float dropout = 0.0f;  // one rate for embedding, attention-probability and residual dropout

  // "gpt2-124m" (alias "gpt2"), "gpt2-350m" ("gpt2-medium"), "gpt2-774m" ("gpt2-large"),
  // "gpt2-1.5b" ("gpt2-xl"); throws a tide::Error listing the presets for anything else.
  static GPTConfig preset(const std::string& name);
  static std::vector<std::string> preset_names();

  int head_size() const { return n_embd / n_head; }
  // Parameters of one transformer block: 12 C^2 + 13 C.
  int64_t block_parameters() const;
  // All parameters, the LM head tied to the token embedding (not counted twice):
  // V C + maxT C + L (12 C^2 + 13 C) + 2 C.
  int64_t num_parameters() const;
  // Throws a tide::Error naming the field and the fix when the shape is impossible.
  void validate() const;
  std::string str() const;  // "L=12 H=12 C=768 V=50257 T=1024 (124.4M params)"

  bool operator==(const GPTConfig&) const = default;
};

}  // namespace tide

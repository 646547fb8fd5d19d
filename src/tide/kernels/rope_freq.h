#pragma once
// RoPE's inverse frequencies (the inv_freq tensor rope_forward/backward take), computed on the
// host as transformers' rope init functions compute them, so that an imported Llama rotates
// by the very angles transformers uses: `_compute_default_rope_parameters` (type none) and
// `_compute_llama3_parameters` (type llama3: Llama 3.1/3.2's frequency scaling).

#include <cstdint>
#include <vector>

namespace tide {

enum class RopeScaling { none, llama3 };

struct RopeSpec {
  int head_size = 64;      // HS; HS/2 frequencies
  double theta = 10000.0;  // rope_theta (the base)
  RopeScaling type = RopeScaling::none;
  // rope_scaling of type llama3 (config.json's rope_scaling / rope_parameters).
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

// inv_freq (HS/2), f32: theta^(-2i/HS) for i < HS/2, then the llama3 scaling if asked.
// Throws a tide::Error for an odd or non-positive head size, theta <= 0, or a llama3 spec with
// factor <= 0, low_freq_factor <= 0 or high_freq_factor <= low_freq_factor.
std::vector<float> rope_inv_freq(const RopeSpec& spec);

}  // namespace tide

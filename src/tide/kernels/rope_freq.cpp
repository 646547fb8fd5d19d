// rope_inv_freq: transformers' arithmetic, step by step in f32 (torch computes inv_freq as a
// float32 tensor). Each torch expression maps to one f32 operation here, with torch's own
// rewrites: `scalar / tensor` is `tensor.reciprocal() * scalar` (Tensor.__rdiv__), and a Python
// float scalar meets an f32 tensor as an f32 value. The power base^e is the one step whose
// library differs (torch: SLEEF's powf, within 1 ulp); it is rounded from double here, which
// tests/unit/kernels/test_rope.cpp checks against transformers' values.
#include "tide/kernels/rope_freq.h"

#include <cmath>
#include <numbers>

#include "tide/core/error.h"

namespace tide {

namespace {
// `scalar / x` as torch evaluates it for an f32 tensor x: reciprocal, then a multiply.
float rdiv(float scalar, float x) {
  const float r = 1.0f / x;
  return r * scalar;
}
}  // namespace

std::vector<float> rope_inv_freq(const RopeSpec& spec) {
  const int dim = spec.head_size;
  TIDE_CHECK(dim > 0 && dim % 2 == 0,
             "rope_inv_freq: head_size={} must be positive and even (RoPE rotates pairs)", dim);
  TIDE_CHECK(std::isfinite(spec.theta) && spec.theta > 0.0,
             "rope_inv_freq: rope_theta={} must be positive", spec.theta);
  // _compute_default_rope_parameters:
  //   1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
  const float base = static_cast<float>(spec.theta);
  std::vector<float> inv_freq(dim / 2);
  for (int i = 0; i < dim / 2; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    const float p = static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(e)));
    inv_freq[i] = rdiv(1.0f, p);
  }
  if (spec.type == RopeScaling::none) return inv_freq;

  // _compute_llama3_parameters.
  TIDE_CHECK(spec.factor > 0.0 && spec.low_freq_factor > 0.0 &&
                 spec.high_freq_factor > spec.low_freq_factor &&
                 spec.original_max_position_embeddings > 0,
             "rope_inv_freq: llama3 scaling needs factor > 0, 0 < low_freq_factor < "
             "high_freq_factor and original_max_position_embeddings > 0 (got factor={}, "
             "low_freq_factor={}, high_freq_factor={}, original_max_position_embeddings={})",
             spec.factor, spec.low_freq_factor, spec.high_freq_factor,
             spec.original_max_position_embeddings);
  const double old_context_len = static_cast<double>(spec.original_max_position_embeddings);
  const float factor = static_cast<float>(spec.factor);
  const float low = static_cast<float>(spec.low_freq_factor);
  // Python floats: old_context_len / low_freq_factor etc. in double, met by f32 tensors.
  const float low_freq_wavelen = static_cast<float>(old_context_len / spec.low_freq_factor);
  const float high_freq_wavelen = static_cast<float>(old_context_len / spec.high_freq_factor);
  const float two_pi = static_cast<float>(2 * std::numbers::pi);
  const float high_minus_low = static_cast<float>(spec.high_freq_factor - spec.low_freq_factor);
  const float old_len = static_cast<float>(old_context_len);
  for (float& f : inv_freq) {
    const float wavelen = rdiv(two_pi, f);  // 2 * math.pi / inv_freq
    // torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    const float llama = wavelen > low_freq_wavelen ? f / factor : f;
    // smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high - low)
    const float smooth = (rdiv(old_len, wavelen) - low) / high_minus_low;
    // (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    const float smoothed = (1.0f - smooth) * llama / factor + smooth * llama;
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    f = medium ? smoothed : llama;
  }
  return inv_freq;
}

}  // namespace tide

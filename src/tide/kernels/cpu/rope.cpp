// Rotary position embedding (RoPE) on a fused qkv row, Hugging Face's non-interleaved
// convention (rotate_half): in every q and k head the pairs (i, i + HS/2) turn by the angle
// pos * inv_freq[i], pos the sequence position t:
//   y[i] = x[i] cos - x[i+HS/2] sin,  y[i+HS/2] = x[i+HS/2] cos + x[i] sin;
// the v heads are copied. Why a separate op on the fused row: q and k come out of one qkv GEMM
// and go into attention in the same layout, so the rotation runs in place between them.
//
// Angles as transformers computes them: pos * inv_freq in f32, then f32 cos and sin. The
// backward turns the gradient by the negative angle (the transpose of the rotation).
#include <algorithm>
#include <cmath>
#include <vector>

#include "tide/kernels/cpu/cpu_ops.h"

namespace tide::cpu {

namespace {
// cos and sin of t * inv_freq[i] for t < T, i < H: (T,H) each.
void rope_table(std::vector<float>& cos_t, std::vector<float>& sin_t, const float* inv_freq, int T,
                int H) {
  cos_t.resize(static_cast<size_t>(T) * H);
  sin_t.resize(static_cast<size_t>(T) * H);
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < H; ++i) {
      const float angle = static_cast<float>(t) * inv_freq[i];
      cos_t[static_cast<size_t>(t) * H + i] = std::cos(angle);
      sin_t[static_cast<size_t>(t) * H + i] = std::sin(angle);
    }
  }
}
}  // namespace

// Each (b,t) row is one work item, written by one thread: thread-count independent.
void rope_forward(float* out, const float* inp, const float* inv_freq, int B, int T, int NH,
                  int NKV, int HS) {
  const int H = HS / 2, W = (NH + 2 * NKV) * HS, rotated = (NH + NKV) * HS;
  std::vector<float> cos_t, sin_t;
  rope_table(cos_t, sin_t, inv_freq, T, H);
  const int64_t rows = static_cast<int64_t>(B) * T;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int t = static_cast<int>(r % T);
    const float* c = cos_t.data() + static_cast<size_t>(t) * H;  // (H)
    const float* s = sin_t.data() + static_cast<size_t>(t) * H;  // (H)
    const float* x = inp + r * W;                                // (W)
    float* y = out + r * W;                                      // (W), may be x
    for (int h0 = 0; h0 < rotated; h0 += HS) {
      for (int i = 0; i < H; ++i) {
        const float x1 = x[h0 + i], x2 = x[h0 + H + i];
        y[h0 + i] = x1 * c[i] - x2 * s[i];
        y[h0 + H + i] = x2 * c[i] + x1 * s[i];
      }
    }
    if (y != x) std::copy(x + rotated, x + W, y + rotated);  // v
  }
}

void rope_backward(float* dinp, const float* dout, const float* inv_freq, int B, int T, int NH,
                   int NKV, int HS) {
  const int H = HS / 2, W = (NH + 2 * NKV) * HS, rotated = (NH + NKV) * HS;
  std::vector<float> cos_t, sin_t;
  rope_table(cos_t, sin_t, inv_freq, T, H);
  const int64_t rows = static_cast<int64_t>(B) * T;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int t = static_cast<int>(r % T);
    const float* c = cos_t.data() + static_cast<size_t>(t) * H;
    const float* s = sin_t.data() + static_cast<size_t>(t) * H;
    const float* dy = dout + r * W;
    float* dx = dinp + r * W;
    for (int h0 = 0; h0 < rotated; h0 += HS) {
      for (int i = 0; i < H; ++i) {
        const float g1 = dy[h0 + i], g2 = dy[h0 + H + i];
        dx[h0 + i] += g1 * c[i] + g2 * s[i];
        dx[h0 + H + i] += g2 * c[i] - g1 * s[i];
      }
    }
    for (int j = rotated; j < W; ++j) dx[j] += dy[j];  // v
  }
}

}  // namespace tide::cpu

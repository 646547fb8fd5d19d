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

namespace {
// Every (b,t) row turned: forward y = R x (written; y may be x), backward dx += R^T dy (the
// turn by the negative angle, added). Each row is one work item, written by one thread:
// thread-count independent.
template <bool kBackward>
void rope_rows(float* y, const float* x, const float* inv_freq, int B, int T, int NH, int NKV,
               int HS) {
  const int H = HS / 2, W = (NH + 2 * NKV) * HS, rotated = (NH + NKV) * HS;
  std::vector<float> cos_t, sin_t;
  rope_table(cos_t, sin_t, inv_freq, T, H);
  const int64_t rows = static_cast<int64_t>(B) * T;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int t = static_cast<int>(r % T);
    const float* c = cos_t.data() + static_cast<size_t>(t) * H;  // (H)
    const float* s = sin_t.data() + static_cast<size_t>(t) * H;  // (H)
    const float* xr = x + r * W;                                 // (W)
    float* yr = y + r * W;                                       // (W)
    for (int h0 = 0; h0 < rotated; h0 += HS) {
      for (int i = 0; i < H; ++i) {
        const float x1 = xr[h0 + i], x2 = xr[h0 + H + i];
        // The backward's sin is negated: a - (-b) is a + b exactly.
        const float si = kBackward ? -s[i] : s[i];
        const float y1 = x1 * c[i] - x2 * si, y2 = x2 * c[i] + x1 * si;
        if (kBackward) {
          yr[h0 + i] += y1;
          yr[h0 + H + i] += y2;
        } else {
          yr[h0 + i] = y1;
          yr[h0 + H + i] = y2;
        }
      }
    }
    if (kBackward)
      for (int j = rotated; j < W; ++j) yr[j] += xr[j];  // v
    else if (yr != xr)
      std::copy(xr + rotated, xr + W, yr + rotated);  // v
  }
}
}  // namespace

void rope_forward(float* out, const float* inp, const float* inv_freq, int B, int T, int NH,
                  int NKV, int HS) {
  rope_rows<false>(out, inp, inv_freq, B, T, NH, NKV, HS);
}

void rope_backward(float* dinp, const float* dout, const float* inv_freq, int B, int T, int NH,
                   int NKV, int HS) {
  rope_rows<true>(dinp, dout, inv_freq, B, T, NH, NKV, HS);
}

}  // namespace tide::cpu

// LayerNorm over the last dimension (llm.c's layernorm_forward/backward), with the backward
// split into the input gradient (B) and the weight gradient (W).
#include <algorithm>
#include <cmath>
#include <vector>

#include "tide/kernels/cpu/cpu_ops.h"

namespace tide::cpu {

namespace {
constexpr float kEps = 1e-5f;
// Channels per work item of the weight gradient (a contiguous slice of every row).
constexpr int kChannelBlock = 64;
}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;  // (C)
    // Mean and variance in double: two passes, so no cancellation of E[x^2] - E[x]^2.
    double sum = 0.0;
    for (int c = 0; c < C; ++c) sum += x[c];
    const double m = sum / C;
    double sq = 0.0;
    for (int c = 0; c < C; ++c) {
      const double d = x[c] - m;
      sq += d * d;
    }
    const float mf = static_cast<float>(m);
    const float s = static_cast<float>(1.0 / std::sqrt(sq / C + kEps));
    float* y = out + n * C;
    for (int c = 0; c < C; ++c) y[c] = (x[c] - mf) * s * weight[c] + bias[c];
    mean[n] = mf;
    rstd[n] = s;
  }
}

// With xhat = (x - mean) * rstd and g = dout * weight, the input gradient is
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
void layernorm_backward_input(float* dinp, const float* dout, const float* inp, const float* weight,
                              const float* mean, const float* rstd, int64_t N, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    const float* dy = dout + n * C;
    float* dx = dinp + n * C;
    const float m = mean[n], s = rstd[n];
    float g_mean = 0.0f, gx_mean = 0.0f;
    for (int c = 0; c < C; ++c) {
      const float xhat = (x[c] - m) * s;
      const float g = dy[c] * weight[c];
      g_mean += g;
      gx_mean += g * xhat;
    }
    g_mean /= C;
    gx_mean /= C;
    for (int c = 0; c < C; ++c) {
      const float xhat = (x[c] - m) * s;
      const float g = dy[c] * weight[c];
      dx[c] += (g - g_mean - xhat * gx_mean) * s;
    }
  }
}

void layernorm_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* mean, const float* rstd, int64_t N, int C) {
  const int n_blocks = (C + kChannelBlock - 1) / kChannelBlock;
  // Each channel block sums its column slices over rows 0..N-1 in order (thread-count
  // independent), into a local buffer that is added to the gradient once.
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < n_blocks; ++blk) {
    const int c0 = blk * kChannelBlock, c1 = std::min(C, c0 + kChannelBlock);
    float dw[kChannelBlock] = {}, db[kChannelBlock] = {};
    for (int64_t n = 0; n < N; ++n) {
      const float* x = inp + n * C;
      const float* dy = dout + n * C;
      const float m = mean[n], s = rstd[n];
      for (int c = c0; c < c1; ++c) {
        dw[c - c0] += dy[c] * ((x[c] - m) * s);
        db[c - c0] += dy[c];
      }
    }
    for (int c = c0; c < c1; ++c) {
      dweight[c] += dw[c - c0];
      dbias[c] += db[c - c0];
    }
  }
}

}  // namespace tide::cpu

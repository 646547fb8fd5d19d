// RMSNorm over the last dimension (Llama's LlamaRMSNorm: no mean, no bias), with the backward
// split into the input gradient (B) and the weight gradient (W) as layernorm's is.
//   rstd = 1 / sqrt(mean(x^2) + eps),  out = x * rstd * weight
// Why its own kernel and not layernorm with a zero mean: the statistics differ (no mean is
// saved) and the backward drops the mean terms.
#include <algorithm>
#include <cmath>

#include "tide/kernels/cpu/cpu_ops.h"
#include "tide/kernels/cpu/simd.h"

namespace tide::cpu {

namespace {
// Channels per work item of the weight gradient (a contiguous slice of every row).
constexpr int kRmsChannelBlock = 64;

// Adds the squares of the 8 lanes of x, in double, to two 4-lane accumulators.
inline void add_squares_double(v8f x, v4d& lo, v4d& hi) {
  const v4d a = low4d(x), b = high4d(x);
  lo += a * a;
  hi += b * b;
}
}  // namespace

// The mean square in double (8 lanes, the last partial group zero-padded, added in a fixed
// tree), so rstd is the f32 rounding of an almost exact value.
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int C, float eps) {
  const int C8 = C - C % 8;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;  // (C)
    v4d lo = {}, hi = {};
    for (int c = 0; c < C8; c += 8) add_squares_double(load8(x + c), lo, hi);
    if (C8 < C) add_squares_double(load_partial(x + C8, C - C8), lo, hi);
    const double sq = hsum4d(lo, hi);
    const float s = static_cast<float>(1.0 / std::sqrt(sq / C + static_cast<double>(eps)));
    float* y = out + n * C;
    for (int c = 0; c < C; ++c) y[c] = x[c] * s * weight[c];
    rstd[n] = s;
  }
}

// With xhat = x * rstd and g = dout * weight, the input gradient is
//   dx = rstd * (g - xhat * mean(g * xhat)).
void rmsnorm_backward_input(float* dinp, const float* dout, const float* inp, const float* weight,
                            const float* rstd, int64_t N, int C) {
  const int C8 = C - C % 8;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    const float* dy = dout + n * C;
    float* dx = dinp + n * C;
    const v8f s = splat(rstd[n]);
    v8f gx_acc = splat(0.0f);
    for (int c = 0; c < C8; c += 8)
      gx_acc += load8(dy + c) * load8(weight + c) * (load8(x + c) * s);
    if (C8 < C) {
      const int r = C - C8;
      gx_acc += load_partial(dy + C8, r) * load_partial(weight + C8, r) *
                (load_partial(x + C8, r) * s);  // 0 past C
    }
    const float gx_mean = hsum8(gx_acc) / C;
    const float sf = rstd[n];
    for (int c = 0; c < C; ++c) {
      const float xhat = x[c] * sf;
      const float g = dy[c] * weight[c];
      dx[c] += (g - xhat * gx_mean) * sf;
    }
  }
}

void rmsnorm_backward_weight(float* dweight, const float* dout, const float* inp, const float* rstd,
                             int64_t N, int C) {
  const int n_blocks = (C + kRmsChannelBlock - 1) / kRmsChannelBlock;
  // Each channel block sums its column slices over rows 0..N-1 in order (thread-count
  // independent), into a local buffer that is added to the gradient once.
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < n_blocks; ++blk) {
    const int c0 = blk * kRmsChannelBlock, c1 = std::min(C, c0 + kRmsChannelBlock);
    float dw[kRmsChannelBlock] = {};
    for (int64_t n = 0; n < N; ++n) {
      const float* x = inp + n * C;
      const float* dy = dout + n * C;
      const float s = rstd[n];
      for (int c = c0; c < c1; ++c) dw[c - c0] += dy[c] * (x[c] * s);
    }
    for (int c = c0; c < c1; ++c) dweight[c] += dw[c - c0];
  }
}

}  // namespace tide::cpu

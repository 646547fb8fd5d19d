// LayerNorm over the last dimension (llm.c's layernorm_forward/backward), with the backward
// split into the input gradient (B) and the weight gradient (W).
#include <algorithm>
#include <cmath>
#include <vector>

#include "tide/kernels/cpu/cpu_ops.h"
#include "tide/kernels/cpu/simd.h"

namespace tide::cpu {

namespace {
constexpr float kEps = 1e-5f;
// Channels per work item of the weight gradient (a contiguous slice of every row, one cache
// line): C = 192 makes 12 items, enough to keep the threads even (64 made 3).
constexpr int kChannelBlock = 16;
}  // namespace

namespace {
// Adds the 8 lanes of x to two 4-lane double accumulators.
inline void add_to_double(v8f x, v4d& lo, v4d& hi) {
  lo += low4d(x);
  hi += high4d(x);
}
}  // namespace

// Rows are vectorised 8 channels at a time (sums in 8 double lanes added in a fixed tree);
// the last partial group of a row is padded with zeros for the mean and added lane by lane to
// the variance.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int C) {
  const int C8 = C - C % 8;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;  // (C)
    // Mean and variance in double: two passes, so no cancellation of E[x^2] - E[x]^2. The
    // deviations x - mean are formed in double (each float is exact in double).
    v4d lo = {}, hi = {};
    for (int c = 0; c < C8; c += 8) add_to_double(load8(x + c), lo, hi);
    if (C8 < C) add_to_double(load_partial(x + C8, C - C8), lo, hi);
    const double m = hsum4d(lo, hi) / C;
    const v4d mv = {m, m, m, m};
    v4d sq_lo = {}, sq_hi = {};
    auto add_squares = [&](v8f xv) {
      const v4d d_lo = low4d(xv) - mv;
      const v4d d_hi = high4d(xv) - mv;
      sq_lo += d_lo * d_lo;
      sq_hi += d_hi * d_hi;
    };
    for (int c = 0; c < C8; c += 8) add_squares(load8(x + c));
    for (int c = C8; c < C; ++c) {
      const double d = x[c] - m;
      sq_lo[0] += d * d;
    }
    const double sq = hsum4d(sq_lo, sq_hi);
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
// The two row sums run in 8 lanes (zero-padded tail), added in a fixed tree.
void layernorm_backward_input(float* dinp, const float* dout, const float* inp, const float* weight,
                              const float* mean, const float* rstd, int64_t N, int C) {
  const int C8 = C - C % 8;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    const float* dy = dout + n * C;
    float* dx = dinp + n * C;
    const v8f m = splat(mean[n]), s = splat(rstd[n]);
    v8f g_acc = splat(0.0f), gx_acc = splat(0.0f);
    for (int c = 0; c < C8; c += 8) {
      const v8f xhat = (load8(x + c) - m) * s;
      const v8f g = load8(dy + c) * load8(weight + c);
      g_acc += g;
      gx_acc += g * xhat;
    }
    if (C8 < C) {
      const int r = C - C8;
      const v8f xhat = (load_partial(x + C8, r) - m) * s;
      const v8f g = load_partial(dy + C8, r) * load_partial(weight + C8, r);  // 0 past C
      g_acc += g;
      gx_acc += g * xhat;
    }
    const float g_mean = hsum8(g_acc) / C;
    const float gx_mean = hsum8(gx_acc) / C;
    const float mf = mean[n], sf = rstd[n];
    for (int c = 0; c < C; ++c) {
      const float xhat = (x[c] - mf) * sf;
      const float g = dy[c] * weight[c];
      dx[c] += (g - g_mean - xhat * gx_mean) * sf;
    }
  }
}

void layernorm_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* mean, const float* rstd, int64_t N, int C) {
  const int n_blocks = (C + kChannelBlock - 1) / kChannelBlock;
  // Each channel block sums its column slices over rows 0..N-1 in order (thread-count
  // independent), into local sums that are added to the gradient once. A full block's
  // channels go 8 at a time (the same operations per channel as the tail's scalar loop).
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < n_blocks; ++blk) {
    const int c0 = blk * kChannelBlock, c1 = std::min(C, c0 + kChannelBlock);
    if (c1 - c0 == kChannelBlock) {
      constexpr int kVecs = kChannelBlock / 8;
      v8f dw[kVecs] = {}, db[kVecs] = {};
      for (int64_t n = 0; n < N; ++n) {
        const float* x = inp + n * C + c0;
        const float* dy = dout + n * C + c0;
        const v8f m = splat(mean[n]), s = splat(rstd[n]);
        for (int j = 0; j < kVecs; ++j) {
          const v8f d = load8(dy + 8 * j);
          dw[j] += d * ((load8(x + 8 * j) - m) * s);
          db[j] += d;
        }
      }
      for (int j = 0; j < kVecs; ++j) {
        store8(dweight + c0 + 8 * j, load8(dweight + c0 + 8 * j) + dw[j]);
        store8(dbias + c0 + 8 * j, load8(dbias + c0 + 8 * j) + db[j]);
      }
      continue;
    }
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

// Element-wise ops: GELU, residual add, inverted dropout. Why here: each is one pass over
// memory with no reduction, so one OpenMP loop per op is the whole kernel.
#include <algorithm>
#include <cmath>

#include "tide/kernels/cpu/cpu_ops.h"
#include "tide/kernels/cpu/dropout_mask.h"
#include "tide/kernels/cpu/simd.h"

namespace tide::cpu {

namespace {
const float kGeluScale = std::sqrt(2.0f / static_cast<float>(M_PI));
// Columns of one row drawn at a time by dropout (a multiple of 4: one Philox call yields 4).
constexpr int64_t kDropoutBlock = 1024;

// tanh(u) = 1 - 2 / (1 + exp(2u)), 8 lanes at a time with simd.h's exp: glibc's tanhf
// costs ~50 ns here and expf 3.7 ns against 0.6 ns per lane for exp8, and GELU is applied to
// every element of the MLP's (N, 4C) activation. The absolute difference from tanhf is below
// 2e-7 (1.8e-7 over u in [-20, 20] in steps of 1e-4); exp overflowing to inf for large u gives
// exactly 1, and underflowing to 0 for very negative u exactly -1.
inline v8f tanh_via_exp(v8f u) {
  return splat(1.0f) - splat(2.0f) / (splat(1.0f) + exp8(splat(2.0f) * u));
}

// u = sqrt(2/pi) (x + 0.044715 x^3) and tanh(u).
inline v8f gelu_tanh(v8f x) {
  const v8f u = splat(kGeluScale) * (x + splat(0.044715f) * x * x * x);
  return tanh_via_exp(u);
}

// gelu(x) = 0.5 x (1 + tanh(u))  (GPT-2's tanh form)
inline v8f gelu8(v8f x) {
  return splat(0.5f) * x * (splat(1.0f) + gelu_tanh(x));
}

// dinp += gelu'(x) * dout, with
// gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// (sech^2 = 1 - tanh^2 instead of 1/cosh^2, which overflows for large |u|).
inline v8f gelu_backward8(v8f dinp, v8f dout, v8f x) {
  const v8f th = gelu_tanh(x);
  const v8f local = splat(0.5f) * (splat(1.0f) + th) +
                    splat(0.5f) * x * (splat(1.0f) - th * th) * splat(kGeluScale) *
                        (splat(1.0f) + splat(3.0f * 0.044715f) * x * x);
  return dinp + local * dout;
}

// Element-wise loops are split into blocks of kBlock elements, one OpenMP work item each:
// every element gets the same arithmetic whatever the thread count (the last partial group of
// 8 is padded, and exp8's lanes are independent).
constexpr int64_t kBlock = 4096;
}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t end = std::min(n, (blk + 1) * kBlock);
    int64_t i = blk * kBlock;
    for (; i + 8 <= end; i += 8) store8(out + i, gelu8(load8(inp + i)));
    if (i < end) store_partial(out + i, gelu8(load_partial(inp + i, end - i)), end - i);
  }
}

void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t end = std::min(n, (blk + 1) * kBlock);
    int64_t i = blk * kBlock;
    for (; i + 8 <= end; i += 8)
      store8(dinp + i, gelu_backward8(load8(dinp + i), load8(dout + i), load8(inp + i)));
    if (i < end) {
      const int r = static_cast<int>(end - i);
      store_partial(dinp + i,
                    gelu_backward8(load_partial(dinp + i, r), load_partial(dout + i, r),
                                   load_partial(inp + i, r)),
                    r);
    }
  }
}

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void residual_backward(float* da, float* db, const float* dout, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

// Dropout runs row by row: the counters of row (b,t) are contiguous, so each row is drawn in
// pieces of kDropoutBlock columns with four numbers per Philox call. Rows are independent and
// each is written by one thread, so the result does not depend on the thread count.
namespace {
// y = x * mask (kAccumulate: y += x * mask) over (B,T,W).
template <bool kAccumulate>
void dropout_rows(float* y, const float* x, int64_t B, int64_t T, int64_t W,
                  const DropoutSpec& dropout) {
  const int64_t rows = B * T;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const uint64_t first = dropout_row_counter(dropout, T, W, r / T, r % T);
    float* yr = y + r * W;        // (W)
    const float* xr = x + r * W;  // (W)
    float mult[kDropoutBlock];
    for (int64_t j0 = 0; j0 < W; j0 += kDropoutBlock) {
      const int64_t len = std::min(kDropoutBlock, W - j0);
      dropout_multipliers(dropout, first + static_cast<uint64_t>(j0), len, mult);
      for (int64_t j = 0; j < len; ++j) {
        if constexpr (kAccumulate) {
          yr[j0 + j] += xr[j0 + j] * mult[j];
        } else {
          yr[j0 + j] = xr[j0 + j] * mult[j];
        }
      }
    }
  }
}
}  // namespace

void dropout_forward(float* out, const float* inp, int64_t B, int64_t T, int64_t W,
                     const DropoutSpec& dropout) {
  if (!dropout.enabled()) {
    if (out != inp) {
      const int64_t n = B * T * W;
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) out[i] = inp[i];
    }
    return;
  }
  dropout_rows<false>(out, inp, B, T, W, dropout);
}

void dropout_backward(float* dinp, const float* dout, int64_t B, int64_t T, int64_t W,
                      const DropoutSpec& dropout) {
  if (!dropout.enabled()) {
    residual_forward(dinp, dinp, dout, B * T * W);  // dinp += dout
    return;
  }
  dropout_rows<true>(dinp, dout, B, T, W, dropout);
}

}  // namespace tide::cpu

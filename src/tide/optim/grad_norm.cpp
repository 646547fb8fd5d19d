#include "tide/optim/grad_norm.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "tide/core/error.h"

namespace tide {
namespace {

inline double widen(float x) {
  return x;
}
inline double widen(bf16 x) {
  return bf16_to_f32(x.bits);
}
inline double widen(f16 x) {
  return f16_to_f32(x.bits);
}

// Sum of squares of x[0..n), n <= kNormBlock, in a fixed order: lane j of 8 accumulators
// takes elements j, j+8, j+16, ...; the lanes are then combined pairwise.
template <typename T>
double block_sum(const T* x, int64_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) {
      const double d = widen(x[i + j]);
      acc[j] += d * d;
    }
  for (int j = 0; i + j < n; ++j) {
    const double d = widen(x[i + j]);
    acc[j] += d * d;
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

double block_sum(const GradBuffer& b, int64_t begin, int64_t n) {
  switch (b.dtype) {
    case DType::F32:
      return block_sum(static_cast<const float*>(b.data) + begin, n);
    case DType::BF16:
      return block_sum(static_cast<const bf16*>(b.data) + begin, n);
    case DType::F16:
      return block_sum(static_cast<const f16*>(b.data) + begin, n);
    default:
      break;
  }
  TIDE_FAIL("gradient norm of dtype {} is not supported; use f32, bf16 or f16",
            dtype_name(b.dtype));
}

}  // namespace

double grad_norm_squared(std::span<const GradBuffer> buffers, int threads) {
  if (threads <= 0) threads = omp_get_max_threads();
  // Global block list: (buffer, first element). Block sums land in a fixed slot each.
  std::vector<std::pair<int, int64_t>> blocks;
  for (size_t bi = 0; bi < buffers.size(); ++bi) {
    const GradBuffer& b = buffers[bi];
    TIDE_CHECK(b.n >= 0 && (b.n == 0 || b.data),
               "gradient buffer {} has n = {} and data {}; give n >= 0 elements and a pointer", bi,
               b.n, b.data ? "set" : "null");
    TIDE_CHECK(b.dtype == DType::F32 || b.dtype == DType::BF16 || b.dtype == DType::F16,
               "gradient buffer {} has dtype {}; the gradient norm supports f32, bf16 and f16", bi,
               dtype_name(b.dtype));
    for (int64_t s = 0; s < b.n; s += kNormBlock) blocks.emplace_back(static_cast<int>(bi), s);
  }
  std::vector<double> sums(blocks.size());
  const int64_t nb = static_cast<int64_t>(blocks.size());
#pragma omp parallel for schedule(static) num_threads(threads) if (nb > 8)
  for (int64_t j = 0; j < nb; ++j) {
    const GradBuffer& b = buffers[blocks[j].first];
    const int64_t s = blocks[j].second;
    sums[j] = block_sum(b, s, std::min(kNormBlock, b.n - s));
  }
  double total = 0.0;
  for (double x : sums) total += x;
  return total;
}

double grad_norm_squared(const void* data, DType dtype, int64_t n, int threads) {
  const GradBuffer b{data, dtype, n};
  return grad_norm_squared(std::span<const GradBuffer>(&b, 1), threads);
}

float clip_coefficient(double total_norm, double max_norm) {
  TIDE_CHECK(max_norm > 0.0 && std::isfinite(max_norm),
             "gradient clipping max_norm = {} must be finite and > 0; use e.g. 1.0, or turn "
             "clipping off",
             max_norm);
  TIDE_CHECK(std::isfinite(total_norm) && total_norm >= 0.0,
             "gradient norm {} is not finite: a gradient overflowed or is NaN; skip this step "
             "(the loss scaler does) instead of clipping it",
             total_norm);
  return static_cast<float>(std::min(1.0, max_norm / (total_norm + 1e-6)));
}

}  // namespace tide

#include "tide/kernels/cpu/f32_buffer.h"

namespace tide::cpu {

namespace {

// Conversions are cheap per element: split only tensors large enough to pay for the threads.
constexpr int64_t kParallelFrom = 1 << 16;

// dst = src widened to f32, src bf16 or f16. One loop per dtype: the bf16 one vectorises (the
// f16 conversion is a function call).
void widen(float* dst, const Tensor& src) {
  const int64_t n = src.numel();
  const uint16_t* s = src.u16();
  if (src.dtype == DType::BF16) {
#pragma omp parallel for simd if (n >= kParallelFrom)
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
    return;
  }
#pragma omp parallel for if (n >= kParallelFrom)
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
}

// dst (bf16 or f16) = src rounded to nearest-even.
void narrow(const Tensor& dst, const float* src) {
  const int64_t n = dst.numel();
  uint16_t* d = dst.u16();
  if (dst.dtype == DType::BF16) {
#pragma omp parallel for simd if (n >= kParallelFrom)
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
    return;
  }
#pragma omp parallel for if (n >= kParallelFrom)
  for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
}

}  // namespace

F32Buffer::F32Buffer(const Tensor& t, bool widen_it) : t_(t) {
  if (!t.defined()) return;
  if (t.dtype == DType::F32) {
    p_ = t.f32();
    return;
  }
  TIDE_ASSERT(t.dtype == DType::BF16 || t.dtype == DType::F16);
  // Widened: every element is written, so the copy need not be zeroed first.
  const auto n = static_cast<size_t>(t.numel());
  copy_ = widen_it ? std::make_unique_for_overwrite<float[]>(n) : std::make_unique<float[]>(n);
  p_ = copy_.get();
  if (widen_it) widen(p_, t);
}

void F32Buffer::store() const {
  if (copy_) narrow(t_, p_);
}

}  // namespace tide::cpu

#include "tide/kernels/cpu/f32_buffer.h"

namespace tide::cpu {

namespace {
// Conversions are cheap per element: split only tensors large enough to pay for the threads.
constexpr int64_t kParallelFrom = 1 << 16;
}  // namespace

void widen_to_f32(float* dst, const Tensor& src) {
  const int64_t n = src.numel();
  if (src.dtype == DType::F32) {
    const float* s = src.f32();
#pragma omp parallel for simd if (n >= kParallelFrom)
    for (int64_t i = 0; i < n; ++i) dst[i] = s[i];
    return;
  }
  const uint16_t* s = src.u16();
  if (src.dtype == DType::BF16) {
#pragma omp parallel for simd if (n >= kParallelFrom)
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
  } else {
    TIDE_ASSERT(src.dtype == DType::F16);
#pragma omp parallel for if (n >= kParallelFrom)
    for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
  }
}

void round_from_f32(const Tensor& dst, const float* src) {
  const int64_t n = dst.numel();
  if (dst.dtype == DType::F32) {
    float* d = dst.f32();
#pragma omp parallel for simd if (n >= kParallelFrom)
    for (int64_t i = 0; i < n; ++i) d[i] = src[i];
    return;
  }
  uint16_t* d = dst.u16();
  if (dst.dtype == DType::BF16) {
#pragma omp parallel for simd if (n >= kParallelFrom)
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
  } else {
    TIDE_ASSERT(dst.dtype == DType::F16);
#pragma omp parallel for if (n >= kParallelFrom)
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
  }
}

F32Buffer::F32Buffer(const Tensor& t) : t_(t) {
  if (!t.defined()) return;
  if (t.dtype == DType::F32) {
    p_ = t.f32();
    return;
  }
  copy_ = std::make_unique<float[]>(static_cast<size_t>(t.numel()));
  p_ = copy_.get();
  widen_to_f32(p_, t);
}

void F32Buffer::store() const {
  if (copy_) round_from_f32(t_, p_);
}

}  // namespace tide::cpu

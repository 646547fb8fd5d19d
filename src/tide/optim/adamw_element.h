#pragma once
// The per-element AdamW update shared by the scalar path and the tails of the SIMD paths
// (internal to tide_optim). The order of operations is the one documented in adamw.h; the
// SIMD bodies repeat it lane by lane, which is why all paths agree bitwise. The library is
// compiled with contraction of a*b+c into fused multiply-adds turned off (every file that
// includes this header includes fp_contract_off.h first), so these lines round as written.

#include <cmath>

#include "tide/core/dtype.h"
#include "tide/optim/adamw.h"
#include "tide/optim/adamw_cpu.h"

namespace tide::optim_detail {

// p, m, v: one element of master, m, v (updated in place); g: the raw gradient.
inline void adamw_element(float& p, float g, float& m, float& v, const AdamWScalars& k) {
  g = g * k.grad_scale;
  if (k.l2 != 0.0f) g = g + k.l2 * p;  // classic Adam's L2 term (adamw.h)
  const float decayed = p * k.decay;
  m = k.beta1 * m + k.one_minus_beta1 * g;
  v = k.beta2 * v + (k.one_minus_beta2 * g) * g;
  const float denom = std::sqrt(v) / k.bc2_sqrt + k.eps;
  p = decayed - (k.step_size * m) / denom;
}

inline float load_grad(const void* grad, DType dt, int64_t i) {
  switch (dt) {
    case DType::BF16:
      return bf16_to_f32(static_cast<const uint16_t*>(grad)[i]);
    case DType::F16:
      return f16_to_f32(static_cast<const uint16_t*>(grad)[i]);
    default:
      return static_cast<const float*>(grad)[i];
  }
}

inline void store_param(void* out, DType dt, int64_t i, float p) {
  switch (dt) {
    case DType::BF16:
      static_cast<uint16_t*>(out)[i] = f32_to_bf16(p);
      break;
    case DType::F16:
      static_cast<uint16_t*>(out)[i] = f32_to_f16(p);
      break;
    default:
      static_cast<float*>(out)[i] = p;
      break;
  }
}

// Elements [begin, end) with the dtypes fixed at compile time (the switches above fold away).
// Out = U16 stands for "no parameter copy".
template <DType G, DType Out>
void adamw_loop_scalar(const AdamWChunk& c, const AdamWScalars& k, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    adamw_element(c.master[i], load_grad(c.grad, G, i), c.m[i], c.v[i], k);
    if constexpr (Out != DType::U16) store_param(c.param_out, Out, i, c.master[i]);
  }
}

template <DType G>
void adamw_loop_scalar_out(const AdamWChunk& c, const AdamWScalars& k, int64_t b, int64_t e) {
  if (!c.param_out) return adamw_loop_scalar<G, DType::U16>(c, k, b, e);
  switch (c.param_dtype) {
    case DType::BF16:
      return adamw_loop_scalar<G, DType::BF16>(c, k, b, e);
    case DType::F16:
      return adamw_loop_scalar<G, DType::F16>(c, k, b, e);
    default:
      return adamw_loop_scalar<G, DType::F32>(c, k, b, e);
  }
}

// Elements [begin, end) of the chunk, one at a time: the scalar path, and the tail loop of
// the SIMD paths.
inline void adamw_range_scalar(const AdamWChunk& c, const AdamWScalars& k, int64_t begin,
                               int64_t end) {
  switch (c.grad_dtype) {
    case DType::BF16:
      return adamw_loop_scalar_out<DType::BF16>(c, k, begin, end);
    case DType::F16:
      return adamw_loop_scalar_out<DType::F16>(c, k, begin, end);
    default:
      return adamw_loop_scalar_out<DType::F32>(c, k, begin, end);
  }
}

// The SIMD paths (adamw_avx2.cpp, adamw_avx512.cpp). `nontemporal`: which arrays get
// streaming stores; the caller guarantees those pointers + begin are vector-aligned.
void adamw_range_avx2(const AdamWChunk& c, const AdamWScalars& k, int64_t begin, int64_t end,
                      Streaming nontemporal);
void adamw_range_avx512(const AdamWChunk& c, const AdamWScalars& k, int64_t begin, int64_t end,
                        Streaming nontemporal);

}  // namespace tide::optim_detail

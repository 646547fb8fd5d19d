// AdamW over a range of a chunk with AVX-512F, 16 floats per vector: the same recipe as
// adamw_avx2.cpp (see there), one register twice as wide. The 16-bit conversions use only
// AVX-512F instructions (vcvtph2ps/vcvtps2ph and integer ops), not AVX512-BF16, so any
// AVX-512F CPU runs it. No FMA in the update: bitwise equal to the reference.

// GCC 12 warns "__Y may be used uninitialized" inside its own _mm512_undefined_* helpers
// (a known false positive of avx512fintrin.h): silence it for this file only.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "tide/optim/fp_contract_off.h"  // first: see there

#include <immintrin.h>

#include "tide/optim/adamw_element.h"

#define TIDE_AVX512 __attribute__((target("avx512f")))

namespace tide::optim_detail {
namespace {

enum class Out { kNone, kF32, kBF16, kF16 };

template <DType G>
TIDE_AVX512 inline __m512 load_grad16(const void* grad, int64_t i) {
  if constexpr (G == DType::F32) {
    return _mm512_loadu_ps(static_cast<const float*>(grad) + i);
  } else {
    const __m256i h = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(grad) + i));
    if constexpr (G == DType::BF16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      return _mm512_cvtph_ps(h);
    }
  }
}

// f32 -> bf16 of 16 lanes with tide::f32_to_bf16's recipe (nearest even, NaN kept quiet).
TIDE_AVX512 inline __m256i f32_to_bf16_16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
  const __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(abs, _mm512_set1_epi32(0x7f800000));
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(is_nan, rounded, quiet));  // vpmovdw
}

template <bool NT>
TIDE_AVX512 inline void store16(float* p, __m512 x) {
  if constexpr (NT) {
    _mm512_stream_ps(p, x);
  } else {
    _mm512_storeu_ps(p, x);
  }
}

template <bool NT>
TIDE_AVX512 inline void store16_16(uint16_t* p, __m256i x) {
  if constexpr (NT) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), x);
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), x);
  }
}

template <DType G, Out O, int NT>
TIDE_AVX512 void range(const AdamWChunk& c, const AdamWScalars& k, int64_t begin, int64_t end) {
  const __m512 gs = _mm512_set1_ps(k.grad_scale), decay = _mm512_set1_ps(k.decay);
  const __m512 l2 = _mm512_set1_ps(k.l2);
  const bool classic = k.l2 != 0.0f;  // classic Adam's L2 term: g += wd*p (adamw.h)
  const __m512 b1 = _mm512_set1_ps(k.beta1), omb1 = _mm512_set1_ps(k.one_minus_beta1);
  const __m512 b2 = _mm512_set1_ps(k.beta2), omb2 = _mm512_set1_ps(k.one_minus_beta2);
  const __m512 bc2 = _mm512_set1_ps(k.bc2_sqrt), eps = _mm512_set1_ps(k.eps);
  const __m512 step = _mm512_set1_ps(k.step_size);
  float* __restrict master = c.master;
  float* __restrict mm = c.m;
  float* __restrict vv = c.v;
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m512 p0 = _mm512_loadu_ps(master + i);
    __m512 g = _mm512_mul_ps(load_grad16<G>(c.grad, i), gs);
    if (classic) g = _mm512_add_ps(g, _mm512_mul_ps(l2, p0));
    const __m512 p = _mm512_mul_ps(p0, decay);
    const __m512 m =
        _mm512_add_ps(_mm512_mul_ps(b1, _mm512_loadu_ps(mm + i)), _mm512_mul_ps(omb1, g));
    const __m512 v = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_loadu_ps(vv + i)),
                                   _mm512_mul_ps(_mm512_mul_ps(omb2, g), g));
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), bc2), eps);
    const __m512 pn = _mm512_sub_ps(p, _mm512_div_ps(_mm512_mul_ps(step, m), denom));
    store16<NT == 2>(master + i, pn);
    store16<NT == 2>(mm + i, m);
    store16<NT == 2>(vv + i, v);
    if constexpr (O == Out::kF32) {
      store16<NT != 0>(static_cast<float*>(c.param_out) + i, pn);
    } else if constexpr (O == Out::kBF16) {
      store16_16<NT != 0>(static_cast<uint16_t*>(c.param_out) + i, f32_to_bf16_16(pn));
    } else if constexpr (O == Out::kF16) {
      store16_16<NT != 0>(static_cast<uint16_t*>(c.param_out) + i,
                          _mm512_cvtps_ph(pn, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
  }
  if constexpr (NT != 0) _mm_sfence();
  adamw_range_scalar(c, k, i, end);
}

template <DType G, int NT>
void range_out(const AdamWChunk& c, const AdamWScalars& k, int64_t b, int64_t e) {
  if (!c.param_out) return range<G, Out::kNone, NT>(c, k, b, e);
  switch (c.param_dtype) {
    case DType::F32:
      return range<G, Out::kF32, NT>(c, k, b, e);
    case DType::F16:
      return range<G, Out::kF16, NT>(c, k, b, e);
    default:
      return range<G, Out::kBF16, NT>(c, k, b, e);
  }
}

template <int NT>
void range_grad(const AdamWChunk& c, const AdamWScalars& k, int64_t b, int64_t e) {
  switch (c.grad_dtype) {
    case DType::BF16:
      return range_out<DType::BF16, NT>(c, k, b, e);
    case DType::F16:
      return range_out<DType::F16, NT>(c, k, b, e);
    default:
      return range_out<DType::F32, NT>(c, k, b, e);
  }
}

}  // namespace

void adamw_range_avx512(const AdamWChunk& c, const AdamWScalars& k, int64_t begin, int64_t end,
                        Streaming nontemporal) {
  switch (nontemporal) {
    case Streaming::kAll:
      return range_grad<2>(c, k, begin, end);
    case Streaming::kParamCopy:
      return range_grad<1>(c, k, begin, end);
    default:
      return range_grad<0>(c, k, begin, end);
  }
}

}  // namespace tide::optim_detail

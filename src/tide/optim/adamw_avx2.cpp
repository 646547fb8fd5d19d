// AdamW over a range of a chunk with AVX2 (+FMA, F16C for the f16 conversions), 8 floats per
// vector. The functions carry __attribute__((target)) so the library needs no -march flag;
// adamw_cpu.cpp calls them only after __builtin_cpu_supports says the CPU has the features.
// No FMA instructions are used in the update on purpose: separate multiply and add round
// exactly like the scalar reference (contraction is off: fp_contract_off.h), so the results
// are bitwise identical. The update is memory-bound; FMA would not make it faster.

#include "tide/optim/fp_contract_off.h"  // first: see there

#include <immintrin.h>

#include "tide/optim/adamw_element.h"

#define TIDE_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace tide::optim_detail {
namespace {

enum class Out { kNone, kF32, kBF16, kF16 };

// 8 gradients at grad[i], widened to f32.
template <DType G>
TIDE_AVX2 inline __m256 load_grad8(const void* grad, int64_t i) {
  if constexpr (G == DType::F32) {
    return _mm256_loadu_ps(static_cast<const float*>(grad) + i);
  } else {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(grad) + i));
    if constexpr (G == DType::BF16) {
      // bf16 is the top half of an f32: zero-extend and shift up.
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else {
      return _mm256_cvtph_ps(h);
    }
  }
}

// f32 -> bf16 of 8 lanes, round to nearest even, NaN kept quiet: the same bit recipe as
// tide::f32_to_bf16, so results are identical.
TIDE_AVX2 inline __m128i f32_to_bf16_8(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  const __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  const __m256i is_nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  const __m256i r = _mm256_blendv_epi8(rounded, quiet, is_nan);
  // Pack the 8 32-bit lanes (all < 2^16) to 16 bits: packus works within 128-bit halves,
  // so gather the two useful 64-bit quarters afterwards.
  const __m256i packed = _mm256_packus_epi32(r, r);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0b1000));
}

template <bool NT>
TIDE_AVX2 inline void store8(float* p, __m256 x) {
  if constexpr (NT) {
    _mm256_stream_ps(p, x);
  } else {
    _mm256_storeu_ps(p, x);
  }
}

template <bool NT>
TIDE_AVX2 inline void store8_16(uint16_t* p, __m128i x) {
  if constexpr (NT) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), x);
  } else {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), x);
  }
}

template <DType G, Out O, int NT>
TIDE_AVX2 void range(const AdamWChunk& c, const AdamWScalars& k, int64_t begin, int64_t end) {
  const __m256 gs = _mm256_set1_ps(k.grad_scale), decay = _mm256_set1_ps(k.decay);
  const __m256 l2 = _mm256_set1_ps(k.l2);
  const bool classic = k.l2 != 0.0f;  // classic Adam's L2 term: g += wd*p (adamw.h)
  const __m256 b1 = _mm256_set1_ps(k.beta1), omb1 = _mm256_set1_ps(k.one_minus_beta1);
  const __m256 b2 = _mm256_set1_ps(k.beta2), omb2 = _mm256_set1_ps(k.one_minus_beta2);
  const __m256 bc2 = _mm256_set1_ps(k.bc2_sqrt), eps = _mm256_set1_ps(k.eps);
  const __m256 step = _mm256_set1_ps(k.step_size);
  float* __restrict master = c.master;
  float* __restrict mm = c.m;
  float* __restrict vv = c.v;
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m256 p0 = _mm256_loadu_ps(master + i);
    __m256 g = _mm256_mul_ps(load_grad8<G>(c.grad, i), gs);
    if (classic) g = _mm256_add_ps(g, _mm256_mul_ps(l2, p0));
    const __m256 p = _mm256_mul_ps(p0, decay);
    const __m256 m =
        _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(mm + i)), _mm256_mul_ps(omb1, g));
    const __m256 v = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(vv + i)),
                                   _mm256_mul_ps(_mm256_mul_ps(omb2, g), g));
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), bc2), eps);
    const __m256 pn = _mm256_sub_ps(p, _mm256_div_ps(_mm256_mul_ps(step, m), denom));
    store8<NT == 2>(master + i, pn);
    store8<NT == 2>(mm + i, m);
    store8<NT == 2>(vv + i, v);
    if constexpr (O == Out::kF32) {
      store8<NT != 0>(static_cast<float*>(c.param_out) + i, pn);
    } else if constexpr (O == Out::kBF16) {
      store8_16<NT != 0>(static_cast<uint16_t*>(c.param_out) + i, f32_to_bf16_8(pn));
    } else if constexpr (O == Out::kF16) {
      store8_16<NT != 0>(static_cast<uint16_t*>(c.param_out) + i,
                         _mm256_cvtps_ph(pn, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
  }
  if constexpr (NT != 0) _mm_sfence();  // streaming stores are weakly ordered: publish them
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

void adamw_range_avx2(const AdamWChunk& c, const AdamWScalars& k, int64_t begin, int64_t end,
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

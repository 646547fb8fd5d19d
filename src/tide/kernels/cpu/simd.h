#pragma once
// 8-lane float vectors (GCC vector extensions: one AVX register) for the CPU kernels' element-
// wise loops and row reductions, and exp over 8 floats at a time, for the kernels whose time is
// mostly exp (cross-entropy, softmax, GELU). Why not std::exp: glibc's expf is scalar
// (libmvec's vector variants are only declared under -ffast-math, which the project does not
// use): 3.7 ns per element in a loop here against 0.6 ns for exp8 (best of 20 passes over
// 2^20 floats), and the cross-entropy alone calls it twice per logit.
//
// The algorithm is Cephes' expf: n = round(x log2 e), r = x - n ln2 (ln2 in two parts),
// exp(r) by a degree-7 polynomial (1 + r + r^2 P(r)), times 2^n built in the exponent bits.
// Relative error below 2 ulp on [-87.3, 88.7] (checked against double exp in the kernel tests).
// Outside: x > 88.72 gives +inf, x < -87.34 (where exp is below FLT_MIN) gives 0, NaN gives
// NaN.
//
// Reproducibility: written with GCC vector extensions, one operation at a time (the library
// is built with -ffp-contract=off) and explicit fused multiply-adds, so each lane is a fixed
// function of its input. Where AVX2/FMA are missing the same operations run lane by lane
// (std::fma and nearbyint round exactly like the instructions): the same bits, only slower.
// exp8 of a lane does not depend on the other lanes, so a tail padded to 8 lanes gives the
// same numbers as a full block.

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace tide::cpu {

// out[i] = exp8's value of in[i]: the library's own compiled code path (for the tests, which
// are built without -march=native).
void exp_f32(float* out, const float* in, int64_t n);

// The inline functions below compile differently with and without AVX2 (and pass vectors in
// different registers): an inline namespace per variant keeps a test built without
// -march=native from sharing (ODR-merging) the library's copies.
#if defined(__AVX2__) && defined(__FMA__)
inline namespace simd_avx2 {
#else
inline namespace simd_generic {
#endif

using v8f = float __attribute__((vector_size(32)));
using v8i = int32_t __attribute__((vector_size(32)));

inline v8f splat(float x) {
  return v8f{x, x, x, x, x, x, x, x};
}

// 8 floats from p (unaligned).
inline v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float* p, v8f v) {
  std::memcpy(p, &v, sizeof v);
}
// The first n (< 8) floats of p, the other lanes `fill`; and the first n lanes back.
inline v8f load_partial(const float* p, int n, float fill = 0.0f) {
  v8f v = splat(fill);
  for (int i = 0; i < n; ++i) v[i] = p[i];
  return v;
}
inline void store_partial(float* p, v8f v, int n) {
  for (int i = 0; i < n; ++i) p[i] = v[i];
}

// a * b + c with one rounding.
inline v8f fma8(v8f a, v8f b, v8f c) {
#if defined(__AVX2__) && defined(__FMA__)
  return _mm256_fmadd_ps(a, b, c);
#else
  v8f r;
  for (int i = 0; i < 8; ++i) r[i] = std::fma(a[i], b[i], c[i]);
  return r;
#endif
}

// Round to the nearest integer, ties to even (the default rounding mode).
inline v8f round8(v8f x) {
#if defined(__AVX2__) && defined(__FMA__)
  return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#else
  v8f r;
  for (int i = 0; i < 8; ++i) r[i] = std::nearbyint(x[i]);
  return r;
#endif
}

inline v8f select8(v8i mask, v8f a, v8f b) {  // mask lane all ones: a, zero: b
  return mask ? a : b;
}

inline v8f max8(v8f a, v8f b) {  // lane-wise max; NaN in a gives b, NaN in b gives b
  return select8(a > b, a, b);
}

inline v8f exp8(v8f x) {
  constexpr float kHi = 88.7228394f;   // log(FLT_MAX)
  constexpr float kLo = -87.3365479f;  // log(FLT_MIN): below, 2^n would leave the normals
  const v8i over = x > splat(kHi);
  const v8i under = x < splat(kLo);
  // Clamp (NaN passes through: comparisons with NaN are false).
  v8f xc = select8(over, splat(kHi), x);
  xc = select8(under, splat(kLo), xc);
  const v8f n = round8(xc * splat(1.44269504088896341f));
  // r = x - n ln2 in two steps (ln2 = C1 + C2; n * C1 is exact for |n| < 2^9).
  v8f r = fma8(n, splat(-0.693359375f), xc);
  r = fma8(n, splat(2.12194440e-4f), r);
  // Cephes' minimax polynomial for (exp(r) - 1 - r) / r^2 on |r| <= ln2 / 2.
  v8f p = splat(1.9875691500e-4f);
  p = fma8(p, r, splat(1.3981999507e-3f));
  p = fma8(p, r, splat(8.3334519073e-3f));
  p = fma8(p, r, splat(4.1665795894e-2f));
  p = fma8(p, r, splat(1.6666665459e-1f));
  p = fma8(p, r, splat(5.0000001201e-1f));
  const v8f y = fma8(p, r * r, r) + splat(1.0f);
  // 2^n from n + 127 in the exponent field. n is in [-126, 128] and 2^128 is not a float,
  // so the scale is applied as 2^n1 * 2^n2 with n1 + n2 = n (both normal floats).
  const v8i ni = __builtin_convertvector(n, v8i);
  const v8i n1 = ni >> 1, n2 = ni - n1;
  v8f s1, s2;
  const v8i e1 = (n1 + 127) << 23, e2 = (n2 + 127) << 23;
  std::memcpy(&s1, &e1, sizeof s1);
  std::memcpy(&s2, &e2, sizeof s2);
  v8f out = y * s1 * s2;
  out = select8(over, splat(INFINITY), out);
  out = select8(under, splat(0.0f), out);
  return out;
}

// out[i] = exp(x[i]) for one float, the same bits as exp8's lane.
inline float exp1(float x) {
  return exp8(splat(x))[0];
}

// Horizontal sum of the 8 lanes in a fixed tree (the order of vec.h's dot).
inline float hsum8(v8f a) {
  return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

inline float hmax8(v8f a) {
  float m = a[0];
  for (int i = 1; i < 8; ++i) m = a[i] > m ? a[i] : m;
  return m;
}

// Sums in double over 8 float lanes (the row reductions of layernorm, rmsnorm and the
// cross-entropy): lanes 0-3 and 4-7 of x widened exactly, and two 4-lane accumulators added in
// a fixed tree.
using v4d = double __attribute__((vector_size(32)));
inline v4d low4d(v8f x) {
  return __builtin_convertvector(__builtin_shufflevector(x, x, 0, 1, 2, 3), v4d);
}
inline v4d high4d(v8f x) {
  return __builtin_convertvector(__builtin_shufflevector(x, x, 4, 5, 6, 7), v4d);
}
inline double hsum4d(v4d lo, v4d hi) {
  return ((lo[0] + hi[0]) + (lo[1] + hi[1])) + ((lo[2] + hi[2]) + (lo[3] + hi[3]));
}

}  // namespace simd_avx2 / simd_generic
}  // namespace tide::cpu

#pragma once
// AVX-512 pieces shared by the packed GEMMs' kernel files (gemm_bf16_kernels.cpp,
// gemm_f32_kernels.cpp). Compiled for AVX-512 by target attribute whatever -march says, so
// include this only from a file whose callers run where the CPU has AVX-512 F/BW/VL/DQ, and
// keep that file out of the unity batches (CMakeLists.txt).
#include <immintrin.h>

#include <cstdint>

// GCC 12 warns "__Y is (may be) used uninitialized" inside its own _mm512_undefined_* helpers
// (a known false positive of avx512fintrin.h), as in optim/adamw_avx512.cpp: off for the rest
// of the including file, which is why such a file stays out of the unity batches.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#define TIDE_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

namespace tide::cpu::packed_detail {

// The first n (0..16) f32 lanes.
TIDE_AVX512 inline __mmask16 lanes32(int64_t n) {
  if (n <= 0) return 0;
  return n >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << n) - 1);
}

// r[i] (16 x 32-bit) becomes column i of the matrix whose rows were r.
TIDE_AVX512 inline void transpose16x16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int h = 0; h < 16; h += 8) {
    for (int i = 0; i < 4; ++i) {
      t[h + i] = _mm512_shuffle_i32x4(r[h + i], r[h + i + 4], 0x88);
      t[h + i + 4] = _mm512_shuffle_i32x4(r[h + i], r[h + i + 4], 0xdd);
    }
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
  }
}

}  // namespace tide::cpu::packed_detail

// gemm_f32.h's packing and microkernel, in a file of its own because its functions are compiled
// for AVX-512 (target attributes) whatever the build's -march: they run only where
// f32_gemm_path_supported said the CPU has it.
//
// A packed tile is [k][16 lanes] over the chunks of K (zero-padded): 16 rows of op(A) or 16
// columns of op(B). Lanes stored contiguous in k (rows of an untransposed A, columns of a
// transposed B) are loaded 16 k at a time and transposed 16x16; lanes stored contiguous in the
// other direction are copied one k row at a time. Tails are masked loads, so padding is zeros.
//
// Microkernel: the (32,32) block in four groups of 8 rows, 16 f32 accumulators in registers
// (8 rows x 2 vectors of 16 columns): per k the two B vectors are loaded once and each row's A
// value is broadcast against them. Zen 4 issues one 512-bit FMA per cycle; this kernel ran at
// 98% of that on data in cache (bench/RESULTS.md, "An f32 GEMM of tide's own").
#include <algorithm>

#include "tide/kernels/cpu/gemm_avx512.h"
#include "tide/kernels/cpu/gemm_f32.h"

namespace tide::cpu::f32_detail {

using packed_detail::lanes32;
using packed_detail::transpose16x16;

namespace {

constexpr int64_t kChunk = 16;        // values of K per chunk
constexpr int64_t kChunkElems = 256;  // f32 per chunk of a tile (1 KiB)

// Tile of 16 lanes x kc chunks at dst from `src` (gemm_f32.h).
TIDE_AVX512 void pack_tile(float* dst, const TileSource& src, int64_t K, int64_t kc) {
  const float* p = src.p;
  const int64_t ld = src.ld, lanes = src.lanes;
  const bool lanes_contiguous_in_k = src.lanes_contiguous_in_k;
  if (!lanes_contiguous_in_k) {
    const __mmask16 m = lanes32(lanes);
    for (int64_t k = 0; k < kc * kChunk; ++k)
      _mm512_store_ps(dst + k * 16,
                      k < K ? _mm512_maskz_loadu_ps(m, p + k * ld) : _mm512_setzero_ps());
    return;
  }
  for (int64_t c = 0; c < kc; ++c) {
    const int64_t k0 = c * kChunk;
    const __mmask16 m = lanes32(K - k0);
    __m512i v[16];
    for (int64_t l = 0; l < 16; ++l)
      v[l] = l < lanes ? _mm512_castps_si512(_mm512_maskz_loadu_ps(m, p + l * ld + k0))
                       : _mm512_setzero_si512();
    transpose16x16(v);  // v[k] = lanes 0..15 at k0 + k
    for (int k = 0; k < 16; ++k) _mm512_store_si512(dst + (k0 + k) * 16, v[k]);
  }
}

}  // namespace

TIDE_AVX512 void pack_a_tile(uint16_t* dst, const GemmOperand& a, int64_t M, int64_t K, int64_t kc,
                             int /*terms*/, int64_t r0) {
  pack_tile(reinterpret_cast<float*>(dst), a_tile_source(a, M, r0), K, kc);
}

TIDE_AVX512 void pack_b_tile(uint16_t* dst, const GemmOperand& b, int64_t N, int64_t K, int64_t kc,
                             int /*terms*/, int64_t c0) {
  pack_tile(reinterpret_cast<float*>(dst), b_tile_source(b, N, c0), K, kc);
}

// The 16 accumulators stay in registers only when every loop over them is unrolled whole (as
// in the AVX512-BF16 kernel: GCC at -O2 otherwise keeps them on the stack).
TIDE_AVX512 void kernel_32x32(const uint16_t* a16, int /*a_terms*/, const uint16_t* b16,
                              int /*b_terms*/, int64_t kc, int64_t k0, int64_t k1, bool accumulate,
                              float* c) {
  const auto* a = reinterpret_cast<const float*>(a16);
  const auto* b = reinterpret_cast<const float*>(b16);
  const int64_t second = kc * kChunkElems;  // the panel's second tile
  for (int g = 0; g < 4; ++g) {             // rows 8g .. 8g+7: tile g/2, its lanes 8(g%2) ..
    float* cg = c + g * 8 * 32;
    const float* ak = a + (g / 2) * second + (g % 2) * 8 + k0 * kChunkElems;
    const float* bk = b + k0 * kChunkElems;
    __m512 acc[8][2];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      acc[i][0] = accumulate ? _mm512_load_ps(cg + i * 32) : _mm512_setzero_ps();
      acc[i][1] = accumulate ? _mm512_load_ps(cg + i * 32 + 16) : _mm512_setzero_ps();
    }
#pragma GCC unroll 4
    for (int64_t k = k0 * kChunk; k < k1 * kChunk; ++k, ak += 16, bk += 16) {
      const __m512 b0 = _mm512_load_ps(bk), b1 = _mm512_load_ps(bk + second);
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        const __m512 ai = _mm512_set1_ps(ak[i]);
        acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
        acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      _mm512_store_ps(cg + i * 32, acc[i][0]);
      _mm512_store_ps(cg + i * 32 + 16, acc[i][1]);
    }
  }
}

}  // namespace tide::cpu::f32_detail

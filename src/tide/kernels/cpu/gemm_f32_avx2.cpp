// gemm_f32.h's packing, microkernel and epilogue for AVX2 + FMA (F32GemmPath::kAvx2, chosen by
// TIDE_CPU_F32_GEMM=avx2): the AVX-512 path's bits on a CPU without AVX-512 (Zen 2 and 3, Haswell
// to Comet Lake), where OpenBLAS's kernel stays the default as the faster one. In a file of its
// own, compiled for AVX2 and FMA by target attribute whatever the build's -march: it runs only
// where f32_gemm_path_supported said the CPU has them.
//
// The packed tiles are the AVX-512 format's ([k][16 lanes] per chunk of 16 values of K), so an
// element's sum is the same FMA chain over k in the same order and its bits are those of the
// AVX-512 path and of a scalar std::fma chain (test_gemm_f32.cpp holds both paths to that).
//
// Microkernel: AVX2 has 16 vector registers of 8 floats. Each 16-row tile of the block's A
// panel is taken in row groups of 6, 6 and 4 against one 16-column tile of B: 12 (or 8)
// accumulators, 2 B vectors loaded per k and each row's A value broadcast from memory, 15
// registers at most. Twelve independent FMA chains cover two FMA pipes of 4 cycles' latency
// (Zen 3); a group of 4 rows has 8, just enough.
#include <immintrin.h>

#include <algorithm>

#include "tide/core/error.h"
#include "tide/kernels/cpu/gemm_f32.h"

#define TIDE_AVX2 __attribute__((target("avx2,fma")))

namespace tide::cpu::f32_avx2_detail {

using f32_detail::a_tile_source;
using f32_detail::b_tile_source;
using f32_detail::TileSource;

namespace {

constexpr int64_t kChunk = 16;        // values of K per chunk
constexpr int64_t kChunkElems = 256;  // f32 per chunk of a tile (1 KiB)

// dst[i * 16 + l] = src[l * ld + i] for i, l in 0..7: 8 lanes' 8 values of k, transposed.
TIDE_AVX2 inline void transpose8x8(const float* src, int64_t ld, float* dst) {
  __m256 r[8], t[8];
  for (int l = 0; l < 8; ++l) r[l] = _mm256_loadu_ps(src + l * ld);
  for (int l = 0; l < 8; l += 2) {
    t[l] = _mm256_unpacklo_ps(r[l], r[l + 1]);
    t[l + 1] = _mm256_unpackhi_ps(r[l], r[l + 1]);
  }
  for (int l = 0; l < 8; l += 4) {
    r[l] = _mm256_shuffle_ps(t[l], t[l + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[l + 1] = _mm256_shuffle_ps(t[l], t[l + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[l + 2] = _mm256_shuffle_ps(t[l + 1], t[l + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[l + 3] = _mm256_shuffle_ps(t[l + 1], t[l + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  // r[0..3]: values k = (0,4), (1,5), (2,6), (3,7) of lanes 0-3; r[4..7] those of lanes 4-7.
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * 16, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * 16, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

// Tile of 16 lanes x kc chunks at dst from `src` (gemm_f32.h), zero where the lanes or K run out.
TIDE_AVX2 void pack_tile(float* dst, const TileSource& src, int64_t K, int64_t kc) {
  const float* p = src.p;
  const int64_t ld = src.ld, lanes = src.lanes;
  const bool lanes_contiguous_in_k = src.lanes_contiguous_in_k;
  const int64_t kk = kc * kChunk;
  if (!lanes_contiguous_in_k) {
    for (int64_t k = 0; k < kk; ++k) {
      float* d = dst + k * 16;
      if (k < K && lanes == 16) {
        _mm256_store_ps(d, _mm256_loadu_ps(p + k * ld));
        _mm256_store_ps(d + 8, _mm256_loadu_ps(p + k * ld + 8));
        continue;
      }
      for (int64_t l = 0; l < 16; ++l) d[l] = k < K && l < lanes ? p[k * ld + l] : 0.0f;
    }
    return;
  }
  // Each lane's values run along k: 8x8 blocks (8 lanes' 8 values of k) transposed in
  // registers; a chunk short of lanes or of K is copied value by value.
  for (int64_t c = 0; c < kc; ++c) {
    float* d = dst + c * kChunkElems;
    const int64_t k0 = c * kChunk, n = std::clamp<int64_t>(K - k0, 0, kChunk);
    if (lanes == 16 && n == kChunk) {
      for (int64_t l0 = 0; l0 < 16; l0 += 8)
        for (int64_t q = 0; q < kChunk; q += 8)
          transpose8x8(p + l0 * ld + k0 + q, ld, d + q * 16 + l0);
      continue;
    }
    for (int64_t l = 0; l < 16; ++l) {
      const float* lane = p + l * ld + k0;
      for (int64_t k = 0; k < kChunk; ++k) d[k * 16 + l] = l < lanes && k < n ? lane[k] : 0.0f;
    }
  }
}

// Rows [0, R) of one A tile (its first row at `a`, 16 floats per k) against one B tile (`b`),
// over nk values of k: the (R,16) corner of the block at c (row stride 32).
template <int R>
TIDE_AVX2 inline __attribute__((always_inline)) void rows_by_16(const float* a, const float* b,
                                                                int64_t nk, bool accumulate,
                                                                float* c) {
  __m256 acc[R][2];
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i) {
    acc[i][0] = accumulate ? _mm256_load_ps(c + i * 32) : _mm256_setzero_ps();
    acc[i][1] = accumulate ? _mm256_load_ps(c + i * 32 + 8) : _mm256_setzero_ps();
  }
#pragma GCC unroll 2
  for (int64_t k = 0; k < nk; ++k, a += 16, b += 16) {
    const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 6
    for (int i = 0; i < R; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a + i);
      acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i) {
    _mm256_store_ps(c + i * 32, acc[i][0]);
    _mm256_store_ps(c + i * 32 + 8, acc[i][1]);
  }
}

}  // namespace

TIDE_AVX2 void pack_a_tile(uint16_t* dst, const GemmOperand& a, int64_t M, int64_t K, int64_t kc,
                           int /*terms*/, int64_t r0) {
  pack_tile(reinterpret_cast<float*>(dst), a_tile_source(a, M, r0), K, kc);
}

TIDE_AVX2 void pack_b_tile(uint16_t* dst, const GemmOperand& b, int64_t N, int64_t K, int64_t kc,
                           int /*terms*/, int64_t c0) {
  pack_tile(reinterpret_cast<float*>(dst), b_tile_source(b, N, c0), K, kc);
}

TIDE_AVX2 void kernel_32x32(const uint16_t* a16, int /*a_terms*/, const uint16_t* b16,
                            int /*b_terms*/, int64_t kc, int64_t k0, int64_t k1, bool accumulate,
                            float* c) {
  const auto* a = reinterpret_cast<const float*>(a16) + k0 * kChunkElems;
  const auto* b = reinterpret_cast<const float*>(b16) + k0 * kChunkElems;
  const int64_t second = kc * kChunkElems;  // the panel's second tile
  const int64_t nk = (k1 - k0) * kChunk;
  for (int j = 0; j < 2; ++j) {    // columns 16j .. 16j+15: B tile j
    for (int t = 0; t < 2; ++t) {  // rows 16t .. 16t+15: A tile t
      const float* at = a + t * second;
      const float* bt = b + j * second;
      float* ct = c + t * 16 * 32 + j * 16;
      rows_by_16<6>(at, bt, nk, accumulate, ct);
      rows_by_16<6>(at + 6, bt, nk, accumulate, ct + 6 * 32);
      rows_by_16<4>(at + 12, bt, nk, accumulate, ct + 12 * 32);
    }
  }
}

TIDE_AVX2 void store_block(const float* s, void* C, DType c_dtype, int64_t ldc, int64_t i0,
                           int64_t j0, int64_t m, int64_t n, GemmEpilogue e, const float* bias) {
  TIDE_ASSERT(c_dtype == DType::F32);  // gemm_f32's output
  for (int64_t i = 0; i < m; ++i) {
    float* __restrict c = static_cast<float*>(C) + (i0 + i) * ldc + j0;
    const float* __restrict r = s + i * 32;
    switch (e) {  // one loop per epilogue, each vectorised by the compiler
      case GemmEpilogue::kOverwrite:
        for (int64_t j = 0; j < n; ++j) c[j] = r[j];
        break;
      case GemmEpilogue::kAddBias:
        for (int64_t j = 0; j < n; ++j) c[j] = bias[j0 + j] + r[j];
        break;
      case GemmEpilogue::kAccumulate:
        for (int64_t j = 0; j < n; ++j) c[j] = c[j] + r[j];
        break;
    }
  }
}

}  // namespace tide::cpu::f32_avx2_detail

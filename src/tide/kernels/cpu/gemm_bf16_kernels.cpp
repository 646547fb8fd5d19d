// The native paths of gemm_bf16.h (packing, the two microkernels, epilogue), in a file of its
// own because its functions are compiled for AVX-512, AVX512-BF16 or AMX (target attributes)
// whatever the build's -march: they run only where bf16_gemm_path_supported said the CPU and
// kernel allow it (every AMX or AVX512-BF16 CPU has AVX-512 F/BW/VL/DQ).
//
// Packing moves 16-lane vectors: op(A) rows and op(B) columns that are contiguous in k are
// loaded as 16 pairs (32-bit lanes) and transposed 16x16; two k rows are interleaved into
// pairs. Tails (rows, columns, K) are masked loads, so the padding is zeros. An f32 operand is
// split into three bf16 terms per chunk (hi, mid, lo: f32_term), each multiplied by the other
// operand's one tile of that chunk.
//
// AMX: eight tile registers, four (16,16) f32 accumulators for a (32,32) block of C, two (16,32)
// bf16 tiles of A and two (16 k-pairs, 16 columns) VNNI tiles of B. Every tile is 16 rows of 64
// bytes, so one configuration serves all.
// AVX512-BF16: the same packed tiles; the (32,32) block in four groups of 8 rows, 16 f32
// accumulator registers each: per k-pair, the two B rows (32 columns) are loaded once and every
// row's A pair is broadcast against them.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tide/kernels/cpu/gemm_avx512.h"
#include "tide/kernels/cpu/gemm_bf16.h"

#define TIDE_AVX512BF16 __attribute__((target("avx512bf16,avx512f,avx512bw,avx512vl,avx512dq")))
#define TIDE_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq")))

namespace tide::cpu::bf16_detail {

using packed_detail::lanes32;
using packed_detail::transpose16x16;

namespace {
struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64);

constexpr int64_t kTile = 512;  // bf16 per packed tile

// Where the microkernels find chunk k's term s in a packed A (B) panel of kc chunks: a
// one-term operand's tile serves every term; the panel's second row (column) tile is `second`
// elements on.
struct PanelWalk {
  int64_t chunk, term, second;
  PanelWalk(int terms, int64_t kc)
      : chunk(terms * kTile), term(terms > 1 ? kTile : 0), second(kc * terms * kTile) {}
  const uint16_t* at(const uint16_t* panel, int64_t k, int s) const {
    return panel + k * chunk + s * term;
  }
};

// The first n (0..32) bf16 lanes.
TIDE_AVX512 inline __mmask32 lanes16(int64_t n) {
  if (n <= 0) return 0;
  return n >= 32 ? ~__mmask32{0} : (__mmask32{1} << n) - 1;
}
// f32 -> bf16 of 16 lanes with tide::f32_to_bf16's recipe (nearest even, NaN kept quiet).
TIDE_AVX512 inline __m256i to_bf16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
  const __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(abs, _mm512_set1_epi32(0x7f800000));
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(is_nan, rounded, quiet));
}

TIDE_AVX512 inline __m512 from_bf16(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// The three terms of x = hi + mid + lo, each x's remainder rounded to bf16: exact for normal f32
// values (8 + 8 + 8 bits of the 24). A non-finite hi (x is Inf or NaN, or rounds to Inf) is x's
// only term.
TIDE_AVX512 inline void f32_terms(__m512 x, __m256i t[3]) {
  t[0] = to_bf16(x);
  const __m512 h = from_bf16(t[0]);
  const __mmask16 finite =
      _mm512_cmp_ps_mask(_mm512_abs_ps(h), _mm512_set1_ps(INFINITY), _CMP_LT_OQ);
  const __m512 r = _mm512_maskz_sub_ps(finite, x, h);
  t[1] = to_bf16(r);
  t[2] = to_bf16(_mm512_sub_ps(r, from_bf16(t[1])));
}

// The n (0..16) values at element offset `off` of an operand as its bf16 terms t[0..terms), zero
// past n: bf16 values as stored (one term), f32 values split (f32_terms).
TIDE_AVX512 inline void load16(const GemmOperand& o, int64_t off, int64_t n, __m256i t[3]) {
  const __mmask16 m = lanes32(n);
  if (o.dtype == DType::BF16) {
    t[0] = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(o.p) + off);
    return;
  }
  f32_terms(_mm512_maskz_loadu_ps(m, static_cast<const float*>(o.p) + off), t);
}
// The same for n in 0..32.
TIDE_AVX512 inline void load32(const GemmOperand& o, int64_t off, int64_t n, __m512i t[3]) {
  if (o.dtype == DType::BF16) {
    t[0] = _mm512_maskz_loadu_epi16(lanes16(n), static_cast<const uint16_t*>(o.p) + off);
    return;
  }
  __m256i lo[3], hi[3];
  load16(o, off, n, lo);
  load16(o, off + 16, n - 16, hi);
  for (int s = 0; s < 3; ++s) t[s] = _mm512_inserti64x4(_mm512_castsi256_si512(lo[s]), hi[s], 1);
}

// v[s][p] = 16 pairs (row 2p, row 2p+1) of term s of a chunk whose k rows are contiguous in j:
// row k of the chunk starts at element offset row(k) (lanes j = 0..15); rows at and past
// `krows` are zero, and so are lanes past `cols`.
template <typename Row>
TIDE_AVX512 inline void interleave_rows(__m512i v[3][16], const GemmOperand& o, int terms, Row row,
                                        int64_t krows, int64_t cols) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                       23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  for (int p = 0; p < 16; ++p) {
    __m256i lo[3] = {}, hi[3] = {};
    if (2 * p < krows) load16(o, row(2 * p), cols, lo);
    if (2 * p + 1 < krows) load16(o, row(2 * p + 1), cols, hi);
    // lanes: lo[0], hi[0], lo[1], hi[1], ...
    for (int s = 0; s < terms; ++s)
      v[s][p] = _mm512_permutexvar_epi16(
          idx, _mm512_inserti64x4(_mm512_castsi256_si512(lo[s]), hi[s], 1));
  }
}

TIDE_AVX512 inline void store_tile(uint16_t* dst, const __m512i v[16]) {
  for (int i = 0; i < 16; ++i) _mm512_storeu_si512(dst + i * 32, v[i]);
}

}  // namespace

TIDE_AVX512 void pack_a_tile(uint16_t* dst, const GemmOperand& a, int64_t M, int64_t K, int64_t kc,
                             int terms, int64_t r0) {
  const int64_t rows = std::clamp<int64_t>(M - r0, 0, 16);
  for (int64_t c = 0; c < kc; ++c, dst += terms * kTile) {
    const int64_t k0 = c * 32, kn = std::min<int64_t>(32, K - k0);
    __m512i v[3][16] = {};
    if (!a.trans) {  // rows of A are contiguous in k: copy
      for (int64_t i = 0; i < rows; ++i) {
        __m512i t[3];
        load32(a, (r0 + i) * a.ld + k0, kn, t);
        for (int s = 0; s < terms; ++s) v[s][i] = t[s];
      }
    } else {
      // A stored (K,M): k row k holds 16 rows of the tile. Pairs of k rows interleaved give
      // [k-pair][row], transposed [row][k-pair]: the tile.
      interleave_rows(
          v, a, terms, [&](int64_t k) { return (k0 + k) * a.ld + r0; }, kn, rows);
      for (int s = 0; s < terms; ++s) transpose16x16(v[s]);
    }
    for (int s = 0; s < terms; ++s) store_tile(dst + s * kTile, v[s]);
  }
}

TIDE_AVX512 void pack_b_tile(uint16_t* dst, const GemmOperand& b, int64_t N, int64_t K, int64_t kc,
                             int terms, int64_t c0) {
  const int64_t cols = std::clamp<int64_t>(N - c0, 0, 16);
  for (int64_t c = 0; c < kc; ++c, dst += terms * kTile) {
    const int64_t k0 = c * 32, kn = std::min<int64_t>(32, K - k0);
    __m512i v[3][16] = {};
    if (b.trans) {  // B stored (N,K): column j is contiguous in k, 16 pairs: [j][k-pair]
      for (int64_t j = 0; j < cols; ++j) {
        __m512i t[3];
        load32(b, (c0 + j) * b.ld + k0, kn, t);
        for (int s = 0; s < terms; ++s) v[s][j] = t[s];
      }
      for (int s = 0; s < terms; ++s) transpose16x16(v[s]);
    } else {  // B stored (K,N): pairs of k rows interleaved are the VNNI rows
      interleave_rows(
          v, b, terms, [&](int64_t k) { return (k0 + k) * b.ld + c0; }, kn, cols);
    }
    for (int s = 0; s < terms; ++s) store_tile(dst + s * kTile, v[s]);
  }
}

TIDE_AMX void kernel_32x32_amx(const uint16_t* a, int a_terms, const uint16_t* b, int b_terms,
                               int64_t kc, int64_t k0, int64_t k1, bool accumulate, float* c) {
  // Tiles 0-3: C (rows 0-15 | 16-31) x (columns 0-15 | 16-31); 4, 5: A; 6, 7: B.
  if (accumulate) {
    _tile_loadd(0, c, 128);
    _tile_loadd(1, c + 16, 128);
    _tile_loadd(2, c + 16 * 32, 128);
    _tile_loadd(3, c + 16 * 32 + 16, 128);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  const int terms = std::max(a_terms, b_terms);
  const PanelWalk pa(a_terms, kc), pb(b_terms, kc);
  for (int64_t k = k0; k < k1; ++k) {
    for (int s = 0; s < terms; ++s) {
      const uint16_t* ak = pa.at(a, k, s);
      const uint16_t* bk = pb.at(b, k, s);
      _tile_loadd(4, ak, 64);
      _tile_loadd(6, bk, 64);
      _tile_loadd(5, ak + pa.second, 64);
      _tile_loadd(7, bk + pb.second, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, c, 128);
  _tile_stored(1, c + 16, 128);
  _tile_stored(2, c + 16 * 32, 128);
  _tile_stored(3, c + 16 * 32 + 16, 128);
}

namespace {
// The k-pair at p (two bf16, the even k in the low half) as one 32-bit lane broadcast.
TIDE_AVX512BF16 inline __m512bh pair_broadcast(const uint16_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return reinterpret_cast<__m512bh>(_mm512_set1_epi32(v));
}
}  // namespace

// The 16 accumulators stay in registers only when every loop over them is unrolled whole
// (GCC at -O2 kept them on the stack, a load and a store around every vdpbf16ps: 2-3x slower).
TIDE_AVX512BF16 void kernel_32x32_avx512(const uint16_t* a, int a_terms, const uint16_t* b,
                                         int b_terms, int64_t kc, int64_t k0, int64_t k1,
                                         bool accumulate, float* c) {
  const int terms = std::max(a_terms, b_terms);
  const PanelWalk pa(a_terms, kc), pb(b_terms, kc);
  for (int g = 0; g < 4; ++g) {  // rows 8g .. 8g+7: row tile g/2, its rows 8(g%2) ..
    float* cg = c + g * 8 * 32;
    const uint16_t* ag = a + (g / 2) * pa.second + (g % 2) * 8 * 32;
    __m512 acc[8][2];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      acc[i][0] = accumulate ? _mm512_load_ps(cg + i * 32) : _mm512_setzero_ps();
      acc[i][1] = accumulate ? _mm512_load_ps(cg + i * 32 + 16) : _mm512_setzero_ps();
    }
    for (int64_t k = k0; k < k1; ++k) {
      for (int s = 0; s < terms; ++s) {
        const uint16_t* ak = pa.at(ag, k, s);
        const uint16_t* bk = pb.at(b, k, s);
        const uint16_t* bk1 = bk + pb.second;
#pragma GCC unroll 2
        for (int p = 0; p < 16; ++p) {
          const auto b0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(bk + p * 32));
          const auto b1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(bk1 + p * 32));
#pragma GCC unroll 8
          for (int i = 0; i < 8; ++i) {
            const __m512bh ai = pair_broadcast(ak + i * 32 + 2 * p);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
          }
        }
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      _mm512_store_ps(cg + i * 32, acc[i][0]);
      _mm512_store_ps(cg + i * 32 + 16, acc[i][1]);
    }
  }
}

}  // namespace tide::cpu::bf16_detail

// gemm_packed.h's shared epilogue and the AMX tile state.
namespace tide::cpu::packed_detail {

using bf16_detail::from_bf16;
using bf16_detail::TileConfig;
using bf16_detail::to_bf16;

TIDE_AVX512 void store_block(const float* s, void* C, DType c_dtype, int64_t ldc, int64_t i0,
                             int64_t j0, int64_t m, int64_t n, GemmEpilogue e, const float* bias) {
  for (int64_t h = 0; h < n; h += 16) {
    const __mmask16 mk = lanes32(n - h);
    const __m512 b =
        e == GemmEpilogue::kAddBias ? _mm512_maskz_loadu_ps(mk, bias + j0 + h) : __m512{};
    for (int64_t i = 0; i < m; ++i) {
      const int64_t off = (i0 + i) * ldc + j0 + h;
      __m512 v = _mm512_load_ps(s + i * 32 + h);
      if (e == GemmEpilogue::kAddBias) v = _mm512_add_ps(b, v);
      if (c_dtype == DType::F32) {
        float* c = static_cast<float*>(C) + off;
        if (e == GemmEpilogue::kAccumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(mk, c), v);
        _mm512_mask_storeu_ps(c, mk, v);
        continue;
      }
      uint16_t* c = static_cast<uint16_t*>(C) + off;
      if (e == GemmEpilogue::kAccumulate)
        v = _mm512_add_ps(from_bf16(_mm256_maskz_loadu_epi16(mk, c)), v);
      _mm256_mask_storeu_epi16(c, mk, to_bf16(v));
    }
  }
}

TIDE_AVX512 void transpose_block(const float* s, float* t) {
  for (int bi = 0; bi < 2; ++bi) {
    for (int bj = 0; bj < 2; ++bj) {
      __m512i v[16];
      for (int i = 0; i < 16; ++i)
        v[i] =
            _mm512_load_si512(reinterpret_cast<const __m512i*>(s + (bi * 16 + i) * 32 + bj * 16));
      transpose16x16(v);
      for (int i = 0; i < 16; ++i)
        _mm512_store_si512(reinterpret_cast<__m512i*>(t + (bj * 16 + i) * 32 + bi * 16), v[i]);
    }
  }
}

TIDE_AMX void begin_tiles() {
  TileConfig cfg;
  std::memset(&cfg, 0, sizeof cfg);
  cfg.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  // Not _tile_loadconfig: GCC 12's version tells the compiler it reads only 8 bytes, and the
  // stores of colsb and rows were dropped (every tile instruction then faulted).
  __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

TIDE_AMX void end_tiles() {
  _tile_release();
}

}  // namespace tide::cpu::packed_detail

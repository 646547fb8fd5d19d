#pragma once
// tide's own f32 GEMM for the CPU matmul ops, on AVX-512 FMA or on AVX2 + FMA (gemm_packed.h's
// driver): each operand packed once per call and shared by the threads, a microkernel of (8,32)
// blocks in 16 zmm registers (AVX2: (6,16) and (4,16) blocks in up to 15 ymm registers), products
// summed in k order.
//
// Why not OpenBLAS alone: tide calls single-threaded sgemm per fixed tile of C (gemm.h, for
// bits that do not depend on the thread count), and every tile packs its operands again: 15%
// of a GPT l6 training step went to OpenBLAS's packing copies on Zen 4, and a weight gradient
// of few tiles leaves a core idle. This path packs each operand once and splits the larger
// one's panels between the threads (bench/RESULTS.md, "An f32 GEMM of tide's own").
//
// Reproducibility: every output element is one FMA chain over k = 0..K-1 (f32 partial sums
// stored and reloaded exactly between blocks of K), so its bits depend only on its row of op(A),
// its column of op(B) and K (the same on both instruction sets); they differ from OpenBLAS's,
// whose kernel sums in another order.

#include <algorithm>
#include <cstdint>
#include <string_view>

#include "tide/kernels/cpu/gemm_packed.h"

namespace tide::cpu {

enum class F32GemmPath {
  kOpenBlas,  // gemm.h: OpenBLAS sgemm per fixed tile of C, any CPU
  kAvx512,    // gemm_f32: AVX-512 F/BW/VL/DQ
  kAvx2,      // gemm_f32: AVX2 + FMA (gemm_f32_avx2.cpp)
};

std::string_view f32_gemm_path_name(F32GemmPath p);
bool f32_gemm_path_supported(F32GemmPath p);
// The path the f32 matmul ops take: AVX-512 on an AMD CPU that has it (Zen 4 and later, where
// it was measured faster), else OpenBLAS, unless the environment variable TIDE_CPU_F32_GEMM
// ("avx512", "avx2" or "openblas") chose one (an unknown or unsupported value is an error naming
// the choices), or set_f32_gemm_path did. avx2 is never the default (slower than OpenBLAS's
// kernel where measured); it gives a CPU without AVX-512 the avx512 path's bits, so that a run
// there and one on a Zen 4 multiply alike.
F32GemmPath f32_gemm_path();
// Overrides the path for the whole process (tests, benchmarks); throws if p is not supported.
void set_f32_gemm_path(F32GemmPath p);
// How many products gemm_f32 has computed since the process started.
int64_t f32_gemm_calls();

// Row-major C(M,N) <- op(A) @ op(B) with `epilogue` (bias: N floats for kAddBias), every
// matrix f32, C with leading dimension ldc, on the instruction set of f32_gemm_path() (avx512
// or avx2; not while the path is openblas).
void gemm_f32(int64_t M, int64_t N, int64_t K, const GemmOperand& A, const GemmOperand& B, float* C,
              int64_t ldc, GemmEpilogue epilogue, const float* bias = nullptr);

namespace f32_detail {
// Where the 16 lanes of a packed tile come from, for both instruction sets: lane 0's first value,
// the stride between lanes (lanes_contiguous_in_k) or between values of k, and how many lanes
// there are (16, or fewer at the end of op(A)'s rows or op(B)'s columns).
struct TileSource {
  const float* p;
  int64_t ld;
  bool lanes_contiguous_in_k;
  int64_t lanes;
};
// Row tile r0..r0+15 of op(A) (M rows): A stored (M,K) has a row contiguous in k; stored (K,M),
// a k row holds the 16 rows.
inline TileSource a_tile_source(const GemmOperand& a, int64_t M, int64_t r0) {
  const auto* A = static_cast<const float*>(a.p);
  return {a.trans ? A + r0 : A + r0 * a.ld, a.ld, !a.trans, std::clamp<int64_t>(M - r0, 0, 16)};
}
// Column tile c0..c0+15 of op(B) (N columns): B stored (N,K) has a column contiguous in k;
// stored (K,N), a k row holds the 16 columns.
inline TileSource b_tile_source(const GemmOperand& b, int64_t N, int64_t c0) {
  const auto* B = static_cast<const float*>(b.p);
  return {b.trans ? B + c0 * b.ld : B + c0, b.ld, b.trans, std::clamp<int64_t>(N - c0, 0, 16)};
}

// gemm_f32_kernels.cpp (AVX-512 by target attribute), gemm_packed.h's PackTile and Kernel32x32.
// A chunk of a packed tile is 16 values of K for its 16 rows (columns), [k][lane]: 256 f32.
packed_detail::PackTileFn pack_a_tile, pack_b_tile;
packed_detail::Kernel32x32Fn kernel_32x32;
}  // namespace f32_detail
namespace f32_avx2_detail {  // gemm_f32_avx2.cpp: the same tiles, AVX2 + FMA
packed_detail::PackTileFn pack_a_tile, pack_b_tile;
packed_detail::Kernel32x32Fn kernel_32x32;
packed_detail::StoreBlockFn store_block;
}  // namespace f32_avx2_detail

}  // namespace tide::cpu

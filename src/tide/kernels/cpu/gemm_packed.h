#pragma once
// The driver shared by tide's own GEMMs (gemm_bf16.h: bf16 on AMX or AVX512-BF16; gemm_f32.h:
// f32 on AVX-512 FMA): both operands packed into tiles of 16 rows of op(A) or 16 columns of
// op(B) (1 KiB per chunk of K), the smaller operand packed whole and shared by the threads, the
// larger one packed a block of panels at a time by the thread that computes that block (so its
// packed copy stays in that core's L2 while the shared panels stream past), and a microkernel
// that computes (32,32) blocks of C in f32. Each operand is packed once per call: OpenBLAS
// called per tile (gemm.h) packs the shared operand again for every tile.
//
// Reproducibility: each format's microkernel sums an element's products in one fixed order over
// K, and a block of K's f32 sums are stored and reloaded exactly, so an element's bits depend
// only on its row of op(A), its column of op(B) and K: not on M, N, the blocking or the number
// of threads.

#include <atomic>
#include <cstdint>

#include "tide/core/dtype.h"

namespace tide::cpu {

// A factor of a packed GEMM, as gemm.h's arguments: op(A) is (M,K), A stored (M,K) with leading
// dimension ld, or (K,M) when trans; op(B) is (K,N), B stored (K,N), or (N,K) when trans.
struct GemmOperand {
  const void* p;
  int64_t ld;
  bool trans;
  DType dtype;
};

// How a packed GEMM writes each element of its output C from the f32 sum s of its products:
//   kOverwrite:  C = s
//   kAddBias:    C = bias[j] + s        (bias: N floats, one per column)
//   kAccumulate: C = C + s
// in f32, rounded to nearest-even once into a bf16 C.
enum class GemmEpilogue { kOverwrite, kAddBias, kAccumulate };

namespace packed_detail {

// One packing and microkernel. A packed tile holds, per chunk of chunk_k values of K, 1 KiB:
// `terms` such blocks for a factor split into terms (gemm_bf16.h's f32 factors), else one.
// pack_a: row tile r0..r0+15 of op(A) (M rows, K columns) into kc chunks at dst; pack_b: column
// tile c0..c0+15 of op(B) (K rows, N columns); both zero where the rows, columns or K run out.
// kernel: the f32 (32,32) block c (row stride 32) = A panel @ B panel over chunks [k0, k1),
// added to c's values when `accumulate`; a panel is two tiles, the second `kc * terms` chunks on.
// (The function types: a format's header declares its pieces with them.)
using PackTileFn = void(uint16_t* dst, const GemmOperand& x, int64_t rows, int64_t K, int64_t kc,
                        int terms, int64_t first);
using Kernel32x32Fn = void(const uint16_t* a, int a_terms, const uint16_t* b, int b_terms,
                           int64_t kc, int64_t k0, int64_t k1, bool accumulate, float* c);
// store: the valid (m, n) corner of the f32 block s (row stride 32) into C at (i0, j0), with the
// epilogue (store_block below, or a format's own for CPUs without AVX-512).
using StoreBlockFn = void(const float* s, void* C, DType c_dtype, int64_t ldc, int64_t i0,
                          int64_t j0, int64_t m, int64_t n, GemmEpilogue e, const float* bias);
using PackTile = PackTileFn*;
using Kernel32x32 = Kernel32x32Fn*;
struct PackedFormat {
  int64_t chunk_k;  // values of K per 1 KiB chunk of a tile: 32 bf16 (16 rows x 32), 16 f32
  PackTile pack_a, pack_b;
  Kernel32x32 kernel;
  StoreBlockFn* store;
  bool amx_tiles;               // the kernel needs begin_tiles() on its thread (AMX)
  std::atomic<int64_t>* calls;  // counts the products this format computed
};

// Row-major C(M,N) <- op(a) @ op(b) with `e` (bias: N floats for kAddBias), or with
// c_transposed C^T (C then (N,M), element (i,j) of the product at C[j*ldc + i]; no bias).
// a_terms, b_terms: the factors' terms per chunk (1 unless the format splits them).
void gemm_packed(const PackedFormat& f, const GemmOperand& a, int a_terms, const GemmOperand& b,
                 int b_terms, int64_t M, int64_t N, int64_t K, void* C, DType c_dtype, int64_t ldc,
                 GemmEpilogue e, const float* bias, bool c_transposed);

// The AVX-512 formats' epilogue pieces (gemm_bf16_kernels.cpp): StoreBlockFn for f32 or bf16
// C; t = s transposed (c_transposed, AVX-512 formats only), both (32,32) f32 with row stride 32,
// 64-byte aligned.
StoreBlockFn store_block;
void transpose_block(const float* s, float* t);
// A path chosen once per process, on first use (`choose`), unless set() chose it before.
template <typename Path>
class PathChoice {
 public:
  Path get(Path (*choose)()) {
    int p = v_.load(std::memory_order_acquire);
    if (p < 0) {
      p = static_cast<int>(choose());
      int expected = -1;
      if (!v_.compare_exchange_strong(expected, p)) p = expected;
    }
    return static_cast<Path>(p);
  }
  void set(Path p) { v_.store(static_cast<int>(p), std::memory_order_release); }

 private:
  std::atomic<int> v_{-1};  // -1: not chosen yet
};

// Whether the CPU has AVX-512 F, BW, VL and DQ (what gemm_avx512.h's pieces need); AVX2 and FMA
// (gemm_f32_avx2.cpp's); whether it is an AMD CPU (the packed paths' defaults differ by vendor,
// as measured).
bool cpu_has_avx512();
bool cpu_has_avx2_fma();
bool amd_cpu();
// Loads the AMX tile configuration on the calling thread / releases its tile state.
void begin_tiles();
void end_tiles();

}  // namespace packed_detail
}  // namespace tide::cpu

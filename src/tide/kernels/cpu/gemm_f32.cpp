// gemm_f32.h: path choice, and the AVX-512 and AVX2 formats for gemm_packed.h's driver (their
// packing and microkernels: gemm_f32_kernels.cpp, gemm_f32_avx2.cpp).
#include "tide/kernels/cpu/gemm_f32.h"

#include <atomic>
#include <cstdlib>

#include "tide/core/error.h"

namespace tide::cpu {

namespace {

packed_detail::PathChoice<F32GemmPath> g_f32_path;
std::atomic<int64_t> g_f32_calls{0};

F32GemmPath parse_f32_path(std::string_view s) {
  for (F32GemmPath p : {F32GemmPath::kAvx512, F32GemmPath::kAvx2, F32GemmPath::kOpenBlas})
    if (s == f32_gemm_path_name(p)) return p;
  TIDE_FAIL(
      "TIDE_CPU_F32_GEMM='{}': use avx512, avx2 or openblas (unset: avx512 on an AMD CPU that "
      "has it, else openblas)",
      s);
}

F32GemmPath choose_f32_path() {
  if (const char* env = std::getenv("TIDE_CPU_F32_GEMM"); env != nullptr && *env != '\0') {
    const F32GemmPath p = parse_f32_path(env);
    TIDE_CHECK(f32_gemm_path_supported(p), "TIDE_CPU_F32_GEMM={}: this CPU has no {}; use {}", env,
               p == F32GemmPath::kAvx512 ? "AVX-512 (F, BW, VL, DQ)" : "AVX2 and FMA",
               f32_gemm_path_supported(F32GemmPath::kAvx2) ? "avx2 or openblas" : "openblas");
    return p;
  }
  // AVX-512 by default on AMD only: on Zen 4 (two 256-bit FMA pipes) it ran the GPT products
  // 5-40% faster than OpenBLAS's tiles; on an Intel CPU with two 512-bit FMA ports OpenBLAS's
  // kernel is not yet measured against it. AVX2 never by default: on Zen 4 held to AVX2 its
  // products took 0-7% longer than OpenBLAS's Zen kernel (bench/RESULTS.md); it is there for
  // its bits.
  if (packed_detail::amd_cpu() && f32_gemm_path_supported(F32GemmPath::kAvx512))
    return F32GemmPath::kAvx512;
  return F32GemmPath::kOpenBlas;
}

const packed_detail::PackedFormat kAvx512Format{16,
                                                f32_detail::pack_a_tile,
                                                f32_detail::pack_b_tile,
                                                f32_detail::kernel_32x32,
                                                packed_detail::store_block,
                                                false,
                                                &g_f32_calls};
const packed_detail::PackedFormat kAvx2Format{16,
                                              f32_avx2_detail::pack_a_tile,
                                              f32_avx2_detail::pack_b_tile,
                                              f32_avx2_detail::kernel_32x32,
                                              f32_avx2_detail::store_block,
                                              false,
                                              &g_f32_calls};

}  // namespace

std::string_view f32_gemm_path_name(F32GemmPath p) {
  switch (p) {
    case F32GemmPath::kAvx512:
      return "avx512";
    case F32GemmPath::kAvx2:
      return "avx2";
    case F32GemmPath::kOpenBlas:
      break;
  }
  return "openblas";
}

bool f32_gemm_path_supported(F32GemmPath p) {
  switch (p) {
    case F32GemmPath::kAvx512:
      return packed_detail::cpu_has_avx512();
    case F32GemmPath::kAvx2:
      return packed_detail::cpu_has_avx2_fma();
    case F32GemmPath::kOpenBlas:
      break;
  }
  return true;
}

F32GemmPath f32_gemm_path() {
  return g_f32_path.get(choose_f32_path);
}

void set_f32_gemm_path(F32GemmPath p) {
  TIDE_CHECK(f32_gemm_path_supported(p), "f32 GEMM path '{}' is not supported by this CPU",
             f32_gemm_path_name(p));
  g_f32_path.set(p);
}

int64_t f32_gemm_calls() {
  return g_f32_calls.load(std::memory_order_relaxed);
}

void gemm_f32(int64_t M, int64_t N, int64_t K, const GemmOperand& A, const GemmOperand& B, float* C,
              int64_t ldc, GemmEpilogue epilogue, const float* bias) {
  const F32GemmPath path = f32_gemm_path();
  TIDE_ASSERT(path != F32GemmPath::kOpenBlas);
  TIDE_ASSERT(A.dtype == DType::F32 && B.dtype == DType::F32);
  TIDE_ASSERT(epilogue != GemmEpilogue::kAddBias || bias != nullptr);
  if (M <= 0 || N <= 0) return;
  packed_detail::gemm_packed(path == F32GemmPath::kAvx512 ? kAvx512Format : kAvx2Format, A, 1, B, 1,
                             M, N, K, C, DType::F32, ldc, epilogue, bias,
                             /*c_transposed=*/false);
}

}  // namespace tide::cpu

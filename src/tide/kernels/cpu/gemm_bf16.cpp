// gemm_bf16.h: path choice, and the native paths' format for gemm_packed.h's driver (their
// packing and microkernels: gemm_bf16_kernels.cpp).
#include "tide/kernels/cpu/gemm_bf16.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "tide/core/dtype.h"
#include "tide/core/error.h"

namespace tide::cpu {

namespace {

packed_detail::PathChoice<Bf16GemmPath> g_path;
std::atomic<int64_t> g_native_calls{0};

// CPUID.(EAX=7,ECX=0):EDX bits 22 (AMX-BF16) and 24 (AMX-TILE); XCR0 bits 17-18 (the OS saves
// the tile state); and Linux's permission to use it (arch_prctl ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA, Linux 5.16+), without which the first tile instruction faults.
bool amx_usable() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0 || (c & bit_OSXSAVE) == 0) return false;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  if (((d >> 22) & 1u) == 0 || ((d >> 24) & 1u) == 0) return false;
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & (3u << 17)) != (3u << 17)) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

bool avx512bf16_usable() {
#if defined(__x86_64__)
  return packed_detail::cpu_has_avx512() && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

Bf16GemmPath parse_path(std::string_view s) {
  for (Bf16GemmPath p : {Bf16GemmPath::kAmx, Bf16GemmPath::kAvx512Bf16, Bf16GemmPath::kReference})
    if (s == bf16_gemm_path_name(p)) return p;
  TIDE_FAIL(
      "TIDE_CPU_BF16_GEMM='{}': use amx, avx512bf16 or reference (unset: amx where the CPU "
      "has it, else avx512bf16 on an AMD CPU that has it, else reference)",
      s);
}

Bf16GemmPath choose_path() {
  if (const char* env = std::getenv("TIDE_CPU_BF16_GEMM"); env != nullptr && *env != '\0') {
    const Bf16GemmPath p = parse_path(env);
    TIDE_CHECK(bf16_gemm_path_supported(p),
               "TIDE_CPU_BF16_GEMM={}: this CPU (or kernel) cannot run it; use reference", env);
    return p;
  }
  if (bf16_gemm_path_supported(Bf16GemmPath::kAmx)) return Bf16GemmPath::kAmx;
  // AVX512-BF16 by default on AMD: Zen 4 issues a 512-bit vdpbf16ps (32 products) at the rate
  // of one 512-bit FMA (16); the GEMMs ran 1.7-2.5x faster than the widening reference there.
  // On Intel without AMX it stays opt-in until measured with this kernel: the one measurement
  // there (slower than the reference) was of a version that kept its accumulators on the stack
  // (bench/RESULTS.md, "AVX512-BF16 on AMD Zen 4").
  if (packed_detail::amd_cpu() && bf16_gemm_path_supported(Bf16GemmPath::kAvx512Bf16))
    return Bf16GemmPath::kAvx512Bf16;
  return Bf16GemmPath::kReference;
}

// The native paths' formats for gemm_packed.h's driver: 32 values of K per chunk.
packed_detail::PackedFormat format_of(Bf16GemmPath path) {
  const bool amx = path == Bf16GemmPath::kAmx;
  return {32,
          bf16_detail::pack_a_tile,
          bf16_detail::pack_b_tile,
          amx ? bf16_detail::kernel_32x32_amx : bf16_detail::kernel_32x32_avx512,
          packed_detail::store_block,
          amx,
          &g_native_calls};
}

void gemm_packed(Bf16GemmPath path, const GemmOperand& a, const GemmOperand& b, int64_t M,
                 int64_t N, int64_t K, void* C, DType c_dtype, int64_t ldc, GemmEpilogue e,
                 const float* bias, bool c_transposed) {
  // An f32 factor is three bf16 terms per chunk (gemm_bf16.h).
  const int a_terms = a.dtype == DType::F32 ? 3 : 1, b_terms = b.dtype == DType::F32 ? 3 : 1;
  packed_detail::gemm_packed(format_of(path), a, a_terms, b, b_terms, M, N, K, C, c_dtype, ldc, e,
                             bias, c_transposed);
}

}  // namespace

std::string_view bf16_gemm_path_name(Bf16GemmPath p) {
  switch (p) {
    case Bf16GemmPath::kReference:
      return "reference";
    case Bf16GemmPath::kAmx:
      return "amx";
    case Bf16GemmPath::kAvx512Bf16:
      return "avx512bf16";
  }
  return "?";
}

bool bf16_gemm_path_supported(Bf16GemmPath p) {
  switch (p) {
    case Bf16GemmPath::kReference:
      return true;
    case Bf16GemmPath::kAmx: {
      static const bool ok = amx_usable();
      return ok;
    }
    case Bf16GemmPath::kAvx512Bf16:
      return avx512bf16_usable();
  }
  return false;
}

Bf16GemmPath bf16_gemm_path() {
  return g_path.get(choose_path);
}

void set_bf16_gemm_path(Bf16GemmPath p) {
  TIDE_CHECK(bf16_gemm_path_supported(p), "bf16 GEMM path '{}' is not supported by this CPU",
             bf16_gemm_path_name(p));
  g_path.set(p);
}

int64_t bf16_gemm_native_calls() {
  return g_native_calls.load(std::memory_order_relaxed);
}

bool gemm_bf16_takes(DType a, DType b, DType c) {
  auto ok = [](DType t) { return t == DType::BF16 || t == DType::F32; };
  return ok(a) && ok(b) && ok(c) && !(a == DType::F32 && b == DType::F32);
}

void gemm_bf16(Bf16GemmPath path, int64_t M, int64_t N, int64_t K, const GemmOperand& A,
               const GemmOperand& B, void* C, DType c_dtype, int64_t ldc, GemmEpilogue epilogue,
               const float* bias) {
  TIDE_ASSERT(path != Bf16GemmPath::kReference && bf16_gemm_path_supported(path));
  TIDE_ASSERT(gemm_bf16_takes(A.dtype, B.dtype, c_dtype));
  TIDE_ASSERT(epilogue != GemmEpilogue::kAddBias || bias != nullptr);
  if (M <= 0 || N <= 0) return;
  // Both factors stored with K as their rows (the weight gradient, dout^T @ inp): one of them
  // needs a 16-bit transpose to become A tiles, the costly part of packing. Transpose the
  // smaller one: C^T = op(B)^T op(A)^T has the same products in the same order (the same bits),
  // and its (32,32) blocks are transposed on their way out.
  if (A.trans && !B.trans && M > N && epilogue != GemmEpilogue::kAddBias) {
    gemm_packed(path, GemmOperand{B.p, B.ld, true, B.dtype}, GemmOperand{A.p, A.ld, false, A.dtype},
                N, M, K, C, c_dtype, ldc, epilogue, nullptr, /*c_transposed=*/true);
    return;
  }
  gemm_packed(path, A, B, M, N, K, C, c_dtype, ldc, epilogue, bias, /*c_transposed=*/false);
}

}  // namespace tide::cpu

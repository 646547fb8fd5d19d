// gemm_bf16.h: path choice, operand packing and the OpenMP driver around the microkernels (AMX
// or AVX512-BF16, gemm_bf16_kernels.cpp).
//
// Packing (gemm_bf16.h's bf16_detail): op(A) goes into row tiles of 16 rows, op(B) into column
// tiles of 16 columns, both zero-padded to 32-row/column panels and to K chunks of 32.
// The smaller operand is packed whole and shared by the threads; the larger one is packed a
// block of panels at a time by the thread that computes that block, so its packed copy stays in
// that core's L2 while every panel of the shared operand streams past it.
#include "tide/kernels/cpu/gemm_bf16.h"

#include <cpuid.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>

#include "tide/core/dtype.h"
#include "tide/core/error.h"

namespace tide::cpu {

using bf16_detail::Operand;

namespace {

constexpr int64_t kTileElems = 512;  // one packed tile: 16 x 32 bf16

std::atomic<int> g_path{-1};  // -1: not chosen yet
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
  return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

bool amd_cpu() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_is("amd");
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
  if (amd_cpu() && bf16_gemm_path_supported(Bf16GemmPath::kAvx512Bf16))
    return Bf16GemmPath::kAvx512Bf16;
  return Bf16GemmPath::kReference;
}

struct FreeDeleter {
  void operator()(uint16_t* p) const { std::free(p); }
};
using Packed = std::unique_ptr<uint16_t[], FreeDeleter>;

Packed alloc_tiles(int64_t tiles) {
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(tiles, 1)) * kTileElems * 2;
  auto* p = static_cast<uint16_t*>(std::aligned_alloc(64, bytes));
  TIDE_CHECK(p != nullptr, "gemm_bf16: cannot allocate {} bytes for packed operands", bytes);
  return Packed(p);
}

// Packing buffers, grow-only, one set per thread (the OpenMP workers persist): once warm, a
// GEMM allocates nothing and touches no fresh pages (page faults cost as much as the packing).
// `which`: 0 the shared operand (the calling thread), 1 a worker's own panels, 2 a worker's f32
// partial sums. A buffer above kKeptBytes (a large model's whole head weight, packed) is not
// kept: it lives in `temp` for this call only.
constexpr int64_t kKeptBytes = int64_t{64} << 20;

uint16_t* scratch_tiles(int which, int64_t tiles, Packed& temp) {
  if (tiles * kTileElems * 2 > kKeptBytes) {
    temp = alloc_tiles(tiles);
    return temp.get();
  }
  thread_local Packed buf[3];
  thread_local int64_t cap[3] = {0, 0, 0};
  if (cap[which] < tiles) {
    buf[which].reset();
    buf[which] = alloc_tiles(tiles);
    cap[which] = tiles;
  }
  return buf[which].get();
}

// Chunks of K per block of the loop: a shared panel's block of K (2 tiles per chunk and term,
// 24 KiB) stays in L1 while it meets the work item's panels.
constexpr int64_t kChunksPerKBlock = 12;

// Panels per thread-owned block: as wide as keeps the packed block in L2 (4 panels of 32 at
// most), narrower while there would be fewer than two blocks per thread.
int64_t block_panels(int64_t panels, int threads) {
  int64_t bp = 4;
  while (bp > 1 && (panels + bp - 1) / bp < 2 * threads) bp /= 2;
  return bp;
}

// C = op(a) @ op(b), or with c_transposed C^T (C then (N,M), element (i,j) of the product at
// C[j*ldc + i]; no bias), through the path's microkernel.
void gemm_packed(Bf16GemmPath path, const Operand& a, const Operand& b, int64_t M, int64_t N,
                 int64_t K, void* C, DType c_dtype, int64_t ldc, Bf16Epilogue e, const float* bias,
                 bool c_transposed) {
  // An f32 factor is three bf16 terms per chunk (gemm_bf16.h).
  const int a_terms = a.dtype == DType::F32 ? 3 : 1, b_terms = b.dtype == DType::F32 ? 3 : 1;
  const int64_t kc = (K + 31) / 32;
  const int64_t pm = (M + 31) / 32, pn = (N + 31) / 32;  // 32-row / 32-column panels
  // The smaller operand is shared; blocks of the larger one's panels are the work items.
  const bool shared_a = pm <= pn;
  const int64_t shared_panels = shared_a ? pm : pn, own_panels = shared_a ? pn : pm;
  const int shared_terms = shared_a ? a_terms : b_terms, own_terms = shared_a ? b_terms : a_terms;
  const int64_t shared_tile = kc * shared_terms * kTileElems,
                own_tile = kc * own_terms * kTileElems;
  const int threads = omp_get_max_threads();
  const int64_t bp = block_panels(own_panels, threads);
  const int64_t blocks = (own_panels + bp - 1) / bp;
  const int64_t kb_chunks = std::max<int64_t>(1, kChunksPerKBlock / std::max(a_terms, b_terms));
  const int64_t kblocks = std::max<int64_t>(1, (kc + kb_chunks - 1) / kb_chunks);
  Packed shared_temp;
  uint16_t* const shared = scratch_tiles(0, 2 * shared_panels * kc * shared_terms, shared_temp);
  g_native_calls.fetch_add(1, std::memory_order_relaxed);
  const bool amx = path == Bf16GemmPath::kAmx;
  const bf16_detail::Kernel32x32 kernel =
      amx ? bf16_detail::kernel_32x32_amx : bf16_detail::kernel_32x32_avx512;

#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < 2 * shared_panels; ++t) {
      uint16_t* dst = shared + t * shared_tile;
      if (shared_a) {
        bf16_detail::pack_a_tile(dst, a, M, K, kc, a_terms, t * 16);
      } else {
        bf16_detail::pack_b_tile(dst, b, N, K, kc, b_terms, t * 16);
      }
    }
    Packed own_temp, partial_temp;
    uint16_t* const own = scratch_tiles(1, 2 * bp * kc * own_terms, own_temp);
    // One K block: the block's sums go straight to the epilogue; several: f32 partial sums of
    // every (shared panel, own panel) pair of the work item, 4 KiB each (4 tiles' worth).
    alignas(64) float s[32 * 32], st[32 * 32];
    float* const partial =
        kblocks > 1
            ? reinterpret_cast<float*>(scratch_tiles(2, 4 * shared_panels * bp, partial_temp))
            : s;
    if (amx) bf16_detail::begin_tiles();
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t p0 = blk * bp, np = std::min(bp, own_panels - p0);
      for (int64_t t = 0; t < 2 * np; ++t) {
        uint16_t* dst = own + t * own_tile;
        if (shared_a) {
          bf16_detail::pack_b_tile(dst, b, N, K, kc, b_terms, (2 * p0 + t) * 16);
        } else {
          bf16_detail::pack_a_tile(dst, a, M, K, kc, a_terms, (2 * p0 + t) * 16);
        }
      }
      for (int64_t kb = 0; kb < kblocks; ++kb) {
        const int64_t k0 = kb * kb_chunks, k1 = std::min(kc, k0 + kb_chunks);
        // Each shared panel's K block once, against the block's panels (it stays in L1).
        for (int64_t sp = 0; sp < shared_panels; ++sp) {
          const uint16_t* sh = shared + sp * 2 * shared_tile;
          for (int64_t op = 0; op < np; ++op) {
            const uint16_t* ow = own + op * 2 * own_tile;
            float* c = kblocks > 1 ? partial + (sp * np + op) * 1024 : s;
            if (shared_a) {
              kernel(sh, a_terms, ow, b_terms, kc, k0, k1, kb > 0, c);
            } else {
              kernel(ow, a_terms, sh, b_terms, kc, k0, k1, kb > 0, c);
            }
            if (kb + 1 < kblocks) continue;
            const int64_t pi = shared_a ? sp : p0 + op, pj = shared_a ? p0 + op : sp;
            const int64_t i0 = pi * 32, j0 = pj * 32;
            const int64_t m = std::min<int64_t>(32, M - i0), n = std::min<int64_t>(32, N - j0);
            if (c_transposed) {
              bf16_detail::transpose_block(c, st);
              bf16_detail::store_block(st, C, c_dtype, ldc, j0, i0, n, m, e, nullptr);
            } else {
              bf16_detail::store_block(c, C, c_dtype, ldc, i0, j0, m, n, e, bias);
            }
          }
        }
      }
    }
    if (amx) bf16_detail::end_tiles();
  }
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
  int p = g_path.load(std::memory_order_acquire);
  if (p < 0) {
    p = static_cast<int>(choose_path());
    int expected = -1;
    if (!g_path.compare_exchange_strong(expected, p)) p = expected;
  }
  return static_cast<Bf16GemmPath>(p);
}

void set_bf16_gemm_path(Bf16GemmPath p) {
  TIDE_CHECK(bf16_gemm_path_supported(p), "bf16 GEMM path '{}' is not supported by this CPU",
             bf16_gemm_path_name(p));
  g_path.store(static_cast<int>(p), std::memory_order_release);
}

int64_t bf16_gemm_native_calls() {
  return g_native_calls.load(std::memory_order_relaxed);
}

bool gemm_bf16_takes(DType a, DType b, DType c) {
  auto ok = [](DType t) { return t == DType::BF16 || t == DType::F32; };
  return ok(a) && ok(b) && ok(c) && !(a == DType::F32 && b == DType::F32);
}

void gemm_bf16(Bf16GemmPath path, int64_t M, int64_t N, int64_t K, const GemmOperand& A,
               const GemmOperand& B, void* C, DType c_dtype, int64_t ldc, Bf16Epilogue epilogue,
               const float* bias) {
  TIDE_ASSERT(path != Bf16GemmPath::kReference && bf16_gemm_path_supported(path));
  TIDE_ASSERT(gemm_bf16_takes(A.dtype, B.dtype, c_dtype));
  TIDE_ASSERT(epilogue != Bf16Epilogue::kAddBias || bias != nullptr);
  if (M <= 0 || N <= 0) return;
  // Both factors stored with K as their rows (the weight gradient, dout^T @ inp): one of them
  // needs a 16-bit transpose to become A tiles, the costly part of packing. Transpose the
  // smaller one: C^T = op(B)^T op(A)^T has the same products in the same order (the same bits),
  // and its (32,32) blocks are transposed on their way out.
  if (A.trans && !B.trans && M > N && epilogue != Bf16Epilogue::kAddBias) {
    gemm_packed(path, Operand{B.p, B.ld, true, B.dtype}, Operand{A.p, A.ld, false, A.dtype}, N, M,
                K, C, c_dtype, ldc, epilogue, nullptr, /*c_transposed=*/true);
    return;
  }
  gemm_packed(path, A, B, M, N, K, C, c_dtype, ldc, epilogue, bias, /*c_transposed=*/false);
}

}  // namespace tide::cpu

// Dispatch of the CPU AdamW: path selection, the non-finite prescan, OpenMP over tiles.

#include "tide/optim/fp_contract_off.h"  // first: see there

#include "tide/optim/adamw_cpu.h"

#include <cpuid.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "tide/core/error.h"
#include "tide/optim/adamw_element.h"

namespace tide {

std::string_view simd_path_name(SimdPath p) {
  switch (p) {
    case SimdPath::kAuto:
      return "auto";
    case SimdPath::kScalar:
      return "scalar";
    case SimdPath::kAvx2:
      return "avx2";
    case SimdPath::kAvx512:
      return "avx512";
  }
  return "?";
}

SimdPath parse_simd_path(std::string_view s) {
  for (SimdPath p : {SimdPath::kAuto, SimdPath::kScalar, SimdPath::kAvx2, SimdPath::kAvx512})
    if (s == simd_path_name(p)) return p;
  TIDE_FAIL("unknown SIMD path '{}'; use one of auto, scalar, avx2, avx512", s);
}

namespace {
// CPUID leaf 1, ECX bit 29 (clang before 16 has no __builtin_cpu_supports("f16c")).
bool cpu_has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}
}  // namespace

bool simd_path_supported(SimdPath p) {
  switch (p) {
    case SimdPath::kAuto:
    case SimdPath::kScalar:
      return true;
    case SimdPath::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
    case SimdPath::kAvx512:
      return __builtin_cpu_supports("avx512f");
  }
  return false;
}

SimdPath best_simd_path() {
  if (simd_path_supported(SimdPath::kAvx512)) return SimdPath::kAvx512;
  if (simd_path_supported(SimdPath::kAvx2)) return SimdPath::kAvx2;
  return SimdPath::kScalar;
}

namespace {

// A NaN or Inf has all exponent bits set, in every format. omp simd: vectorised (GCC -O2 does
// not vectorise this reduction by itself, and the scalar loop is 3x slower than memory).
template <typename T, T kExp>
bool any_nonfinite(const T* x, int64_t begin, int64_t end) {
  int bad = 0;
#pragma omp simd reduction(| : bad)
  for (int64_t i = begin; i < end; ++i) bad |= (x[i] & kExp) == kExp;
  return bad != 0;
}

// Elements [begin, end) of a gradient buffer.
bool range_has_nonfinite(const void* grad, DType dtype, int64_t begin, int64_t end) {
  switch (dtype) {
    case DType::F32:
      return any_nonfinite<uint32_t, 0x7f800000u>(static_cast<const uint32_t*>(grad), begin, end);
    case DType::BF16:
      return any_nonfinite<uint16_t, 0x7f80u>(static_cast<const uint16_t*>(grad), begin, end);
    case DType::F16:
      return any_nonfinite<uint16_t, 0x7c00u>(static_cast<const uint16_t*>(grad), begin, end);
    default:
      TIDE_FAIL("gradients of dtype {} cannot be checked for NaN/Inf; use f32, bf16 or f16",
                dtype_name(dtype));
  }
}

bool aligned64(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 64 == 0;
}

constexpr int64_t kScanBlock = 1 << 16;

}  // namespace

bool has_nonfinite(const void* grad, DType dtype, int64_t n, int threads) {
  if (threads <= 0) threads = omp_get_max_threads();
  range_has_nonfinite(grad, dtype, 0, 0);  // rejects a bad dtype outside the parallel region
  const int64_t blocks = (n + kScanBlock - 1) / kScanBlock;
  int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad) num_threads(threads) if (blocks > 1)
  for (int64_t b = 0; b < blocks; ++b)
    bad |= range_has_nonfinite(grad, dtype, b * kScanBlock, std::min(n, (b + 1) * kScanBlock));
  return bad != 0;
}

bool adamw_cpu(const AdamWChunk& c, const AdamWHyper& h, const AdamWStep& s,
               const AdamWCpuOptions& opt) {
  check_adamw_args(h, s);
  check_adamw_chunk(c);
  TIDE_CHECK(opt.tile > 0 && opt.tile % 16 == 0,
             "AdamW tile size {} must be a positive multiple of 16 (one AVX-512 vector)", opt.tile);
  SimdPath path = opt.path == SimdPath::kAuto ? best_simd_path() : opt.path;
  TIDE_CHECK(simd_path_supported(path),
             "SIMD path '{}' is not supported by this CPU (missing {}); use path auto or scalar",
             simd_path_name(path), path == SimdPath::kAvx512 ? "avx512f" : "avx2/fma/f16c");
  if (c.n == 0) return true;
  const int threads = opt.threads > 0 ? opt.threads : omp_get_max_threads();

  const AdamWScalars k = adamw_scalars(h, s);
  // Streaming stores need the streamed arrays aligned at each tile start; tiles are
  // multiples of 16 elements, so 64-byte aligned bases suffice.
  Streaming nt = c.n >= opt.nontemporal_min ? opt.nontemporal : Streaming::kNone;
  if (c.param_out && !aligned64(c.param_out)) nt = Streaming::kNone;
  if (nt == Streaming::kAll && !(aligned64(c.master) && aligned64(c.m) && aligned64(c.v)))
    nt = Streaming::kParamCopy;
  const int64_t tiles = (c.n + opt.tile - 1) / opt.tile;
  const bool prescan = opt.check == FiniteCheck::kPrescan;
  // One parallel region for scan and update: on a busy machine every fork/join can cost a
  // scheduler time slice. Both loops split the tiles the same way, so each thread updates
  // the tiles it has just scanned (still in its cache when the chunk is small).
  int bad = 0;
#pragma omp parallel num_threads(threads) if (tiles > 1)
  {
    if (prescan) {
#pragma omp for schedule(static) reduction(| : bad)
      for (int64_t t = 0; t < tiles; ++t)
        bad |= range_has_nonfinite(c.grad, c.grad_dtype, t * opt.tile,
                                   std::min(c.n, (t + 1) * opt.tile));
    }
    // The reduction's barrier has passed: every thread sees the final verdict. A non-finite
    // gradient anywhere means nothing is written anywhere.
    if (!bad) {
#pragma omp for schedule(static)
      for (int64_t t = 0; t < tiles; ++t) {
        const int64_t b = t * opt.tile, e = std::min(c.n, b + opt.tile);
        switch (path) {
          case SimdPath::kAvx512:
            optim_detail::adamw_range_avx512(c, k, b, e, nt);
            break;
          case SimdPath::kAvx2:
            optim_detail::adamw_range_avx2(c, k, b, e, nt);
            break;
          default:
            optim_detail::adamw_range_scalar(c, k, b, e);
            break;
        }
      }
    }
  }
  return bad == 0;
}

}  // namespace tide

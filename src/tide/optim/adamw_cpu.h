#pragma once
// The fast CPU AdamW (ZeRO-Offload's "CPU Adam"): one pass over a chunk that reads the fp32
// master params, the gradients (f32/bf16/f16), m and v, and writes master, m, v and the
// compute-precision copy of the params that goes back to the device. It is memory-bound:
// with f32 gradients and a bf16 copy it moves 30 bytes per parameter (read 4+4+4+4, write
// 4+4+4+2), so it is tuned for bandwidth (OpenMP over contiguous tiles, streaming stores) and
// vectorised with AVX2+FMA+F16C or AVX-512F, chosen at run time.
//
// Non-finite gradients. A step with a NaN/Inf gradient must leave master, m and v untouched
// (the fp16 loss scaler then skips it). An in-place update cannot be undone bitwise without a
// copy of the old state (12 more bytes per parameter), so the verdict must be known before
// the first write. Two ways to get it:
//  * FiniteCheck::kPrescan (default, safe for any caller): a read-only pass over the
//    gradients first (2-4 bytes per parameter more traffic); if it finds a non-finite value
//    nothing is written and adamw_cpu returns false.
//  * FiniteCheck::kCheckedByCaller: the trainer already knows, because the gradient-norm pass
//    it runs anyway for clipping (grad_norm_squared) returns a non-finite norm exactly when a
//    gradient is non-finite. That is where the check is folded in: one read of the gradients
//    gives both the clip coefficient and the skip verdict, and the verdict has to be global
//    (all chunks, all data-parallel ranks: an all-reduce) before any chunk is updated anyway.
//    The update pass then runs without a check.

#include <cstdint>
#include <string_view>

#include "tide/optim/adamw.h"

namespace tide {

enum class SimdPath { kAuto, kScalar, kAvx2, kAvx512 };

std::string_view simd_path_name(SimdPath p);
// Parses "auto", "scalar", "avx2", "avx512"; throws a tide::Error listing them otherwise.
SimdPath parse_simd_path(std::string_view s);
// Whether this CPU can run path p (kAuto and kScalar: always).
bool simd_path_supported(SimdPath p);
// The path kAuto picks on this CPU: AVX-512F if present, else AVX2 (with FMA and F16C), else
// scalar.
SimdPath best_simd_path();

enum class FiniteCheck { kPrescan, kCheckedByCaller };

// Which written arrays use streaming (non-temporal) stores. master, m and v are read just
// before they are written, so their lines are already in cache and a streaming store only
// forces an early write-back; the compute-precision copy is write-only, so streaming it
// skips the read-for-ownership of its lines (2 of the 30 bytes per parameter).
enum class Streaming { kNone, kParamCopy, kAll };

struct AdamWCpuOptions {
  SimdPath path = SimdPath::kAuto;
  FiniteCheck check = FiniteCheck::kPrescan;
  // Elements per OpenMP work item. Each thread gets one contiguous run of tiles (static
  // schedule) so the hardware prefetchers see long sequential streams.
  int64_t tile = 16384;
  // Streaming stores, used only when the arrays concerned are 64-byte aligned and the chunk
  // has at least nontemporal_min elements (a chunk that fits in the last-level cache is
  // better left there). bench_adam --sweep measures the choices; see docs/optimizer.md.
  Streaming nontemporal = Streaming::kParamCopy;
  int64_t nontemporal_min = 1 << 21;
  int threads = 0;  // 0: OpenMP's default
};

// Applies one AdamW step to the chunk. Returns true when the step was applied; false when
// the prescan found a non-finite gradient (then nothing was written). With kCheckedByCaller
// it always returns true. Throws a tide::Error if the forced path is not supported by this CPU.
[[nodiscard]] bool adamw_cpu(const AdamWChunk& c, const AdamWHyper& h, const AdamWStep& s,
                             const AdamWCpuOptions& opt = {});

// True if any of the n gradients is NaN or +-Inf (OpenMP, reads only).
bool has_nonfinite(const void* grad, DType dtype, int64_t n, int threads = 0);

}  // namespace tide

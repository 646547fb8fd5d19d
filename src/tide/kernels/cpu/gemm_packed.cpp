// gemm_packed.h's driver: the packing buffers and the OpenMP loop around a format's microkernel.
#include "tide/kernels/cpu/gemm_packed.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "tide/core/error.h"

namespace tide::cpu::packed_detail {

namespace {

constexpr int64_t kTileElems = 512;  // uint16_t per 1 KiB chunk of a packed tile

struct FreeDeleter {
  void operator()(uint16_t* p) const { std::free(p); }
};
using Packed = std::unique_ptr<uint16_t[], FreeDeleter>;

Packed alloc_tiles(int64_t tiles) {
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(tiles, 1)) * kTileElems * 2;
  auto* p = static_cast<uint16_t*>(std::aligned_alloc(64, bytes));
  TIDE_CHECK(p != nullptr, "gemm: cannot allocate {} bytes for packed operands", bytes);
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

// Values of K per block of the loop: a shared panel's block of K (24 KiB of bf16, 48 of f32)
// meets every panel of the work item before the next block (measured on Zen 4: f32 blocks of
// 384 ran 5-10% faster than blocks of 128).
constexpr int64_t kKPerBlock = 384;

// Panels per thread-owned block: 4, 2 or 1, whichever gives the busiest thread the fewest
// panels, the widest of those (a wide block streams the shared operand fewer times, and 4
// panels of 32 keep the packed block in L2). 36 panels on 2 threads: blocks of 4 give one
// thread 20 panels, of 2 give each 18. The bits do not depend on it (gemm_packed.h).
int64_t block_panels(int64_t panels, int threads) {
  int64_t best = 4, best_load = INT64_MAX;
  for (int64_t bp = 4; bp >= 1; bp /= 2) {
    const int64_t blocks = (panels + bp - 1) / bp;
    const int64_t load = (blocks + threads - 1) / threads * bp;
    if (load < best_load) best = bp, best_load = load;
  }
  return best;
}

}  // namespace

bool cpu_has_avx512() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return has;  // asked on every GEMM call (gemm_f32's check)
#else
  return false;
#endif
}

bool cpu_has_avx2_fma() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
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

void gemm_packed(const PackedFormat& f, const GemmOperand& a, int a_terms, const GemmOperand& b,
                 int b_terms, int64_t M, int64_t N, int64_t K, void* C, DType c_dtype, int64_t ldc,
                 GemmEpilogue e, const float* bias, bool c_transposed) {
  const int64_t kc = (K + f.chunk_k - 1) / f.chunk_k;
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
  const int64_t kb_chunks =
      std::max<int64_t>(1, kKPerBlock / f.chunk_k / std::max(a_terms, b_terms));
  const int64_t kblocks = std::max<int64_t>(1, (kc + kb_chunks - 1) / kb_chunks);
  Packed shared_temp;
  uint16_t* const shared = scratch_tiles(0, 2 * shared_panels * kc * shared_terms, shared_temp);
  f.calls->fetch_add(1, std::memory_order_relaxed);

#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < 2 * shared_panels; ++t) {
      uint16_t* dst = shared + t * shared_tile;
      if (shared_a) {
        f.pack_a(dst, a, M, K, kc, a_terms, t * 16);
      } else {
        f.pack_b(dst, b, N, K, kc, b_terms, t * 16);
      }
    }
    Packed own_temp, partial_temp;
    uint16_t* const own = scratch_tiles(1, 2 * bp * kc * own_terms, own_temp);
    // One K block: the block's sums go straight to the epilogue; several: f32 partial sums of
    // every (shared panel, own panel) pair of the work item, 4 KiB each (4 chunks' worth).
    alignas(64) float s[32 * 32], st[32 * 32];
    float* const partial =
        kblocks > 1
            ? reinterpret_cast<float*>(scratch_tiles(2, 4 * shared_panels * bp, partial_temp))
            : s;
    if (f.amx_tiles) begin_tiles();
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t p0 = blk * bp, np = std::min(bp, own_panels - p0);
      for (int64_t t = 0; t < 2 * np; ++t) {
        uint16_t* dst = own + t * own_tile;
        if (shared_a) {
          f.pack_b(dst, b, N, K, kc, b_terms, (2 * p0 + t) * 16);
        } else {
          f.pack_a(dst, a, M, K, kc, a_terms, (2 * p0 + t) * 16);
        }
      }
      for (int64_t kb = 0; kb < kblocks; ++kb) {
        const int64_t k0 = kb * kb_chunks, k1 = std::min(kc, k0 + kb_chunks);
        // Each shared panel's K block once, against the block's panels.
        for (int64_t sp = 0; sp < shared_panels; ++sp) {
          const uint16_t* sh = shared + sp * 2 * shared_tile;
          for (int64_t op = 0; op < np; ++op) {
            const uint16_t* ow = own + op * 2 * own_tile;
            float* c = kblocks > 1 ? partial + (sp * np + op) * 1024 : s;
            if (shared_a) {
              f.kernel(sh, a_terms, ow, b_terms, kc, k0, k1, kb > 0, c);
            } else {
              f.kernel(ow, a_terms, sh, b_terms, kc, k0, k1, kb > 0, c);
            }
            if (kb + 1 < kblocks) continue;
            const int64_t pi = shared_a ? sp : p0 + op, pj = shared_a ? p0 + op : sp;
            const int64_t i0 = pi * 32, j0 = pj * 32;
            const int64_t m = std::min<int64_t>(32, M - i0), n = std::min<int64_t>(32, N - j0);
            if (c_transposed) {
              transpose_block(c, st);
              f.store(st, C, c_dtype, ldc, j0, i0, n, m, e, nullptr);
            } else {
              f.store(c, C, c_dtype, ldc, i0, j0, m, n, e, bias);
            }
          }
        }
      }
    }
    if (f.amx_tiles) end_tiles();
  }
}

}  // namespace tide::cpu::packed_detail

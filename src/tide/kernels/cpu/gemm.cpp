#include "tide/kernels/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>

namespace tide::cpu {

namespace {
// Tile of C per sgemm call: large enough that OpenBLAS runs at full speed (packing costs
// (kTileM + kTileN) * K loads against 2 * kTileM * kTileN * K flops), small enough that a
// transformer's matrices give several tiles per thread.
constexpr int64_t kTileM = 256;
constexpr int64_t kTileN = 512;
// A product with fewer tiles than this gets smaller ones (halving the longer side of the
// tile, down to kMinTile), so that a small product still spreads over the cores: the weight
// gradient of a C = 192 layer, (192,192) or (576,192), was one to three tiles, one or two busy
// threads. Only products of at least kSplitWork multiply-adds (about 40 us on one core) are split
// so: below that a second thread saves less than waking it costs.
constexpr int64_t kMinTiles = 8;
constexpr int64_t kMinTile = 64;
constexpr int64_t kSplitWork = int64_t{1} << 22;

struct Tiles {
  int64_t m, n;
};

// A function of the shape only, so every element keeps its sgemm call geometry whatever the
// thread count.
Tiles tiles_for(int64_t M, int64_t N, int64_t K) {
  Tiles t{kTileM, kTileN};
  auto count = [&] { return ((M + t.m - 1) / t.m) * ((N + t.n - 1) / t.n); };
  while (M * N * K >= kSplitWork && count() < kMinTiles) {
    if (t.n >= t.m && t.n > kMinTile) {
      t.n /= 2;
    } else if (t.m > kMinTile) {
      t.m /= 2;
    } else {
      break;
    }
  }
  return t;
}
}  // namespace

// Checked on every gemm call (it is a cheap read) because anything in the process may have
// changed the setting since.
void pin_openblas_to_one_thread() {
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

void gemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                 int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(M), static_cast<int>(N),
              static_cast<int>(K), alpha, A, static_cast<int>(lda), B, static_cast<int>(ldb), beta,
              C, static_cast<int>(ldc));
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  pin_openblas_to_one_thread();
  const Tiles tile = tiles_for(M, N, K);
  const int64_t tiles_m = (M + tile.m - 1) / tile.m, tiles_n = (N + tile.n - 1) / tile.n;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t tm = 0; tm < tiles_m; ++tm) {
    for (int64_t tn = 0; tn < tiles_n; ++tn) {
      const int64_t i0 = tm * tile.m, j0 = tn * tile.n;
      const int64_t m = std::min(tile.m, M - i0), n = std::min(tile.n, N - j0);
      // Rows i0.. of op(A): rows of A, or columns of A when transposed; likewise for B.
      const float* a = trans_a ? A + i0 : A + i0 * lda;
      const float* b = trans_b ? B + j0 * ldb : B + j0;
      cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                  trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                  static_cast<int>(K), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb),
                  beta, C + i0 * ldc + j0, static_cast<int>(ldc));
    }
  }
}

}  // namespace tide::cpu

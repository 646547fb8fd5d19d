#pragma once
// Row-major C = alpha * op(A) @ op(B) + beta * C through OpenBLAS, reproducible bit for bit
// whatever the number of threads.
//
// Why not just cblas_sgemm: OpenBLAS's own threading splits the work differently for each
// thread count, and its results then differ in the last bits (measured with OpenBLAS 0.3.21,
// e.g. M=51, N=480, K=160: 1 thread != 2 threads). So OpenBLAS is pinned to one thread and
// tide splits C into tiles of a FIXED size (a function of the shapes only), one single-threaded
// sgemm per tile, the tiles spread over OpenMP threads. Each element is always computed by the
// same sgemm call geometry, so the result cannot depend on the thread count.

#include <cstdint>

namespace tide::cpu {

// op(A) is (M,K): A stored (M,K) with leading dimension lda, or (K,M) when trans_a.
// op(B) is (K,N): B stored (K,N) with leading dimension ldb, or (N,K) when trans_b.
// C is (M,N) with leading dimension ldc.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// The same product as ONE single-threaded sgemm call, for a kernel that spreads many small
// independent products over its own OpenMP threads (attention: one per (batch, head)). Call
// pin_openblas_to_one_thread() once before the parallel region: it must not run inside one.
void gemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                 int64_t ldc);
// OpenBLAS must not start threads of its own (see above). A cheap read when already pinned.
void pin_openblas_to_one_thread();

}  // namespace tide::cpu

// Linear layer out = inp @ weight^T + bias on the GPU: the three products through cuBLAS
// SGEMM (plain f32, see context.cu), the bias as a broadcast before the product (as the CPU
// does) and its gradient as a deterministic column sum.
//
// cuBLAS is column-major. A row-major (R,K) matrix is, read column-major, its transpose
// (K,R) with leading dimension K; so each row-major product below is written as the
// column-major product of the transposes: (X @ Y)^T = Y^T @ X^T.
#include "tide/kernels/cuda/common.cuh"
#include "tide/kernels/cuda/context.h"
#include "tide/kernels/cuda/cuda_ops.h"

namespace tide::cuda {

namespace {

constexpr int kBlock = 256;
// Rows summed by one thread in the first pass of the bias gradient (fixed, see layernorm.cu).
constexpr int kRowsPerChunk = 64;

// out(N,OC): every row starts as the bias, and the GEMM adds the product (beta = 1).
template <typename T>
__global__ void broadcast_rows_kernel(T* out, const T* bias, int64_t N, int OC) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < N * OC) out[i] = bias[i % OC];
}

// Column sums of x(N,M), pass 1: thread (chunk r, column j) sums its kRowsPerChunk rows.
template <typename T>
__global__ void column_partials_kernel(float* partial, const T* x, int64_t N, int M) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t r = blockIdx.y;
  if (j >= M) return;
  const int64_t n0 = r * kRowsPerChunk;
  const int64_t n1 = n0 + kRowsPerChunk < N ? n0 + kRowsPerChunk : N;
  float acc = 0.0f;
  for (int64_t n = n0; n < n1; ++n) acc += to_f32(x[n * M + j]);
  partial[r * M + j] = acc;
}

// Pass 2: dst[j] += sum of the partials of column j, in chunk order.
template <typename T>
__global__ void column_finish_kernel(T* dst, const float* partial, int64_t n_chunks, int M) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= M) return;
  float acc = 0.0f;
  for (int64_t r = 0; r < n_chunks; ++r) acc += partial[r * M + j];
  dst[j] = from_f32<T>(to_f32(dst[j]) + acc);
}

// Column-major C(m,n) = alpha * op(A) op(B) + beta * C, f32.
void sgemm(const OpContext& ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
           float alpha, const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
           float* C, int64_t ldc) {
  const cublasHandle_t cublas = handles_of(ctx).cublas;
  TIDE_CUBLAS_CHECK(cublasSetStream(cublas, stream_of(ctx)));  // host-side only: cheap
  TIDE_CUBLAS_CHECK(cublasSgemm(
      cublas, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), &alpha, A,
      static_cast<int>(lda), B, static_cast<int>(ldb), &beta, C, static_cast<int>(ldc)));
}

}  // namespace

void matmul_forward(const OpContext& ctx, float* out, const float* inp, const float* weight,
                    const float* bias, int64_t N, int C, int OC) {
  if (N == 0) return;
  const cudaStream_t stream = stream_of(ctx);
  float beta = 0.0f;
  if (bias != nullptr) {
    broadcast_rows_kernel<float><<<ceil_div(N * OC, kBlock), kBlock, 0, stream>>>(out, bias, N, OC);
    TIDE_CUDA_CHECK_LAUNCH();
    beta = 1.0f;
  }
  // Row-major out(N,OC) = inp(N,C) @ weight(OC,C)^T; column-major:
  // out^T(OC,N) = weight(OC,C) @ inp^T(C,N), where weight is stored as weight^T (C,OC).
  sgemm(ctx, true, false, OC, N, C, 1.0f, weight, C, inp, C, beta, out, OC);
}

void matmul_backward_input(const OpContext& ctx, float* dinp, const float* dout,
                           const float* weight, int64_t N, int C, int OC) {
  if (N == 0) return;
  // Row-major dinp(N,C) += dout(N,OC) @ weight(OC,C); column-major:
  // dinp^T(C,N) += weight^T(C,OC) @ dout^T(OC,N), both stored as they are needed.
  sgemm(ctx, false, false, C, N, OC, 1.0f, weight, C, dout, OC, 1.0f, dinp, C);
}

void matmul_backward_weight(const OpContext& ctx, float* dweight, float* dbias, const float* dout,
                            const float* inp, int64_t N, int C, int OC) {
  if (N == 0) return;
  const cudaStream_t stream = stream_of(ctx);
  // Row-major dweight(OC,C) += dout^T(OC,N) @ inp(N,C); column-major:
  // dweight^T(C,OC) += inp^T(C,N) @ dout(N,OC), where dout is stored as dout^T (OC,N).
  sgemm(ctx, false, true, C, OC, N, 1.0f, inp, C, dout, OC, 1.0f, dweight, C);
  if (dbias == nullptr) return;
  const int64_t n_chunks = (N + kRowsPerChunk - 1) / kRowsPerChunk;
  TIDE_ASSERT(n_chunks <= 65535);  // the grid's y dimension: N up to 4M rows
  float* partial =
      static_cast<float*>(handles_of(ctx).scratch(n_chunks * OC * sizeof(float)));  // (n_chunks,OC)
  const dim3 grid(ceil_div(OC, kBlock), static_cast<unsigned int>(n_chunks));
  column_partials_kernel<float><<<grid, kBlock, 0, stream>>>(partial, dout, N, OC);
  TIDE_CUDA_CHECK_LAUNCH();
  column_finish_kernel<float>
      <<<ceil_div(OC, kBlock), kBlock, 0, stream>>>(dbias, partial, n_chunks, OC);
  TIDE_CUDA_CHECK_LAUNCH();
}

}  // namespace tide::cuda

// Linear layer out = inp @ weight^T + bias on the GPU: the three products through cuBLAS
// (cublasGemmEx, A and B in the storage type, f32 compute, in the handle's pedantic math mode,
// see context.cu), the bias as a broadcast before the product (as the CPU does) and its
// gradient as a deterministic column sum.
//
// 16-bit storage: a product that overwrites is written by cuBLAS in the storage type (one
// rounding). One that adds to the output (after the bias, and the accumulating backward
// products) goes to f32 scratch and is added by accumulate_kernel, so that the sum is rounded
// once, as the CPU reference rounds it: cuBLAS's own beta = 1 with a 16-bit C disagreed with
// it in about a quarter of the elements (H200, 2026-11-27), as rounding twice would.
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

cudaDataType_t cuda_data_type(DType dtype) {
  switch (dtype) {
    case DType::BF16:
      return CUDA_R_16BF;
    case DType::F16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;  // with_storage_type admits nothing but the three float types
  }
}

// c(n) = c + p, added in f32 and rounded once.
template <typename T>
__global__ void accumulate_kernel(T* c, const float* p, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) c[i] = from_f32<T>(to_f32(c[i]) + p[i]);
}

// Column-major C(m,n) = op(A) op(B) + (accumulate ? C : 0), A, B and C in `dtype`, f32
// compute; a 16-bit accumulation goes through f32 scratch (see the top of the file).
void gemm(const OpContext& ctx, DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n,
          int64_t k, const void* A, int64_t lda, const void* B, int64_t ldb, bool accumulate,
          void* C, int64_t ldc) {
  const cublasHandle_t cublas = handles_of(ctx).cublas;
  const cudaDataType_t ab = cuda_data_type(dtype);
  const bool via_f32 = accumulate && dtype != DType::F32;
  void* out = via_f32 ? handles_of(ctx).scratch(m * n * sizeof(float)) : C;  // f32 (m,n)
  const float alpha = 1.0f, beta = accumulate && !via_f32 ? 1.0f : 0.0f;
  TIDE_CUBLAS_CHECK(cublasSetStream(cublas, stream_of(ctx)));  // host-side only: cheap
  TIDE_CUBLAS_CHECK(cublasGemmEx(
      cublas, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), &alpha, A, ab,
      static_cast<int>(lda), B, ab, static_cast<int>(ldb), &beta, out, via_f32 ? CUDA_R_32F : ab,
      static_cast<int>(via_f32 ? m : ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (!via_f32) return;
  TIDE_ASSERT(ldc == m);  // every product here writes a whole, contiguous C
  with_storage_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    accumulate_kernel<T><<<ceil_div(m * n, kBlock), kBlock, 0, stream_of(ctx)>>>(
        static_cast<T*>(C), static_cast<const float*>(out), m * n);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void matmul_forward(const OpContext& ctx, DType dtype, void* out, const void* inp,
                    const void* weight, const void* bias, int64_t N, int C, int OC) {
  if (N == 0) return;
  const bool with_bias = bias != nullptr;
  if (with_bias) {
    with_storage_type(dtype, [&](auto tag) {
      using T = decltype(tag);
      broadcast_rows_kernel<T><<<ceil_div(N * OC, kBlock), kBlock, 0, stream_of(ctx)>>>(
          static_cast<T*>(out), static_cast<const T*>(bias), N, OC);
    });
    TIDE_CUDA_CHECK_LAUNCH();
  }
  // Row-major out(N,OC) = inp(N,C) @ weight(OC,C)^T; column-major:
  // out^T(OC,N) = weight(OC,C) @ inp^T(C,N), where weight is stored as weight^T (C,OC).
  gemm(ctx, dtype, true, false, OC, N, C, weight, C, inp, C, with_bias, out, OC);
}

void matmul_backward_input(const OpContext& ctx, DType dtype, void* dinp, const void* dout,
                           const void* weight, int64_t N, int C, int OC) {
  if (N == 0) return;
  // Row-major dinp(N,C) += dout(N,OC) @ weight(OC,C); column-major:
  // dinp^T(C,N) += weight^T(C,OC) @ dout^T(OC,N), both stored as they are needed.
  gemm(ctx, dtype, false, false, C, N, OC, weight, C, dout, OC, true, dinp, C);
}

void matmul_backward_weight(const OpContext& ctx, DType dtype, void* dweight, void* dbias,
                            const void* dout, const void* inp, int64_t N, int C, int OC) {
  if (N == 0) return;
  const cudaStream_t stream = stream_of(ctx);
  // Row-major dweight(OC,C) += dout^T(OC,N) @ inp(N,C); column-major:
  // dweight^T(C,OC) += inp^T(C,N) @ dout(N,OC), where dout is stored as dout^T (OC,N).
  gemm(ctx, dtype, false, true, C, OC, N, inp, C, dout, OC, true, dweight, C);
  if (dbias == nullptr) return;
  const int64_t n_chunks = (N + kRowsPerChunk - 1) / kRowsPerChunk;
  TIDE_ASSERT(n_chunks <= 65535);  // the grid's y dimension: N up to 4M rows
  float* partial =
      static_cast<float*>(handles_of(ctx).scratch(n_chunks * OC * sizeof(float)));  // (n_chunks,OC)
  const dim3 grid(ceil_div(OC, kBlock), static_cast<unsigned int>(n_chunks));
  with_storage_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    column_partials_kernel<T>
        <<<grid, kBlock, 0, stream>>>(partial, static_cast<const T*>(dout), N, OC);
    TIDE_CUDA_CHECK_LAUNCH();
    column_finish_kernel<T><<<ceil_div(OC, kBlock), kBlock, 0, stream>>>(static_cast<T*>(dbias),
                                                                         partial, n_chunks, OC);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

}  // namespace tide::cuda

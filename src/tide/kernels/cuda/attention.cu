// Causal multi-head self-attention core on the GPU, the straightforward version that
// materialises the (B,NH,T,T) probabilities, because the op API saves preatt and att for the
// backward pass (see ops.h). Same math as cpu/attention.cpp:
//   scores = q k^T / sqrt(HS)                     batched GEMM over the B*NH heads
//   preatt = causal softmax(scores)               one warp per row; zero above the diagonal
//   att    = preatt * dropout mask / (1-p)        mask counter from global coordinates
//   out    = att @ v                              batched GEMM
// q, k, v are first copied out of qkv(B,T,3C) into a (B,NH,T,HS) layout, in which each head
// is one contiguous (T,HS) matrix, so that one strided-batched GEMM covers all heads.
//
// The GEMMs compute the full T x T products, upper triangle included (then zeroed or unused):
// twice the necessary flops, the price of using plain cuBLAS. A flash-attention forward
// (no T x T buffer) is the natural replacement once the op API stops requiring preatt/att.
#include <cmath>

#include "tide/kernels/cuda/common.cuh"
#include "tide/kernels/cuda/context.h"
#include "tide/kernels/cuda/cuda_ops.h"

namespace tide::cuda {

namespace {

constexpr int kBlock = 256;
constexpr int kRowsPerBlock = kBlock / kWarpSize;  // softmax rows (one per warp) per block

struct Dims {
  int B, T, C, NH, HS;
  __host__ __device__ int64_t head_elems() const {
    return static_cast<int64_t>(B) * T * C;
  }  // B*NH*T*HS
};

// dst(B,NH,T,HS) = the head slices of src, where element (b,t,h,i) of src sits at
// (b*T + t) * row_stride + offset + h*HS + i (q: offset 0, k: C, v: 2C of qkv; row_stride 3C).
template <typename T>
__global__ void split_heads_kernel(float* dst, const T* src, Dims d, int row_stride, int offset) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= d.head_elems()) return;
  const int i = static_cast<int>(idx % d.HS);
  const int t = static_cast<int>(idx / d.HS % d.T);
  const int h = static_cast<int>(idx / (static_cast<int64_t>(d.HS) * d.T) % d.NH);
  const int64_t b = idx / (static_cast<int64_t>(d.HS) * d.T * d.NH);
  dst[idx] = to_f32(src[(b * d.T + t) * row_stride + offset + h * d.HS + i]);
}

// The inverse: dst[(b*T + t) * row_stride + offset + h*HS + i] (+)= src(B,NH,T,HS).
template <typename T, bool kAccumulate>
__global__ void merge_heads_kernel(T* dst, const float* src, Dims d, int row_stride, int offset) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= d.head_elems()) return;
  const int i = static_cast<int>(idx % d.HS);
  const int t = static_cast<int>(idx / d.HS % d.T);
  const int h = static_cast<int>(idx / (static_cast<int64_t>(d.HS) * d.T) % d.NH);
  const int64_t b = idx / (static_cast<int64_t>(d.HS) * d.T * d.NH);
  T* p = dst + (b * d.T + t) * row_stride + offset + h * d.HS + i;
  *p = from_f32<T>(kAccumulate ? to_f32(*p) + src[idx] : src[idx]);
}

// Dropout counter of key 0 of row `row` = (b*NH + h)*T + t of the (B,NH,T,T) buffers.
__device__ __forceinline__ uint64_t row_counter(const DropoutParams& d, int64_t row, int T,
                                                int NH) {
  const int64_t bh = row / T;
  return attention_dropout_row_counter(d, bh / NH, bh % NH, row % T);
}

// One warp per row (b,h,t) of the (B,NH,T,T) buffers. preatt holds the scaled scores on
// entry (written by the GEMM) and the probabilities on exit; att gets them after dropout.
__global__ void causal_softmax_forward_kernel(float* preatt, float* att, int64_t n_rows, int T,
                                              int NH, DropoutParams dropout) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= n_rows) return;
  const int t = static_cast<int>(row % T);  // the query position: keys 0..t are visible
  const uint64_t c0 = row_counter(dropout, row, T, NH);
  float* p = preatt + row * T;
  float* a = att + row * T;
  float maxval = -INFINITY;
  for (int t2 = lane; t2 <= t; t2 += kWarpSize) maxval = fmaxf(maxval, p[t2]);
  maxval = warp_max(maxval);
  float sum = 0.0f;
  for (int t2 = lane; t2 <= t; t2 += kWarpSize) sum += expf(p[t2] - maxval);
  const float inv = 1.0f / warp_sum(sum);
  for (int t2 = lane; t2 < T; t2 += kWarpSize) {
    if (t2 <= t) {
      const float prob = expf(p[t2] - maxval) * inv;
      p[t2] = prob;
      a[t2] = prob * dropout_multiplier(dropout, c0 + static_cast<uint64_t>(t2));
    } else {
      p[t2] = 0.0f;
      a[t2] = 0.0f;
    }
  }
}

// One warp per row: on entry dscore holds datt = dout_h @ v^T; on exit the gradient of the
// scaled scores, probs * (dprobs - sum_j probs_j dprobs_j) * scale with dprobs = datt * mask,
// and 0 above the diagonal.
__global__ void causal_softmax_backward_kernel(float* dscore, const float* preatt, int64_t n_rows,
                                               int T, int NH, float scale, DropoutParams dropout) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= n_rows) return;
  const int t = static_cast<int>(row % T);
  const uint64_t c0 = row_counter(dropout, row, T, NH);
  float* ds = dscore + row * T;
  const float* probs = preatt + row * T;
  float dot = 0.0f;
  for (int t2 = lane; t2 <= t; t2 += kWarpSize) {
    const float dprob = ds[t2] * dropout_multiplier(dropout, c0 + static_cast<uint64_t>(t2));
    ds[t2] = dprob;  // each lane rereads only its own entries below
    dot += probs[t2] * dprob;
  }
  dot = warp_sum(dot);
  for (int t2 = lane; t2 < T; t2 += kWarpSize)
    ds[t2] = t2 <= t ? probs[t2] * (ds[t2] - dot) * scale : 0.0f;
}

// Column-major strided-batched SGEMM: for each of `batch` matrices,
// C(m,n) = alpha * op(A) op(B) + beta * C. Row-major (R,K) data read column-major is its
// transpose, so each call below states the row-major product it computes.
void sgemm_batched(const OpContext& ctx, bool trans_a, bool trans_b, int m, int n, int k,
                   float alpha, const float* A, int lda, int64_t stride_a, const float* B, int ldb,
                   int64_t stride_b, float beta, float* C, int ldc, int64_t stride_c, int batch) {
  const cublasHandle_t cublas = handles_of(ctx).cublas;
  TIDE_CUBLAS_CHECK(cublasSetStream(cublas, stream_of(ctx)));  // host-side only: cheap
  TIDE_CUBLAS_CHECK(cublasSgemmStridedBatched(
      cublas, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k,
      &alpha, A, lda, stride_a, B, ldb, stride_b, &beta, C, ldc, stride_c, batch));
}

}  // namespace

void attention_forward(const OpContext& ctx, float* out, float* preatt, float* att,
                       const float* qkv, int B, int T, int C, int NH, const DropoutSpec& dropout) {
  const Dims d{B, T, C, NH, C / NH};
  const int64_t n = d.head_elems();
  if (n == 0) return;
  CudaHandles& h = handles_of(ctx);
  const cudaStream_t stream = stream_of(ctx);
  // Scratch: q, k, v, y, each (B,NH,T,HS).
  float* q = static_cast<float*>(h.scratch(4 * n * sizeof(float)));
  float* k = q + n;
  float* v = k + n;
  float* y = v + n;
  const unsigned int grid = ceil_div(n, kBlock);
  split_heads_kernel<float><<<grid, kBlock, 0, stream>>>(q, qkv, d, 3 * C, 0);
  split_heads_kernel<float><<<grid, kBlock, 0, stream>>>(k, qkv, d, 3 * C, C);
  split_heads_kernel<float><<<grid, kBlock, 0, stream>>>(v, qkv, d, 3 * C, 2 * C);
  TIDE_CUDA_CHECK_LAUNCH();

  const int batch = B * NH, HS = d.HS;
  const int64_t head = static_cast<int64_t>(T) * HS, tt = static_cast<int64_t>(T) * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  // preatt(T,T) = scale * q(T,HS) @ k(T,HS)^T per head (the scores, softmaxed in place next).
  sgemm_batched(ctx, true, false, T, T, HS, scale, k, HS, head, q, HS, head, 0.0f, preatt, T, tt,
                batch);
  const int64_t n_rows = static_cast<int64_t>(batch) * T;
  causal_softmax_forward_kernel<<<ceil_div(n_rows, kRowsPerBlock), kBlock, 0, stream>>>(
      preatt, att, n_rows, T, NH, dropout_params(dropout, T, NH));
  TIDE_CUDA_CHECK_LAUNCH();
  // y(T,HS) = att(T,T) @ v(T,HS) per head.
  sgemm_batched(ctx, false, false, HS, T, T, 1.0f, v, HS, head, att, T, tt, 0.0f, y, HS, head,
                batch);
  merge_heads_kernel<float, false><<<grid, kBlock, 0, stream>>>(out, y, d, C, 0);
  TIDE_CUDA_CHECK_LAUNCH();
}

void attention_backward(const OpContext& ctx, float* dqkv, const float* dout, const float* qkv,
                        const float* preatt, const float* att, int B, int T, int C, int NH,
                        const DropoutSpec& dropout) {
  const Dims d{B, T, C, NH, C / NH};
  const int64_t n = d.head_elems();
  if (n == 0) return;
  CudaHandles& h = handles_of(ctx);
  const cudaStream_t stream = stream_of(ctx);
  const int batch = B * NH, HS = d.HS;
  const int64_t head = static_cast<int64_t>(T) * HS, tt = static_cast<int64_t>(T) * T;
  const int64_t n_rows = static_cast<int64_t>(batch) * T;
  // Scratch: q, k, v, dy, dq, dk, dv, each (B,NH,T,HS), and dscore (B,NH,T,T).
  float* q = static_cast<float*>(h.scratch((7 * n + n_rows * T) * sizeof(float)));
  float* k = q + n;
  float* v = k + n;
  float* dy = v + n;
  float* dq = dy + n;
  float* dk = dq + n;
  float* dv = dk + n;
  float* dscore = dv + n;
  const unsigned int grid = ceil_div(n, kBlock);
  split_heads_kernel<float><<<grid, kBlock, 0, stream>>>(q, qkv, d, 3 * C, 0);
  split_heads_kernel<float><<<grid, kBlock, 0, stream>>>(k, qkv, d, 3 * C, C);
  split_heads_kernel<float><<<grid, kBlock, 0, stream>>>(v, qkv, d, 3 * C, 2 * C);
  split_heads_kernel<float><<<grid, kBlock, 0, stream>>>(dy, dout, d, C, 0);
  TIDE_CUDA_CHECK_LAUNCH();

  // y = att @ v:  datt(T,T) = dy(T,HS) @ v(T,HS)^T,  dv(T,HS) = att(T,T)^T @ dy(T,HS).
  sgemm_batched(ctx, true, false, T, T, HS, 1.0f, v, HS, head, dy, HS, head, 0.0f, dscore, T, tt,
                batch);
  sgemm_batched(ctx, false, true, HS, T, T, 1.0f, dy, HS, head, att, T, tt, 0.0f, dv, HS, head,
                batch);
  // Through dropout and softmax: datt -> dscore (scaled-score gradient, scale included).
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  causal_softmax_backward_kernel<<<ceil_div(n_rows, kRowsPerBlock), kBlock, 0, stream>>>(
      dscore, preatt, n_rows, T, NH, scale, dropout_params(dropout, T, NH));
  TIDE_CUDA_CHECK_LAUNCH();
  // scores = q @ k^T:  dq(T,HS) = dscore(T,T) @ k(T,HS),  dk(T,HS) = dscore(T,T)^T @ q(T,HS).
  sgemm_batched(ctx, false, false, HS, T, T, 1.0f, k, HS, head, dscore, T, tt, 0.0f, dq, HS, head,
                batch);
  sgemm_batched(ctx, false, true, HS, T, T, 1.0f, q, HS, head, dscore, T, tt, 0.0f, dk, HS, head,
                batch);
  // dqkv += the three gradients, back in the (B,T,3C) layout.
  merge_heads_kernel<float, true><<<grid, kBlock, 0, stream>>>(dqkv, dq, d, 3 * C, 0);
  merge_heads_kernel<float, true><<<grid, kBlock, 0, stream>>>(dqkv, dk, d, 3 * C, C);
  merge_heads_kernel<float, true><<<grid, kBlock, 0, stream>>>(dqkv, dv, d, 3 * C, 2 * C);
  TIDE_CUDA_CHECK_LAUNCH();
}

}  // namespace tide::cuda

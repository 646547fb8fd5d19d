// Causal multi-head self-attention core on the GPU, the fp32 path: cuBLAS GEMMs around
// (B,NH,T,T) scratch buffers that live only inside one call; the op keeps only the output and
// each row's log-sum-exp (ops.h), as the CPU reference does. Same math as cpu/attention.cpp:
//   scores = q k^T / sqrt(HS)                     batched GEMM over the B*NH heads
//   probs  = causal softmax(scores), lse          one warp per row; zero above the diagonal
//   att    = probs * dropout mask / (1-p)         mask counter from global coordinates
//   out    = att @ v                              batched GEMM
// The backward recomputes the scores, probs = exp(scores - lse) and att, then runs the
// products' gradients.
// q, k, v are first copied out of qkv(B,T,W) into a (B,NH,T,HS) layout, in which each head
// is one contiguous (T,HS) matrix, so that one strided-batched GEMM covers all heads.
//
// Grouped-query attention (NKV < NH kv heads, qkv rows [q: NH*HS | k: NKV*HS | v: NKV*HS],
// W = (NH + 2*NKV) * HS): the copy repeats kv head j for its G = NH/NKV query heads (as
// transformers' repeat_kv does), so the GEMMs are the multi-head ones; the backward sums the
// G per-query-head dk, dv of a kv head, in head order, as it merges them into dqkv. With
// NKV = NH (G = 1) every kernel does exactly the multi-head work.
//
// The GEMMs compute the full T x T products, upper triangle included (then zeroed or unused):
// twice the necessary flops, the price of using plain cuBLAS. In 16-bit storage without dropout
// the op runs cuDNN's fused attention instead where it can (attention_cudnn.h); this file is
// the path for f32, for dropout (tide's masks) and wherever cuDNN declines.
//
// 16-bit storage: everything between the storage tensors is f32 (q, k, v, the scores, the
// probabilities), as in the CPU reference.
#include <cmath>
#include <type_traits>

#include "tide/kernels/cuda/attention_cudnn.h"
#include "tide/kernels/cuda/common.cuh"
#include "tide/kernels/cuda/context.h"
#include "tide/kernels/cuda/cuda_ops.h"

namespace tide::cuda {

namespace {

constexpr int kBlock = 256;
constexpr int kRowsPerBlock = kBlock / kWarpSize;  // softmax rows (one per warp) per block

struct Dims {
  int B, T, C, NH, HS, NKV;
  __host__ __device__ int64_t head_elems() const {
    return static_cast<int64_t>(B) * T * C;
  }                                                    // B*NH*T*HS
  int row_stride() const { return C + 2 * NKV * HS; }  // W: 3C without grouping
  int group() const { return NH / NKV; }               // G query heads per kv head
};

// dst(B,NH,T,HS) = the head slices of src, where element (b,t,j,i) of src sits at
// (b*T + t) * row_stride + offset + j*HS + i and query head h reads src head j = h / group
// (q: offset 0, group 1; k: C and v: C + NKV*HS, group G; row_stride W).
template <typename T>
__global__ void split_heads_kernel(float* dst, const T* src, Dims d, int row_stride, int offset,
                                   int group) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= d.head_elems()) return;
  const int i = static_cast<int>(idx % d.HS);
  const int t = static_cast<int>(idx / d.HS % d.T);
  const int h = static_cast<int>(idx / (static_cast<int64_t>(d.HS) * d.T) % d.NH);
  const int64_t b = idx / (static_cast<int64_t>(d.HS) * d.T * d.NH);
  dst[idx] = to_f32(src[(b * d.T + t) * row_stride + offset + (h / group) * d.HS + i]);
}

// The inverse: dst[(b*T + t) * row_stride + offset + j*HS + i] (+)= the sum over the `group`
// query heads h = j*group .. j*group + group-1 (in that order) of src(B,NH,T,HS).
template <typename T, bool kAccumulate>
__global__ void merge_heads_kernel(T* dst, const float* src, Dims d, int row_stride, int offset,
                                   int group) {
  const int n_out = d.NH / group;  // heads written
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= d.head_elems() / group) return;
  const int i = static_cast<int>(idx % d.HS);
  const int t = static_cast<int>(idx / d.HS % d.T);
  const int j = static_cast<int>(idx / (static_cast<int64_t>(d.HS) * d.T) % n_out);
  const int64_t b = idx / (static_cast<int64_t>(d.HS) * d.T * n_out);
  const int64_t head = static_cast<int64_t>(d.T) * d.HS;  // one (T,HS) head of src
  const float* s = src + ((b * d.NH + static_cast<int64_t>(j) * group) * d.T + t) * d.HS + i;
  float sum = s[0];
  for (int g = 1; g < group; ++g) sum += s[g * head];
  T* p = dst + (b * d.T + t) * row_stride + offset + j * d.HS + i;
  *p = from_f32<T>(kAccumulate ? to_f32(*p) + sum : sum);
}

// Dropout counter of key 0 of row `row` = (b*NH + h)*T + t of the (B,NH,T,T) buffers.
__device__ __forceinline__ uint64_t row_counter(const DropoutParams& d, int64_t row, int T,
                                                int NH) {
  const int64_t bh = row / T;
  return attention_dropout_row_counter(d, bh / NH, bh % NH, row % T);
}

// One warp per row (b,h,t) of the (B,NH,T,T) buffers. probs holds the scaled scores on entry
// (written by the GEMM) and the probabilities on exit; att gets them after dropout, and lse the
// row's log-sum-exp.
__global__ void causal_softmax_forward_kernel(float* probs, float* att, float* lse, int64_t n_rows,
                                              int T, int NH, DropoutParams dropout) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= n_rows) return;
  const int t = static_cast<int>(row % T);  // the query position: keys 0..t are visible
  const uint64_t c0 = row_counter(dropout, row, T, NH);
  float* p = probs + row * T;
  float* a = att + row * T;
  float maxval = -INFINITY;
  for (int t2 = lane; t2 <= t; t2 += kWarpSize) maxval = fmaxf(maxval, p[t2]);
  maxval = warp_max(maxval);
  float sum = 0.0f;
  for (int t2 = lane; t2 <= t; t2 += kWarpSize) sum += expf(p[t2] - maxval);
  sum = warp_sum(sum);
  const float inv = 1.0f / sum;
  if (lane == 0) lse[row] = maxval + logf(sum);
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

// The backward's recomputation, one warp per row: probs holds the scaled scores on entry and
// exp(score - lse) on exit, att the same after dropout (0 above the diagonal in both).
__global__ void probs_from_lse_kernel(float* probs, float* att, const float* lse, int64_t n_rows,
                                      int T, int NH, DropoutParams dropout) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= n_rows) return;
  const int t = static_cast<int>(row % T);
  const uint64_t c0 = row_counter(dropout, row, T, NH);
  const float l = lse[row];
  float* p = probs + row * T;
  float* a = att + row * T;
  for (int t2 = lane; t2 < T; t2 += kWarpSize) {
    const float prob = t2 <= t ? expf(p[t2] - l) : 0.0f;
    p[t2] = prob;
    a[t2] = t2 <= t ? prob * dropout_multiplier(dropout, c0 + static_cast<uint64_t>(t2)) : 0.0f;
  }
}

// One warp per row: on entry dscore holds datt = dout_h @ v^T; on exit the gradient of the
// scaled scores, probs * (dprobs - sum_j probs_j dprobs_j) * scale with dprobs = datt * mask,
// and 0 above the diagonal.
__global__ void causal_softmax_backward_kernel(float* dscore, const float* probs, int64_t n_rows,
                                               int T, int NH, float scale, DropoutParams dropout) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= n_rows) return;
  const int t = static_cast<int>(row % T);
  const uint64_t c0 = row_counter(dropout, row, T, NH);
  float* ds = dscore + row * T;
  const float* p = probs + row * T;
  float dot = 0.0f;
  for (int t2 = lane; t2 <= t; t2 += kWarpSize) {
    const float dprob = ds[t2] * dropout_multiplier(dropout, c0 + static_cast<uint64_t>(t2));
    ds[t2] = dprob;  // each lane rereads only its own entries below
    dot += p[t2] * dprob;
  }
  dot = warp_sum(dot);
  for (int t2 = lane; t2 < T; t2 += kWarpSize)
    ds[t2] = t2 <= t ? p[t2] * (ds[t2] - dot) * scale : 0.0f;
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

// The scaled scores of every head into probs(B*NH,T,T) from q, k (B,NH,T,HS).
void scores(const OpContext& ctx, const float* q, const float* k, float* probs, const Dims& d) {
  const int T = d.T, HS = d.HS;
  const int64_t head = static_cast<int64_t>(T) * HS, tt = static_cast<int64_t>(T) * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  // probs(T,T) = scale * q(T,HS) @ k(T,HS)^T per head.
  sgemm_batched(ctx, true, false, T, T, HS, scale, k, HS, head, q, HS, head, 0.0f, probs, T, tt,
                d.B * d.NH);
}

// The forward for storage type S (float, __nv_bfloat16 or __half).
template <typename S>
void attention_forward_as(const OpContext& ctx, S* out, float* lse, const S* qkv, const Dims& d,
                          const DropoutSpec& dropout) {
  const int64_t n = d.head_elems();
  CudaHandles& h = handles_of(ctx);
  const cudaStream_t stream = stream_of(ctx);
  const int B = d.B, T = d.T, C = d.C, NH = d.NH, batch = B * NH, HS = d.HS;
  const int64_t head = static_cast<int64_t>(T) * HS, tt = static_cast<int64_t>(T) * T;
  const int64_t n_rows = static_cast<int64_t>(batch) * T;
  // Scratch: q, k, v, y, each (B,NH,T,HS), and the probabilities (B,NH,T,T) before and after
  // dropout.
  float* q = static_cast<float*>(h.scratch((4 * n + 2 * n_rows * T) * sizeof(float)));
  float* k = q + n;
  float* v = k + n;
  float* y = v + n;
  float* probs = y + n;
  float* dropped = probs + n_rows * T;
  const unsigned int grid = ceil_div(n, kBlock);
  const int W = d.row_stride(), G = d.group(), v_offset = C + d.NKV * HS;
  split_heads_kernel<S><<<grid, kBlock, 0, stream>>>(q, qkv, d, W, 0, 1);
  split_heads_kernel<S><<<grid, kBlock, 0, stream>>>(k, qkv, d, W, C, G);
  split_heads_kernel<S><<<grid, kBlock, 0, stream>>>(v, qkv, d, W, v_offset, G);
  TIDE_CUDA_CHECK_LAUNCH();
  scores(ctx, q, k, probs, d);
  causal_softmax_forward_kernel<<<ceil_div(n_rows, kRowsPerBlock), kBlock, 0, stream>>>(
      probs, dropped, lse, n_rows, T, NH, dropout_params(dropout, T, NH));
  TIDE_CUDA_CHECK_LAUNCH();
  // y(T,HS) = att(T,T) @ v(T,HS) per head.
  sgemm_batched(ctx, false, false, HS, T, T, 1.0f, v, HS, head, dropped, T, tt, 0.0f, y, HS, head,
                batch);
  merge_heads_kernel<S, false><<<grid, kBlock, 0, stream>>>(out, y, d, C, 0, 1);
  TIDE_CUDA_CHECK_LAUNCH();
}

template <typename S>
void attention_backward_as(const OpContext& ctx, S* dqkv, const S* dout, const S* qkv,
                           const float* lse, const Dims& d, const DropoutSpec& dropout) {
  const int64_t n = d.head_elems();
  CudaHandles& h = handles_of(ctx);
  const cudaStream_t stream = stream_of(ctx);
  const int B = d.B, T = d.T, C = d.C, NH = d.NH, batch = B * NH, HS = d.HS;
  const int64_t head = static_cast<int64_t>(T) * HS, tt = static_cast<int64_t>(T) * T;
  const int64_t n_rows = static_cast<int64_t>(batch) * T;
  // Scratch: q, k, v, dy, dq, dk, dv, each (B,NH,T,HS), and the probabilities, the same after
  // dropout and the score gradient, each (B,NH,T,T).
  float* q = static_cast<float*>(h.scratch((7 * n + 3 * n_rows * T) * sizeof(float)));
  float* k = q + n;
  float* v = k + n;
  float* dy = v + n;
  float* dq = dy + n;
  float* dk = dq + n;
  float* dv = dk + n;
  float* dscore = dv + n;
  float* probs = dscore + n_rows * T;
  float* att = probs + n_rows * T;
  const unsigned int grid = ceil_div(n, kBlock);
  const int W = d.row_stride(), G = d.group(), v_offset = C + d.NKV * HS;
  split_heads_kernel<S><<<grid, kBlock, 0, stream>>>(q, qkv, d, W, 0, 1);
  split_heads_kernel<S><<<grid, kBlock, 0, stream>>>(k, qkv, d, W, C, G);
  split_heads_kernel<S><<<grid, kBlock, 0, stream>>>(v, qkv, d, W, v_offset, G);
  split_heads_kernel<S><<<grid, kBlock, 0, stream>>>(dy, dout, d, C, 0, 1);
  TIDE_CUDA_CHECK_LAUNCH();
  // The probabilities again: the scores, exp(score - lse), the dropout mask.
  scores(ctx, q, k, probs, d);
  probs_from_lse_kernel<<<ceil_div(n_rows, kRowsPerBlock), kBlock, 0, stream>>>(
      probs, att, lse, n_rows, T, NH, dropout_params(dropout, T, NH));
  TIDE_CUDA_CHECK_LAUNCH();

  // y = att @ v:  datt(T,T) = dy(T,HS) @ v(T,HS)^T,  dv(T,HS) = att(T,T)^T @ dy(T,HS).
  sgemm_batched(ctx, true, false, T, T, HS, 1.0f, v, HS, head, dy, HS, head, 0.0f, dscore, T, tt,
                batch);
  sgemm_batched(ctx, false, true, HS, T, T, 1.0f, dy, HS, head, att, T, tt, 0.0f, dv, HS, head,
                batch);
  // Through dropout and softmax: datt -> dscore (scaled-score gradient, scale included).
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  causal_softmax_backward_kernel<<<ceil_div(n_rows, kRowsPerBlock), kBlock, 0, stream>>>(
      dscore, probs, n_rows, T, NH, scale, dropout_params(dropout, T, NH));
  TIDE_CUDA_CHECK_LAUNCH();
  // scores = q @ k^T:  dq(T,HS) = dscore(T,T) @ k(T,HS),  dk(T,HS) = dscore(T,T)^T @ q(T,HS).
  sgemm_batched(ctx, false, false, HS, T, T, 1.0f, k, HS, head, dscore, T, tt, 0.0f, dq, HS, head,
                batch);
  sgemm_batched(ctx, false, true, HS, T, T, 1.0f, q, HS, head, dscore, T, tt, 0.0f, dk, HS, head,
                batch);
  // dqkv += the three gradients, back in the (B,T,W) layout; dk and dv summed per kv head.
  const unsigned int kv_grid = ceil_div(n / G, kBlock);
  merge_heads_kernel<S, true><<<grid, kBlock, 0, stream>>>(dqkv, dq, d, W, 0, 1);
  merge_heads_kernel<S, true><<<kv_grid, kBlock, 0, stream>>>(dqkv, dk, d, W, C, G);
  merge_heads_kernel<S, true><<<kv_grid, kBlock, 0, stream>>>(dqkv, dv, d, W, v_offset, G);
  TIDE_CUDA_CHECK_LAUNCH();
}

// dst(n) += src(n), added in f32 and rounded once (cuDNN's gradient into the op's dqkv).
template <typename S>
__global__ void add_into_kernel(S* dst, const S* src, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = from_f32<S>(to_f32(dst[i]) + to_f32(src[i]));
}

}  // namespace

void attention_forward(const OpContext& ctx, DType dtype, void* out, float* lse, const void* qkv,
                       int B, int T, int C, int NH, int NKV, const DropoutSpec& dropout) {
  const Dims d{B, T, C, NH, C / NH, NKV};
  if (d.head_elems() == 0) return;
  if (cudnn_attention_forward(ctx, dtype, out, lse, qkv, B, T, C, NH, NKV, dropout.p)) return;
  with_storage_type(dtype, [&](auto tag) {
    using S = decltype(tag);
    attention_forward_as<S>(ctx, static_cast<S*>(out), lse, static_cast<const S*>(qkv), d, dropout);
  });
}

void attention_backward(const OpContext& ctx, DType dtype, void* dqkv, const void* dout,
                        const void* qkv, const float* lse, int B, int T, int C, int NH, int NKV,
                        const DropoutSpec& dropout) {
  const Dims d{B, T, C, NH, C / NH, NKV};
  if (d.head_elems() == 0) return;
  if (const void* grad =
          cudnn_attention_backward(ctx, dtype, dout, qkv, B, T, C, NH, NKV, dropout.p)) {
    const int64_t n = static_cast<int64_t>(B) * T * d.row_stride();
    with_storage_type(dtype, [&](auto tag) {
      using S = decltype(tag);
      add_into_kernel<S><<<ceil_div(n, kBlock), kBlock, 0, stream_of(ctx)>>>(
          static_cast<S*>(dqkv), static_cast<const S*>(grad), n);
    });
    TIDE_CUDA_CHECK_LAUNCH();
    return;
  }
  with_storage_type(dtype, [&](auto tag) {
    using S = decltype(tag);
    attention_backward_as<S>(ctx, static_cast<S*>(dqkv), static_cast<const S*>(dout),
                             static_cast<const S*>(qkv), lse, d, dropout);
  });
}

}  // namespace tide::cuda

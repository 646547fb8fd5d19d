// Fused softmax + cross-entropy over the vocabulary on the GPU, one block per row n of
// logits(N,V) (same math as cpu/crossentropy.cpp):
//   loss_n    = logsumexp(logits_n) - logits_n[target_n]
//   dlogits_n = (softmax(logits_n) - onehot(target_n)) * dloss
// The row maximum is subtracted before exp, and the sum of exponentials is accumulated in
// double as on the CPU (V is ~50k: an f32 sum would lose digits). Targets < 0 are ignored;
// targets >= V give a NaN loss and gradient row (no host-side check: the data loader validates
// the ids once, and a round trip per call would stall the stream).
// The fused classifier (crossentropy_forward_backward) is the backward's kernel that also writes
// the loss from the same row maximum and sum: the bits of the two kernels, one read of the row
// fewer.
#include <cmath>

#include "tide/kernels/cuda/common.cuh"
#include "tide/kernels/cuda/context.h"
#include "tide/kernels/cuda/cuda_ops.h"

namespace tide::cuda {

namespace {

constexpr int kBlock = 512;

struct RowStats {
  float maxval;
  double sum;  // sum_v exp(x_v - maxval)
};

// Max and sum of exponentials of one row, reduced over the block (every thread gets them).
template <typename T>
__device__ RowStats row_stats(const T* x, int V) {
  __shared__ float shared_max[kWarpSize];
  __shared__ double shared_sum[kWarpSize];
  float maxval = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) maxval = fmaxf(maxval, to_f32(x[v]));
  maxval = block_max(maxval, shared_max);
  double sum = 0.0;
  for (int v = threadIdx.x; v < V; v += blockDim.x) sum += expf(to_f32(x[v]) - maxval);
  sum = block_sum(sum, shared_sum);
  return {maxval, sum};
}

__device__ float loss_of(const RowStats& st, float target_logit) {
  const double lse = static_cast<double>(st.maxval) + log(st.sum);
  return static_cast<float>(lse - static_cast<double>(target_logit));
}

// dx = (softmax(x) - onehot(target)) * dloss from the row's statistics; each thread reads and
// writes only its own entries v.
template <typename T>
__device__ void gradient_row(T* dx, const T* x, int V, int32_t target, float dloss,
                             const RowStats& st) {
  const float scale = static_cast<float>(1.0 / st.sum) * dloss;  // softmax = e / sum
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    float g = expf(to_f32(x[v]) - st.maxval) * scale;
    if (v == target) g -= dloss;
    dx[v] = from_f32<T>(g);
  }
}

template <typename T>
__global__ void crossentropy_forward_kernel(float* losses, const T* logits, const int32_t* targets,
                                            int V) {
  const int64_t n = blockIdx.x;
  const int32_t target = targets[n];
  if (target < 0) {  // uniform across the block, so no thread is left waiting in a reduction
    if (threadIdx.x == 0) losses[n] = 0.0f;
    return;
  }
  if (target >= V) {  // outside the vocabulary: visible as NaN, no out-of-bounds read
    if (threadIdx.x == 0) losses[n] = __int_as_float(0x7fc00000);
    return;
  }
  const T* x = logits + n * V;  // (V)
  const RowStats st = row_stats(x, V);
  if (threadIdx.x == 0) losses[n] = loss_of(st, to_f32(x[target]));
}

// In place is safe (dlogits == logits): the reductions read the whole row, and the block
// barriers inside them complete every read before any thread writes; after that each thread
// reads and writes only its own entries v.
template <typename T>
__global__ void crossentropy_backward_kernel(T* dlogits, const T* logits, const int32_t* targets,
                                             int V, float dloss) {
  const int64_t n = blockIdx.x;
  const int32_t target = targets[n];
  const T* x = logits + n * V;
  T* dx = dlogits + n * V;
  if (target < 0 || target >= V) {  // ignored: 0; outside the vocabulary: NaN
    const float g = target < 0 ? 0.0f : __int_as_float(0x7fc00000);
    for (int v = threadIdx.x; v < V; v += blockDim.x) dx[v] = from_f32<T>(g);
    return;
  }
  const RowStats st = row_stats(x, V);
  gradient_row(dx, x, V, target, dloss, st);
}

// Both: every thread reads the target's logit before the reductions' barriers, so before any
// thread writes the row (in place).
template <typename T>
__global__ void crossentropy_forward_backward_kernel(float* losses, T* dlogits, const T* logits,
                                                     const int32_t* targets, int V, float dloss) {
  const int64_t n = blockIdx.x;
  const int32_t target = targets[n];
  const T* x = logits + n * V;
  T* dx = dlogits + n * V;
  if (target < 0 || target >= V) {  // as the two kernels: 0, or NaN outside the vocabulary
    const float g = target < 0 ? 0.0f : __int_as_float(0x7fc00000);
    if (threadIdx.x == 0) losses[n] = g;
    for (int v = threadIdx.x; v < V; v += blockDim.x) dx[v] = from_f32<T>(g);
    return;
  }
  const float target_logit = to_f32(x[target]);
  const RowStats st = row_stats(x, V);
  if (threadIdx.x == 0) losses[n] = loss_of(st, target_logit);
  gradient_row(dx, x, V, target, dloss, st);
}

}  // namespace

void crossentropy_forward(const OpContext& ctx, DType dtype, float* losses, const void* logits,
                          const int32_t* targets, int64_t N, int V) {
  if (N == 0) return;
  with_storage_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    crossentropy_forward_kernel<T><<<static_cast<unsigned int>(N), kBlock, 0, stream_of(ctx)>>>(
        losses, static_cast<const T*>(logits), targets, V);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

void crossentropy_backward(const OpContext& ctx, DType dtype, void* dlogits, const void* logits,
                           const int32_t* targets, int64_t N, int V, float dloss) {
  if (N == 0) return;
  with_storage_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    crossentropy_backward_kernel<T><<<static_cast<unsigned int>(N), kBlock, 0, stream_of(ctx)>>>(
        static_cast<T*>(dlogits), static_cast<const T*>(logits), targets, V, dloss);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

void crossentropy_forward_backward(const OpContext& ctx, DType dtype, float* losses, void* dlogits,
                                   const void* logits, const int32_t* targets, int64_t N, int V,
                                   float dloss) {
  if (N == 0) return;
  with_storage_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    crossentropy_forward_backward_kernel<T>
        <<<static_cast<unsigned int>(N), kBlock, 0, stream_of(ctx)>>>(
            losses, static_cast<T*>(dlogits), static_cast<const T*>(logits), targets, V, dloss);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

}  // namespace tide::cuda

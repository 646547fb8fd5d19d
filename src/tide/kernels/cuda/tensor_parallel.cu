// Tensor parallelism's own kernels on the GPU: the vocabulary-parallel embedding and
// cross-entropy (model/vocab_parallel.h) and sequence parallelism's row permutation
// (model/block.cpp, BlockEnv::to_shard / to_full).
//
// Why a file of their own: these are not ops of the op API (kernels/ops.h) but the pieces a
// tensor-parallel rank runs between its collectives, on its columns of the vocabulary or its
// slice of the sequence; on the CPU and the simulated device they are host loops
// (run_cpu_kernel_on), which a GPU cannot run. Each kernel here does what its CPU loop does, in
// the same order where that order is cheap to keep, so that a GPU rank computes what a CPU rank
// computes:
// - the embedding's lookup, position add and position gradient, the permutation and the
//   cross-entropy's maxima and target logits: the same f32 operations, so the same bits;
// - the embedding's scatter-add: a stable sort of this rank's (row, position) pairs, then each
//   row sums its dout rows in ascending position (embedding_grad.cuh, as embedding.cu): the CPU's
//   order, so its bits, and no float atomics;
// - the cross-entropy's sums of exp (double, a block tree instead of the CPU's serial loop) and
//   its logs and exps (CUDA's instead of glibc's): within a few ulp of the CPU, not its bits.
// Every tensor comes with its own dtype (with_storage_types), computed in f32 and rounded once.
#include <cub/device/device_radix_sort.cuh>

#include "tide/kernels/cuda/common.cuh"
#include "tide/kernels/cuda/context.h"
#include "tide/kernels/cuda/cuda_ops.h"
#include "tide/kernels/cuda/embedding_grad.cuh"

namespace tide::cuda {

namespace {

constexpr int kBlock = 256;
constexpr int kRowBlock = 512;  // one block per logit row, as crossentropy.cu

__device__ __forceinline__ float quiet_nan() {
  return __int_as_float(0x7fc00000);
}

// std::max(a, b) as the CPU loops take it: (a < b) ? b : a (a NaN b keeps a).
__device__ __forceinline__ float std_max(float a, float b) {
  return a < b ? b : a;
}

// ---- embedding ------------------------------------------------------------------------------

// out(N,C): one thread per element.
template <typename O, typename W>
__global__ void vp_embedding_forward_kernel(O* out, const int32_t* tokens, const W* wte, int64_t N,
                                            int64_t C, int64_t v0, int64_t rows, int64_t vocab) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N * C) return;
  const int64_t n = i / C, c = i % C;
  const int32_t token = tokens[n];
  // The CPU throws on a token outside the vocabulary; a GPU cannot without a round trip, so it
  // makes the row visible as NaN (as embedding_forward does).
  if (token < 0 || token >= vocab) {
    out[i] = from_f32<O>(quiet_nan());
    return;
  }
  const int64_t row = token - v0;
  out[i] = row >= 0 && row < rows ? from_f32<O>(to_f32(wte[row * C + c])) : from_f32<O>(0.0f);
}

// key[n] = this rank's row of token n, or `rows` for another rank's token (sorted to the end).
__global__ void shard_rows_kernel(uint32_t* keys, int32_t* positions, const int32_t* tokens,
                                  int64_t N, int64_t v0, int64_t rows) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const int64_t row = static_cast<int64_t>(tokens[n]) - v0;
  keys[n] = static_cast<uint32_t>(row >= 0 && row < rows ? row : rows);
  positions[n] = static_cast<int32_t>(n);
}

// out(B,T,C) += wpe[pos0 + t]: one thread per element.
template <typename O, typename P>
__global__ void add_position_kernel(O* out, const P* wpe, int64_t B, int64_t T, int64_t C,
                                    int64_t pos0) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= B * T * C) return;
  const int64_t t = (i / C) % T, c = i % C;
  out[i] = from_f32<O>(to_f32(out[i]) + to_f32(wpe[(pos0 + t) * C + c]));
}

// ---- cross-entropy ----------------------------------------------------------------------------

// local_max(N): one block per row. The max is exact, so the tree gives the serial loop's value
// (fmaxf skips a NaN as std::max(m, NaN) does).
template <typename T>
__global__ void ce_row_max_kernel(float* local_max, const T* logits, int64_t V) {
  __shared__ float shared[kWarpSize];
  const T* x = logits + static_cast<int64_t>(blockIdx.x) * V;  // (V)
  float m = -INFINITY;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) m = fmaxf(m, to_f32(x[v]));
  m = block_max(m, shared);
  if (threadIdx.x == 0) local_max[blockIdx.x] = m;
}

// One block per row n: the global max from the gathered ones (in rank order, as the CPU), then
// sum exp(logit - max) in double and the target's logit.
template <typename T>
__global__ void ce_partials_kernel(float* max, float* reduced, const T* logits,
                                   const int32_t* targets, const float* gathered, int world,
                                   int64_t N, int64_t V, int64_t v0) {
  __shared__ double shared[kWarpSize];
  const int64_t n = blockIdx.x;
  float m = gathered[n];
  for (int w = 1; w < world; ++w) m = std_max(m, gathered[w * N + n]);
  const T* x = logits + n * V;  // (V)
  double s = 0.0;
  // The difference in f32, as the CPU's x - mx, then exp in double.
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
    s += exp(static_cast<double>(__fsub_rn(to_f32(x[v]), m)));
  s = block_sum(s, shared);
  if (threadIdx.x != 0) return;
  max[n] = m;
  reduced[n] = static_cast<float>(s);
  const int32_t target = targets[n];
  const int64_t col = static_cast<int64_t>(target) - v0;
  reduced[N + n] = target >= 0 && col >= 0 && col < V ? to_f32(x[col]) : 0.0f;
}

// One thread per row: the losses from the summed [sum | target logit].
__global__ void ce_losses_kernel(float* losses, float* sum, const float* reduced, const float* max,
                                 const int32_t* targets, int64_t N) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= N) return;
  sum[n] = reduced[n];
  const double lse = static_cast<double>(max[n]) + log(static_cast<double>(reduced[n]));
  losses[n] = targets[n] < 0 ? 0.0f : static_cast<float>(lse - static_cast<double>(reduced[N + n]));
}

// One block per row; each thread reads and writes only its own entries v, so in place is safe.
template <typename T, typename D>
__global__ void ce_backward_kernel(D* dlogits, const T* logits, const int32_t* targets,
                                   const float* max, const float* sum, int64_t V, int64_t v0,
                                   float dloss) {
  const int64_t n = blockIdx.x;
  const T* x = logits + n * V;
  D* dx = dlogits + n * V;
  const int32_t target = targets[n];
  if (target < 0) {
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) dx[v] = from_f32<D>(0.0f);
    return;
  }
  const float m = max[n];
  const float scale = __fmul_rn(static_cast<float>(1.0 / static_cast<double>(sum[n])), dloss);
  const int64_t col = static_cast<int64_t>(target) - v0;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    // __fmul_rn, __fsub_rn: rounded as the CPU's two operations (nvcc would fuse them into one
    // FMA).
    float g = __fmul_rn(expf(__fsub_rn(to_f32(x[v]), m)), scale);
    if (v == col) g = __fsub_rn(g, dloss);
    dx[v] = from_f32<D>(g);
  }
}

// ---- sequence-parallel permutation ------------------------------------------------------------

// Moves `block` words per (r, b): whole (B, t, block) <-> rank-major (t, B, block), one thread
// per word.
template <typename U>
__global__ void permute_rows_kernel(U* dst, const U* src, int64_t t, int64_t B, int64_t block,
                                    bool to_rank_major) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // in dst
  if (i >= t * B * block) return;
  const int64_t k = i % block, rb = i / block;
  // dst index rb = (r, b) rank-major or (b, r) whole; the source is the other order.
  const int64_t r = to_rank_major ? rb / B : rb % t, b = to_rank_major ? rb % B : rb / t;
  const int64_t from = to_rank_major ? b * t + r : r * B + b;
  dst[i] = src[from * block + k];
}

}  // namespace

void vocab_parallel_embedding_forward(const OpContext& ctx, DType out_dtype, DType wte_dtype,
                                      void* out, const int32_t* tokens, const void* wte_shard,
                                      int64_t N, int64_t C, int64_t v0, int64_t rows,
                                      int64_t vocab) {
  if (N * C == 0) return;
  with_storage_types(out_dtype, wte_dtype, [&](auto otag, auto wtag) {
    using O = decltype(otag);
    using W = decltype(wtag);
    vp_embedding_forward_kernel<O, W><<<ceil_div(N * C, kBlock), kBlock, 0, stream_of(ctx)>>>(
        static_cast<O*>(out), tokens, static_cast<const W*>(wte_shard), N, C, v0, rows, vocab);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

void vocab_parallel_embedding_backward(const OpContext& ctx, DType dout_dtype, DType grad_dtype,
                                       void* dwte_shard, const void* dout, const int32_t* tokens,
                                       int64_t N, int64_t C, int64_t v0, int64_t rows) {
  const cudaStream_t stream = stream_of(ctx);
  if (N == 0 || C == 0 || rows == 0) return;
  const int end_bit = radix_bits(rows + 1);  // keys 0..rows
  // Scratch: keys (N), positions (N), both sorted (N each), CUB's temporary storage.
  size_t cub_bytes = 0;
  TIDE_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, cub_bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), N, 0, end_bit, stream));
  const size_t ids = CudaHandles::aligned(static_cast<size_t>(N) * sizeof(int32_t));
  char* base = static_cast<char*>(handles_of(ctx).scratch(4 * ids + cub_bytes));
  auto* keys = reinterpret_cast<uint32_t*>(base);
  auto* positions = reinterpret_cast<int32_t*>(base + ids);
  auto* sorted_keys = reinterpret_cast<uint32_t*>(base + 2 * ids);
  auto* sorted_positions = reinterpret_cast<int32_t*>(base + 3 * ids);
  shard_rows_kernel<<<ceil_div(N, kBlock), kBlock, 0, stream>>>(keys, positions, tokens, N, v0,
                                                                rows);
  TIDE_CUDA_CHECK_LAUNCH();
  // Stable: the positions of one row stay in ascending order.
  TIDE_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(base + 4 * ids, cub_bytes, keys, sorted_keys,
                                                  positions, sorted_positions, N, 0, end_bit,
                                                  stream));
  with_storage_types(dout_dtype, grad_dtype, [&](auto dtag, auto gtag) {
    using D = decltype(dtag);
    using G = decltype(gtag);
    add_sorted_runs_kernel<D, G><<<static_cast<unsigned int>(N), 128, 0, stream>>>(
        static_cast<G*>(dwte_shard), static_cast<const D*>(dout), sorted_keys, sorted_positions, N,
        C, rows);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

void add_position_embedding(const OpContext& ctx, DType out_dtype, DType wpe_dtype, void* out,
                            const void* wpe, int64_t B, int64_t T, int64_t C, int64_t pos0) {
  const int64_t n = B * T * C;
  if (n == 0) return;
  with_storage_types(out_dtype, wpe_dtype, [&](auto otag, auto ptag) {
    using O = decltype(otag);
    using P = decltype(ptag);
    add_position_kernel<O, P><<<ceil_div(n, kBlock), kBlock, 0, stream_of(ctx)>>>(
        static_cast<O*>(out), static_cast<const P*>(wpe), B, T, C, pos0);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

void position_embedding_backward(const OpContext& ctx, DType dout_dtype, DType grad_dtype,
                                 void* dwpe, const void* dout, int64_t B, int64_t T, int64_t C) {
  const int64_t TC = T * C;
  if (TC == 0) return;
  with_storage_types(dout_dtype, grad_dtype, [&](auto dtag, auto gtag) {
    using D = decltype(dtag);
    using G = decltype(gtag);
    add_batch_sum_kernel<D, G><<<ceil_div(TC, kBlock), kBlock, 0, stream_of(ctx)>>>(
        static_cast<G*>(dwpe), static_cast<const D*>(dout), B, TC);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

void vocab_parallel_ce_row_max(const OpContext& ctx, DType dtype, float* local_max,
                               const void* logits, int64_t N, int64_t V) {
  if (N == 0) return;
  with_storage_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    ce_row_max_kernel<T><<<static_cast<unsigned int>(N), kRowBlock, 0, stream_of(ctx)>>>(
        local_max, static_cast<const T*>(logits), V);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

void vocab_parallel_ce_partials(const OpContext& ctx, DType dtype, float* max, float* reduced,
                                const void* logits, const int32_t* targets, const float* gathered,
                                int world, int64_t N, int64_t V, int64_t v0) {
  if (N == 0) return;
  with_storage_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    ce_partials_kernel<T><<<static_cast<unsigned int>(N), kRowBlock, 0, stream_of(ctx)>>>(
        max, reduced, static_cast<const T*>(logits), targets, gathered, world, N, V, v0);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

void vocab_parallel_ce_losses(const OpContext& ctx, float* losses, float* sum, const float* reduced,
                              const float* max, const int32_t* targets, int64_t N) {
  if (N == 0) return;
  ce_losses_kernel<<<ceil_div(N, kBlock), kBlock, 0, stream_of(ctx)>>>(losses, sum, reduced, max,
                                                                       targets, N);
  TIDE_CUDA_CHECK_LAUNCH();
}

void vocab_parallel_crossentropy_backward(const OpContext& ctx, DType dtype, DType dlogits_dtype,
                                          void* dlogits, const void* logits, const int32_t* targets,
                                          const float* max, const float* sum, int64_t N, int64_t V,
                                          int64_t v0, float dloss) {
  if (N == 0) return;
  with_storage_types(dtype, dlogits_dtype, [&](auto tag, auto dtag) {
    using T = decltype(tag);
    using D = decltype(dtag);
    ce_backward_kernel<T, D><<<static_cast<unsigned int>(N), kRowBlock, 0, stream_of(ctx)>>>(
        static_cast<D*>(dlogits), static_cast<const T*>(logits), targets, max, sum, V, v0, dloss);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

void permute_sequence_rows(const OpContext& ctx, void* dst, const void* src, size_t elem_size,
                           int64_t t, int64_t B, int64_t Ts, int64_t C, bool to_rank_major) {
  const size_t bytes = static_cast<size_t>(Ts * C) * elem_size;  // one (r, b) block
  if (bytes == 0 || t * B == 0) return;
  // In 4-byte words where the block and the pointers allow, else 2-byte ones (every float
  // dtype is 2 or 4 bytes).
  auto launch = [&](auto word) {
    using U = decltype(word);
    const auto block = static_cast<int64_t>(bytes / sizeof(U));
    permute_rows_kernel<U><<<ceil_div(t * B * block, kBlock), kBlock, 0, stream_of(ctx)>>>(
        static_cast<U*>(dst), static_cast<const U*>(src), t, B, block, to_rank_major);
  };
  TIDE_CHECK(bytes % 2 == 0,
             "permute_sequence_rows: {} bytes per block is not a whole number of "
             "2-byte words (elements of {} bytes)",
             bytes, elem_size);
  const auto addresses = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src);
  if (bytes % 4 == 0 && addresses % 4 == 0)
    launch(uint32_t{});
  else
    launch(uint16_t{});
  TIDE_CUDA_CHECK_LAUNCH();
}

}  // namespace tide::cuda

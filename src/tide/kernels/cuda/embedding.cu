// Token + position embedding on the GPU (llm.c's encoder_forward/backward).
//
// The backward's scatter-add into dwte is the one place where several rows of dout land on
// the same output row (a token repeated in the batch). Floating-point atomics would make the
// sum's order, and so its bits, vary from run to run. Instead the (token, position) pairs are
// sorted by token with a STABLE radix sort (CUB), which keeps the positions of each token in
// ascending (b,t) order; then the first block of each run of equal tokens sums the run's dout
// rows in that order, starting from the current dwte row. That is exactly the order of the
// CPU kernel, so dwte (and dwpe, summed over b in order) are bitwise equal to the CPU result.
// Cost: one sort of B*T ints plus one read of dout, instead of O(V * B*T) for the naive
// "one block per vocabulary row scans all tokens".
#include <cub/device/device_radix_sort.cuh>

#include "tide/kernels/cuda/common.cuh"
#include "tide/kernels/cuda/context.h"
#include "tide/kernels/cuda/cuda_ops.h"
#include "tide/kernels/cuda/embedding_grad.cuh"

namespace tide::cuda {

namespace {

constexpr int kBlock = 256;

// out(B,T,C): one thread per element. A token outside [0, V) makes its row NaN (the ids are
// validated once by the data loader; this only keeps a bad one from reading out of bounds and
// makes it visible in the loss).
template <typename T>
__global__ void embedding_forward_kernel(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                                         int B, int Tn, int C, int V) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(B) * Tn * C) return;
  const int64_t bt = i / C;
  const int c = static_cast<int>(i % C);
  const int t = static_cast<int>(bt % Tn);
  const int32_t token = tokens[bt];
  if (token < 0 || token >= V) {
    out[i] = from_f32<T>(__int_as_float(0x7fc00000));  // quiet NaN
    return;
  }
  out[i] = from_f32<T>(to_f32(wte[static_cast<int64_t>(token) * C + c]) +
                       to_f32(wpe[static_cast<int64_t>(t) * C + c]));
}

__global__ void iota_kernel(int32_t* x, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = static_cast<int32_t>(i);
}

}  // namespace

void embedding_forward(const OpContext& ctx, DType dtype, void* out, const int32_t* tokens,
                       const void* wte, const void* wpe, int B, int T, int C, int V) {
  const int64_t n = static_cast<int64_t>(B) * T * C;
  if (n == 0) return;
  with_storage_type(dtype, [&](auto tag) {
    using S = decltype(tag);
    embedding_forward_kernel<S><<<ceil_div(n, kBlock), kBlock, 0, stream_of(ctx)>>>(
        static_cast<S*>(out), tokens, static_cast<const S*>(wte), static_cast<const S*>(wpe), B, T,
        C, V);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

void embedding_backward(const OpContext& ctx, DType dtype, DType grad_dtype, void* dwte, void* dwpe,
                        const void* dout, const int32_t* tokens, int B, int T, int C, int V) {
  const cudaStream_t stream = stream_of(ctx);
  const int64_t n = static_cast<int64_t>(B) * T;
  if (n == 0 || C == 0) return;
  // Valid tokens lie in [0, V), so reading them as unsigned changes nothing.
  const uint32_t* keys_in = reinterpret_cast<const uint32_t*>(tokens);
  const int end_bit = radix_bits(V);

  // Scratch: sorted tokens (n), positions 0..n-1 (n), positions sorted by token (n), CUB's
  // temporary storage. Offsets are rounded to 256 bytes.
  size_t cub_bytes = 0;
  TIDE_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, cub_bytes, keys_in, static_cast<uint32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), n, 0, end_bit, stream));
  const size_t ids_bytes = (static_cast<size_t>(n) * sizeof(int32_t) + 255) / 256 * 256;
  char* base = static_cast<char*>(handles_of(ctx).scratch(3 * ids_bytes + cub_bytes));
  auto* sorted_tokens = reinterpret_cast<uint32_t*>(base);
  auto* positions = reinterpret_cast<int32_t*>(base + ids_bytes);
  auto* sorted_positions = reinterpret_cast<int32_t*>(base + 2 * ids_bytes);
  void* cub_temp = base + 3 * ids_bytes;

  iota_kernel<<<ceil_div(n, kBlock), kBlock, 0, stream>>>(positions, n);
  TIDE_CUDA_CHECK_LAUNCH();
  TIDE_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(cub_temp, cub_bytes, keys_in, sorted_tokens,
                                                  positions, sorted_positions, n, 0, end_bit,
                                                  stream));
  // One block per sorted entry; only run starts work. 128 threads cover C = 768 in 6 steps.
  with_storage_types(dtype, grad_dtype, [&](auto tag, auto grad_tag) {
    using S = decltype(tag);
    using G = decltype(grad_tag);
    add_sorted_runs_kernel<S, G><<<static_cast<unsigned int>(n), 128, 0, stream>>>(
        static_cast<G*>(dwte), static_cast<const S*>(dout), sorted_tokens, sorted_positions, n, C,
        V);
    TIDE_CUDA_CHECK_LAUNCH();
    const int64_t TC = static_cast<int64_t>(T) * C;
    add_batch_sum_kernel<S, G><<<ceil_div(TC, kBlock), kBlock, 0, stream>>>(
        static_cast<G*>(dwpe), static_cast<const S*>(dout), B, TC);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

}  // namespace tide::cuda

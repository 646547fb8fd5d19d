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

// Block i handles sorted entry i if it starts a run of equal tokens: for each channel (one
// per thread, strided), dwte[token] += dout rows of the run, added in ascending position.
// Tokens outside [0, V) (negative ones read as large unsigned) are skipped, so a bad id never
// writes outside dwte; dwte is then not meaningful (the radix sort looks at the low bits only).
template <typename T, typename G>
__global__ void dwte_runs_kernel(G* dwte, const T* dout, const uint32_t* sorted_tokens,
                                 const int32_t* sorted_positions, int64_t n, int C, int V) {
  const int64_t i = blockIdx.x;
  const uint32_t token = sorted_tokens[i];
  if (token >= static_cast<uint32_t>(V)) return;       // out of the vocabulary
  if (i > 0 && sorted_tokens[i - 1] == token) return;  // not the start of a run
  int64_t end = i + 1;
  while (end < n && sorted_tokens[end] == token) ++end;
  G* row = dwte + static_cast<int64_t>(token) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = to_f32(row[c]);
    for (int64_t j = i; j < end; ++j)
      acc += to_f32(dout[static_cast<int64_t>(sorted_positions[j]) * C + c]);
    row[c] = from_f32<G>(acc);
  }
}

// dwpe(T,C) += sum over b of dout(B,T,C): one thread per (t, c), summing b = 0..B-1 in order.
template <typename T, typename G>
__global__ void dwpe_kernel(G* dwpe, const T* dout, int B, int Tn, int C) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // t*C + c
  const int64_t TC = static_cast<int64_t>(Tn) * C;
  if (i >= TC) return;
  float acc = to_f32(dwpe[i]);
  for (int b = 0; b < B; ++b) acc += to_f32(dout[b * TC + i]);
  dwpe[i] = from_f32<G>(acc);
}

// Bits needed for the ids 0..V-1 (the radix sort only looks at those).
int id_bits(int V) {
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) < V) ++bits;
  return bits;
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
  const int end_bit = id_bits(V);

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
    dwte_runs_kernel<S, G><<<static_cast<unsigned int>(n), 128, 0, stream>>>(
        static_cast<G*>(dwte), static_cast<const S*>(dout), sorted_tokens, sorted_positions, n, C,
        V);
    TIDE_CUDA_CHECK_LAUNCH();
    dwpe_kernel<S, G><<<ceil_div(static_cast<int64_t>(T) * C, kBlock), kBlock, 0, stream>>>(
        static_cast<G*>(dwpe), static_cast<const S*>(dout), B, T, C);
  });
  TIDE_CUDA_CHECK_LAUNCH();
}

}  // namespace tide::cuda

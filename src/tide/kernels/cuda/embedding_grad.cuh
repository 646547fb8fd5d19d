#pragma once
// The embedding gradients' deterministic sums, shared by the embedding op (embedding.cu) and
// the vocabulary-parallel embedding (tensor_parallel.cu). Why no atomics: a row repeated in the
// batch would add in a varying order. The (row, position) pairs are sorted by row with a stable
// radix sort, so each row's positions stay ascending, and the first block of each run of equal
// rows sums them in that order, the CPU kernel's.

#include "tide/kernels/cuda/common.cuh"

namespace tide::cuda {

// Bits the radix sort needs for the keys 0..count-1.
inline int radix_bits(int64_t count) {
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) < count) ++bits;
  return bits;
}

// Block i handles sorted entry i if it starts a run of equal keys: for each channel (strided
// over the threads), dst[key] += the run's src rows in ascending position, in f32, rounded
// once. Keys >= rows (out of the vocabulary, or another rank's rows) are skipped, so they never
// write outside dst.
template <typename S, typename G>
__global__ void add_sorted_runs_kernel(G* dst, const S* src, const uint32_t* sorted_keys,
                                       const int32_t* sorted_positions, int64_t n, int64_t C,
                                       int64_t rows) {
  const int64_t i = blockIdx.x;
  const uint32_t key = sorted_keys[i];
  if (key >= static_cast<uint64_t>(rows)) return;
  if (i > 0 && sorted_keys[i - 1] == key) return;  // not the start of a run
  int64_t end = i + 1;
  while (end < n && sorted_keys[end] == key) ++end;
  G* row = dst + static_cast<int64_t>(key) * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = to_f32(row[c]);
    for (int64_t j = i; j < end; ++j)
      acc += to_f32(src[static_cast<int64_t>(sorted_positions[j]) * C + c]);
    row[c] = from_f32<G>(acc);
  }
}

// dwpe(T,C) += sum over b of dout(B,T,C): one thread per (t, c), b = 0..B-1 in order.
template <typename S, typename G>
__global__ void add_batch_sum_kernel(G* dwpe, const S* dout, int64_t B, int64_t TC) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= TC) return;
  float acc = to_f32(dwpe[i]);
  for (int64_t b = 0; b < B; ++b) acc += to_f32(dout[b * TC + i]);
  dwpe[i] = from_f32<G>(acc);
}

}  // namespace tide::cuda

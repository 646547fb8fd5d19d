// find_bad_id (common.cuh): the first id outside [lo, hi), found on the device.
#include <cstdint>

#include "tide/kernels/cuda/common.cuh"

namespace tide::cuda {

namespace {

// Every thread checks one id; the smallest bad index wins via an integer atomicMin (integer
// atomics are exact, so the result does not depend on the order threads run in).
__global__ void find_bad_id_kernel(const int32_t* ids, int64_t n, int64_t lo, int64_t hi,
                                   unsigned long long* first_bad) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t id = ids[i];
  if (id < lo || id >= hi) atomicMin(first_bad, static_cast<unsigned long long>(i));
}

}  // namespace

BadId find_bad_id(const int32_t* ids, int64_t n, int64_t lo, int64_t hi, cudaStream_t stream) {
  BadId bad;
  if (n == 0) return bad;
  // A small device allocation per call keeps this independent of any scratch buffer in use.
  unsigned long long* first_bad = nullptr;
  TIDE_CUDA_CHECK(cudaMallocAsync(&first_bad, sizeof(unsigned long long), stream));
  TIDE_CUDA_CHECK(cudaMemsetAsync(first_bad, 0xff, sizeof(unsigned long long), stream));  // "none"
  find_bad_id_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(ids, n, lo, hi, first_bad);
  TIDE_CUDA_CHECK_LAUNCH();
  unsigned long long index = 0;
  TIDE_CUDA_CHECK(
      cudaMemcpyAsync(&index, first_bad, sizeof(index), cudaMemcpyDeviceToHost, stream));
  TIDE_CUDA_CHECK(cudaFreeAsync(first_bad, stream));
  TIDE_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (index == ~0ull) return bad;
  bad.index = static_cast<int64_t>(index);
  TIDE_CUDA_CHECK(cudaMemcpy(&bad.value, ids + bad.index, sizeof(int32_t), cudaMemcpyDeviceToHost));
  return bad;
}

}  // namespace tide::cuda

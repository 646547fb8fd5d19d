// The mover's CUDA half (kernels/mover.h): every copy and zeroing of chunk or activation data
// on a GPU is queued on a context's stream, and ordered against other streams by events, so
// that compute and copies overlap without the host synchronising in between.
#include "tide/kernels/cuda/common.cuh"
#include "tide/kernels/cuda/context.h"
#include "tide/kernels/cuda/cuda_check.h"
#include "tide/kernels/cuda/cuda_ops.h"

namespace tide::cuda {

void copy_async(const OpContext& ctx, void* dst, const void* src, size_t bytes) {
  // cudaMemcpyDefault: unified addressing tells host from device memory.
  TIDE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_of(ctx)));
}

void fill_zero_async(const OpContext& ctx, void* p, size_t bytes) {
  TIDE_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_of(ctx)));
}

namespace {
template <typename D, typename S>
__global__ void convert_kernel(D* __restrict__ y, const S* __restrict__ x, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = from_f32<D>(to_f32(x[i]));
}
}  // namespace

void convert_async(const OpContext& ctx, void* dst, DType dst_dtype, const void* src,
                   DType src_dtype, int64_t n) {
  constexpr int kThreads = 256;
  const unsigned blocks = ceil_div(n, kThreads) < 65535u ? ceil_div(n, kThreads) : 65535u;
  with_storage_types(dst_dtype, src_dtype, [&](auto d, auto s) {
    using D = decltype(d);
    using S = decltype(s);
    convert_kernel<D, S><<<blocks, kThreads, 0, stream_of(ctx)>>>(static_cast<D*>(dst),
                                                                  static_cast<const S*>(src), n);
  });
  TIDE_CUDA_CHECK(cudaGetLastError());
}

std::shared_ptr<void> record_event(const OpContext& ctx) {
  cudaEvent_t event = nullptr;
  // No timing: a timing event costs more to record and is not needed for ordering.
  TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  std::shared_ptr<void> owner(event,
                              [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
  TIDE_CUDA_CHECK(cudaEventRecord(event, stream_of(ctx)));
  return owner;
}

void wait_event(const OpContext& ctx, void* event) {
  TIDE_CUDA_CHECK(cudaStreamWaitEvent(stream_of(ctx), static_cast<cudaEvent_t>(event), 0));
}

void synchronize_event(void* event) {
  TIDE_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}

void synchronize_stream(const OpContext& ctx) {
  TIDE_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
}

}  // namespace tide::cuda

// The mover's CUDA half (kernels/mover.h): every copy and zeroing of chunk or activation data
// on a GPU is queued on a context's stream, and ordered against other streams by events, so
// that compute and copies overlap without the host synchronising in between.
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

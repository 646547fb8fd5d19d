// Per-thread, per-(device, stream) CUDA state; see context.h.
#include "tide/kernels/cuda/context.h"

#include <map>
#include <memory>
#include <utility>

#include "tide/kernels/cuda/cuda_check.h"
#include "tide/kernels/cuda/cuda_ops.h"

namespace tide::cuda {

namespace {
// cuBLAS workspace per handle. NVIDIA recommends 32 MiB on Hopper; giving cuBLAS its own
// workspace also keeps it from allocating one per stream behind our back.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

thread_local cudaStream_t t_stream = nullptr;
}  // namespace

cudaStream_t current_stream() {
  return t_stream;
}
void set_current_stream(cudaStream_t stream) {
  t_stream = stream;
}

int device_count() {
  static const int n = [] {
    int count = 0;
    // No driver or no GPU: the runtime reports an error, which here just means "none".
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      cudaGetLastError();  // reset the last-error state so that later checks start clean
      return 0;
    }
    return count;
  }();
  return n;
}

DeviceContext::DeviceContext(int device, cudaStream_t stream) : device_(device), stream_(stream) {
  TIDE_CUDA_CHECK(cudaSetDevice(device));
  TIDE_CUBLAS_CHECK(cublasCreate(&cublas_));
  TIDE_CUBLAS_CHECK(cublasSetStream(cublas_, stream));
  // Plain f32 GEMMs (no TF32): the CUDA results are compared with the CPU reference at f32
  // tolerances. TF32 or bf16 tensor-core paths are a tuning step for later (docs/cuda.md).
  TIDE_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_PEDANTIC_MATH));
  TIDE_CUDA_CHECK(cudaMalloc(&cublas_workspace_, kCublasWorkspaceBytes));
  TIDE_CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspaceBytes));
}

// Errors are ignored here: a destructor must not throw, and at process exit the CUDA runtime
// may already be shutting down.
DeviceContext::~DeviceContext() {
  cudaSetDevice(device_);
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  cudaFree(cublas_workspace_);
  cudaFree(scratch_);
}

void* DeviceContext::scratch(size_t bytes) {
  if (bytes <= scratch_bytes_) return scratch_;
  TIDE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  TIDE_CUDA_CHECK(cudaFree(scratch_));
  scratch_ = nullptr;
  scratch_bytes_ = 0;
  // Round up to 1 MiB steps so that slowly growing requests do not reallocate every call.
  const size_t rounded = (bytes + (size_t{1} << 20) - 1) / (size_t{1} << 20) * (size_t{1} << 20);
  TIDE_CUDA_CHECK(cudaMalloc(&scratch_, rounded));
  scratch_bytes_ = rounded;
  return scratch_;
}

DeviceContext& context(int device) {
  thread_local std::map<std::pair<int, cudaStream_t>, std::unique_ptr<DeviceContext>> contexts;
  TIDE_CUDA_CHECK(cudaSetDevice(device));
  auto& slot = contexts[{device, t_stream}];
  if (!slot) slot = std::make_unique<DeviceContext>(device, t_stream);
  return *slot;
}

}  // namespace tide::cuda

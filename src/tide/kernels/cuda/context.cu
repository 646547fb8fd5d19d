// Making and releasing the CUDA state of an OpContext (see context.h for why it is explicit).
#include "tide/kernels/cuda/context.h"

#include <memory>

#include "tide/kernels/cuda/cuda_check.h"
#include "tide/kernels/cuda/cuda_ops.h"

namespace tide {

namespace {
// cuBLAS / cuBLASLt workspace per bundle. NVIDIA recommends 32 MiB on Hopper; giving cuBLAS
// its own workspace also keeps it from allocating one per stream behind our back.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;
}  // namespace

// Errors are ignored here: a destructor must not throw, and at process exit the CUDA runtime
// may already be shutting down.
CudaHandles::~CudaHandles() {
  cudaSetDevice(device);
  if (stream != nullptr) cudaStreamSynchronize(stream);
  cudnn_attention.reset();  // its cuDNN handle is bound to the stream
  if (cublaslt != nullptr) cublasLtDestroy(cublaslt);
  if (cublas != nullptr) cublasDestroy(cublas);
  cudaFree(workspace);
  cudaFree(scratch_);
  if (stream != nullptr) cudaStreamDestroy(stream);
}

void* CudaHandles::scratch(size_t bytes) {
  if (bytes <= scratch_bytes_) return scratch_;
  TIDE_CUDA_CHECK(cudaStreamSynchronize(stream));
  TIDE_CUDA_CHECK(cudaFree(scratch_));
  scratch_ = nullptr;
  scratch_bytes_ = 0;
  // Round up to 1 MiB steps so that slowly growing requests do not reallocate every call.
  const size_t rounded = (bytes + (size_t{1} << 20) - 1) / (size_t{1} << 20) * (size_t{1} << 20);
  TIDE_CUDA_CHECK(cudaMalloc(&scratch_, rounded));
  scratch_bytes_ = rounded;
  return scratch_;
}

namespace cuda {

namespace {

OpContext context_of(std::shared_ptr<CudaHandles> h, Arena* scratch) {
  OpContext ctx;
  ctx.device = Device::cuda(h->device);
  ctx.scratch = scratch;
  ctx.stream = h->stream;
  ctx.handles = std::move(h);
  return ctx;
}

}  // namespace

OpContext make_context(int device, Arena* scratch, bool copies_only) {
  const int n = device_count();
  TIDE_CHECK(n > 0,
             "make_op_context: cuda:{} was asked for but no CUDA GPU is visible to this "
             "process; run with device=cpu, or on a machine with a GPU (check nvidia-smi and "
             "CUDA_VISIBLE_DEVICES)",
             device);
  TIDE_CHECK(device >= 0 && device < n,
             "make_op_context: cuda:{} was asked for but only {} CUDA GPU(s) are visible (cuda:0 "
             ".. cuda:{}); pick one of those devices",
             device, n, n - 1);
  // The one place the device is set: every op of this context then runs on the calling
  // thread's current device without asking again.
  TIDE_CUDA_CHECK(cudaSetDevice(device));
  auto h = std::make_shared<CudaHandles>();
  h->device = device;
  TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&h->stream, cudaStreamNonBlocking));
  if (copies_only) return context_of(std::move(h), scratch);
  TIDE_CUBLAS_CHECK(cublasCreate(&h->cublas));
  TIDE_CUBLAS_CHECK(cublasSetStream(h->cublas, h->stream));
  // Plain f32 GEMMs (no TF32): the CUDA results are compared with the CPU reference at f32
  // tolerances. TF32 or bf16 tensor-core paths are a tuning step for later (docs/cuda.md).
  TIDE_CUBLAS_CHECK(cublasSetMathMode(h->cublas, CUBLAS_PEDANTIC_MATH));
  TIDE_CUBLAS_CHECK(cublasLtCreate(&h->cublaslt));
  TIDE_CUDA_CHECK(cudaMalloc(&h->workspace, kWorkspaceBytes));
  h->workspace_bytes = kWorkspaceBytes;
  TIDE_CUBLAS_CHECK(cublasSetWorkspace(h->cublas, h->workspace, h->workspace_bytes));
  return context_of(std::move(h), scratch);
}

}  // namespace cuda
}  // namespace tide

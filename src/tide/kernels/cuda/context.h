#pragma once
// The CUDA side of OpContext (ops.h): the handle bundle a context points to, and accessors
// for the kernels.
//
// Why explicit (as llm.c and ggml pass theirs): every op gets its device, stream and library
// handles from the OpContext it is called with. There is no thread-local "current stream" and
// no per-op device query; make_op_context sets the device once and creates the stream and the
// handles, and the caller decides which ops share them by passing the same context.
//
// A bundle belongs to ONE stream: its cuBLAS/cuBLASLt workspace and the device scratch buffer
// are reused by consecutive ops, which is safe only because they run in that stream's order.
// Work for another stream needs another context (make_op_context again), not a copy of this
// one with `stream` changed. C++17-clean (included from .cu files only).

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "tide/kernels/ops.h"

namespace tide {

struct CudnnAttention;  // cuda/attention_cudnn.cpp

// What make_op_context creates for a CUDA device (forward-declared in ops.h). Released with
// the last OpContext that holds it: synchronises its stream, then frees everything.
struct CudaHandles {
  int device = 0;
  cudaStream_t stream = nullptr;  // non-blocking, created with the bundle and owned by it
  cublasHandle_t cublas = nullptr;
  cublasLtHandle_t cublaslt = nullptr;
  // One workspace for cuBLAS and cuBLASLt: they run on the bundle's one stream, never at once.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

  CudaHandles() = default;
  CudaHandles(const CudaHandles&) = delete;
  CudaHandles& operator=(const CudaHandles&) = delete;
  ~CudaHandles();

  // At least `bytes` of device memory (256-byte aligned), valid until the next scratch() call.
  // Growing synchronises the stream first (the old buffer may still be read by queued
  // kernels); the buffer only grows, so that happens in the first steps only.
  void* scratch(size_t bytes);
  // `bytes` rounded up to the scratch's alignment: the offset of the next part when one scratch()
  // buffer is carved into several.
  static size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

  // cuDNN's fused attention: its handle and graphs (attention_cudnn.cpp), made on first use,
  // and how many attention ops ran through it (the GPU tests check that it did).
  std::shared_ptr<CudnnAttention> cudnn_attention;
  int64_t fused_attention_calls = 0;

 private:
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
};

namespace cuda {

// The stream and handles of a context for a CUDA device. ops.cpp has checked that the context
// was made by make_op_context (handles present) before any kernel runs.
inline cudaStream_t stream_of(const OpContext& ctx) {
  return static_cast<cudaStream_t>(ctx.stream);
}
inline CudaHandles& handles_of(const OpContext& ctx) {
  return *ctx.handles;
}

}  // namespace cuda
}  // namespace tide

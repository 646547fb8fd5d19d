#pragma once
// Per-thread CUDA execution state of the op API: the current stream and, for each
// (device, stream) pair, a DeviceContext holding the cuBLAS handle, its workspace, and a
// scratch buffer for kernels that need temporary device memory.
//
// Why keyed by (device, stream) and per thread: cuBLAS handles are not meant to be shared
// between threads, and a scratch buffer shared by two streams could be overwritten by one
// stream while the other still reads it. With one context per (thread, device, stream), work
// queued on a stream only ever touches that stream's scratch, in stream order.
//
// OpContext has no stream field yet; until it does, set_current_stream (or a StreamScope)
// picks the stream that the calling thread's ops are queued on. The default is stream 0 (the
// legacy default stream). C++17-clean (included from .cu files).

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace tide::cuda {

// The stream that ops called from this thread are queued on (default: 0).
cudaStream_t current_stream();
void set_current_stream(cudaStream_t stream);

// Sets the current stream for a scope and restores the previous one on exit.
class StreamScope {
 public:
  explicit StreamScope(cudaStream_t stream) : previous_(current_stream()) {
    set_current_stream(stream);
  }
  ~StreamScope() { set_current_stream(previous_); }
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  cudaStream_t previous_;
};

class DeviceContext {
 public:
  DeviceContext(int device, cudaStream_t stream);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas() const { return cublas_; }

  // At least `bytes` of device memory (256-byte aligned), valid until the next scratch() call
  // on this context. Growing synchronises the stream first (the old buffer may still be in
  // use by queued kernels); the buffer only grows, so that happens in the first steps only.
  void* scratch(size_t bytes);

 private:
  int device_;
  cudaStream_t stream_;
  cublasHandle_t cublas_ = nullptr;
  void* cublas_workspace_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
};

// The calling thread's context for `device` and its current stream (created on first use),
// with `device` made the current CUDA device.
DeviceContext& context(int device);

}  // namespace tide::cuda

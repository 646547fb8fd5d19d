#pragma once
// Error checks for CUDA runtime and cuBLAS calls: a failed call throws a tide::Error naming
// the failed expression and the library's own description of the error. Host code only.
// C++17-clean (included from .cu files).

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "tide/core/error.h"

// TIDE_CUDA_CHECK(cudaMemcpy(...)): throws when the call does not return cudaSuccess.
// After a kernel launch, check with TIDE_CUDA_CHECK(cudaGetLastError()) (launch errors only:
// faults inside a kernel surface at the next synchronising call).
#define TIDE_CUDA_CHECK(expr)                                                                      \
  do {                                                                                             \
    const cudaError_t tide_cuda_err_ = (expr);                                                     \
    if (tide_cuda_err_ != cudaSuccess)                                                             \
      throw ::tide::Error(                                                                         \
          fmt::format("CUDA error '{}' ({}) in `{}` at {}:{}", cudaGetErrorString(tide_cuda_err_), \
                      cudaGetErrorName(tide_cuda_err_), #expr, __FILE__, __LINE__));               \
  } while (0)

// TIDE_CUBLAS_CHECK(cublasSgemm(...)): throws when the call does not return
// CUBLAS_STATUS_SUCCESS.
#define TIDE_CUBLAS_CHECK(expr)                                                                    \
  do {                                                                                             \
    const cublasStatus_t tide_cublas_status_ = (expr);                                             \
    if (tide_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                              \
      throw ::tide::Error(fmt::format("cuBLAS error '{}' in `{}` at {}:{}",                        \
                                      cublasGetStatusString(tide_cublas_status_), #expr, __FILE__, \
                                      __LINE__));                                                  \
  } while (0)

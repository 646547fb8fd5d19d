#pragma once
// What the CUDA module (core/cuda_module.h) offers the comm floor: the NCCL process group behind
// make_nccl_process_group and set_compute_stream (nccl_process_group.h). Implemented by
// cuda/nccl_process_group.cpp; the module has this entry only when tide was built with NCCL.

#include <cstddef>
#include <memory>

#include "tide/comm/process_group.h"

namespace tide {

struct CudaCommTable {
  size_t size = sizeof(CudaCommTable);
  std::shared_ptr<ProcessGroup> (*make_nccl_group)(std::shared_ptr<ProcessGroup> bootstrap,
                                                   int device, void* compute_stream) = nullptr;
  // `group` is an NCCL group (its backend() is "nccl").
  void (*set_compute_stream)(ProcessGroup& group, void* cuda_stream) = nullptr;
};

}  // namespace tide

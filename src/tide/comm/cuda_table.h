#pragma once
// What the CUDA module (core/cuda_module.h) offers the comm floor: the NCCL process group behind
// make_nccl_process_group and set_compute_stream (nccl_process_group.h). Implemented by
// cuda/nccl_process_group.cpp; the module has this entry only when tide was built with NCCL.

#include <cstddef>
#include <memory>

#include "tide/comm/process_group.h"
#include "tide/comm/work_watchdog.h"

namespace tide {

using WatchFor = DeviceCallWatch (*)(ProcessGroup& bootstrap, Device device);

struct CudaCommTable {
  size_t size = sizeof(CudaCommTable);
  // `watch_for` is the program's device_call_watch (work_watchdog.h): the module has no copy
  // of the comm floor, so its groups reach the program's watchdog through it.
  std::shared_ptr<ProcessGroup> (*make_nccl_group)(std::shared_ptr<ProcessGroup> bootstrap,
                                                   int device, void* compute_stream,
                                                   WatchFor watch_for) = nullptr;
  // `group` is an NCCL group (its backend() is "nccl").
  void (*set_compute_stream)(ProcessGroup& group, void* cuda_stream) = nullptr;
};

}  // namespace tide

// nccl_process_group.h's functions: the NCCL group itself is in the CUDA module
// (cuda/nccl_process_group.cpp), loaded by the first make_nccl_process_group
// (core/cuda_module.h). Host groups never load it.
#include "tide/comm/nccl_process_group.h"

#include "tide/comm/cuda_table.h"
#include "tide/comm/work_watchdog.h"
#include "tide/core/cuda_module.h"
#include "tide/core/error.h"

namespace tide {

bool nccl_available() {
#ifdef TIDE_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

std::shared_ptr<ProcessGroup> make_nccl_process_group(std::shared_ptr<ProcessGroup> bootstrap,
                                                      int device, void* compute_stream) {
  TIDE_CHECK(nccl_available(),
             "this tide was built without NCCL, so device buffers cannot be communicated; "
             "rebuild with the CUDA toolkit and NCCL installed (CMake looks for libnccl next to "
             "CUDA)");
  TIDE_CHECK(bootstrap != nullptr, "make_nccl_process_group: the bootstrap group is null");
  return cuda_module_table<CudaCommTable>(
             "tide_cuda_comm", fmt::format("an NCCL group on cuda:{} was asked for", device))
      .make_nccl_group(std::move(bootstrap), device, compute_stream, &device_call_watch);
}

void set_compute_stream(ProcessGroup& group, void* cuda_stream) {
  TIDE_CHECK(group.backend() == "nccl",
             "set_compute_stream: the {} group has no CUDA stream; only NCCL groups take one",
             group.backend());
  // An NCCL group exists, so the module is loaded already.
  cuda_module_table<CudaCommTable>("tide_cuda_comm", "set_compute_stream")
      .set_compute_stream(group, cuda_stream);
}

}  // namespace tide

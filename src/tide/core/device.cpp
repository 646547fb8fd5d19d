#include "tide/core/device.h"

#include "tide/core/cuda_module.h"
#include "tide/core/cuda_table.h"
#include "tide/core/error.h"

namespace tide {

Device parse_device(const std::string& s) {
  if (s == "cpu") return Device::cpu();
  if (s == "cuda") return Device::cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    try {
      return Device::cuda(std::stoi(s.substr(5)));
    } catch (const std::exception&) {
    }
  }
  TIDE_FAIL("unknown device '{}'; use cpu, cuda or cuda:N", s);
}

// Asks the CUDA module, loading it: the question is about a GPU. A module that cannot be loaded
// answers "no GPU" here; make_op_context and the other requests for a device report why.
bool cuda_available() {
  if (!cuda_built()) return false;
  try {
    return cuda_module_table<CudaCoreTable>("tide_cuda_core", "cuda_available").device_count() > 0;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace tide

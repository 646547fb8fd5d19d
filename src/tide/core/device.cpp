#include "tide/core/device.h"

#include <utility>

#include "tide/core/cuda_module.h"
#include "tide/core/cuda_table.h"
#include "tide/core/error.h"

namespace tide {

Device parse_device(const std::string& s) {
  if (s == "cpu") return Device::cpu();
  for (const auto& [prefix, type] :
       {std::pair{"cuda", DeviceType::CUDA}, {"sim", DeviceType::SIM}}) {
    const std::string p = prefix;
    if (s == p) return Device{type, 0};
    if (s.rfind(p + ":", 0) == 0 && s.size() > p.size() + 1 &&
        s.find_first_not_of("0123456789", p.size() + 1) == std::string::npos &&
        s.size() < p.size() + 6)
      return Device{type, std::stoi(s.substr(p.size() + 1))};
  }
  TIDE_FAIL("unknown device '{}'; use cpu, cuda, cuda:N, sim or sim:N", s);
}

// Asks the CUDA module, loading it: the question is about a GPU. A module that cannot be loaded
// answers "no GPU" here; make_op_context and the other requests for a device report why.
int cuda_device_count() {
  if (!cuda_built()) return 0;
  try {
    return cuda_module_table<CudaCoreTable>("tide_cuda_core", "cuda_device_count").device_count();
  } catch (const Error&) {
    return 0;
  }
}

bool cuda_available() {
  return cuda_device_count() > 0;
}

void copy_device_bytes(void* dst, const void* src, size_t bytes, const char* who) {
  const char* err =
      cuda_module_table<CudaCoreTable>("tide_cuda_core", who).copy_blocking(dst, src, bytes);
  TIDE_CHECK(err == nullptr, "{}: copying {} bytes on the GPU failed: {}", who, bytes, err);
}

}  // namespace tide

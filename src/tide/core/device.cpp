#include "tide/core/device.h"

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

#ifndef TIDE_HAVE_CUDA
bool cuda_available() {
  return false;
}
#endif

}  // namespace tide

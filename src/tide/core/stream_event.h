#pragma once
// StreamEvent: a point in a device stream. Why in core: the mover records and waits for them
// (kernels/mover.h), and a device's collective group (comm/) orders its calls after one from
// another stream of the device (ProcessGroup::wait_on_device), without comm depending on the
// kernels.

#include <memory>

#include "tide/core/device.h"

namespace tide {

class SimEvent;
struct CudaKernelTable;

// A point in a context's stream (record_event in kernels/mover.h): every operation queued
// before it has run once it is done. On the CPU it is done at once.
struct StreamEvent {
  Device device = Device::cpu();
  std::shared_ptr<SimEvent> sim;  // the simulated device's event
  std::shared_ptr<void> cuda;     // a cudaEvent_t, destroyed with the last copy
  const CudaKernelTable* kernels = nullptr;
};

}  // namespace tide

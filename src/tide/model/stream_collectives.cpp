#include "tide/model/stream_collectives.h"

#include "tide/core/sim_device.h"
#include "tide/kernels/mover.h"

namespace tide {

bool host_waits_for(const OpContext& op, const Tensor& buf) {
  return op.device.is_cpu() || buf.device.is_cpu();
}

void prepare_collective(const OpContext& op, const Tensor& buf) {
  if (!op.device.is_cpu() && buf.device.is_cpu()) synchronize(op);
}

void consume_collective(const OpContext& op, Work& work, const Tensor& buf) {
  if (host_waits_for(op, buf))
    work.wait();
  else if (op.device.is_sim())
    work.wait_on(op.sim.get());  // SimCollectiveWork takes the simulated device's stream
  else
    work.wait_on(op.stream);
}

}  // namespace tide

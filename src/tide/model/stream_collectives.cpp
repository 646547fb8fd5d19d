#include "tide/model/stream_collectives.h"

#include "tide/core/sim_device.h"
#include "tide/kernels/mover.h"

namespace tide {

bool host_waits_for(const OpContext& op, const ProcessGroup& group, const Tensor& buf) {
  return op.device.is_cpu() || !group.orders_on_stream(buf);
}

void prepare_collective(const OpContext& op, const ProcessGroup& group, const Tensor& buf) {
  if (!op.device.is_cpu() && host_waits_for(op, group, buf)) synchronize(op);
}

void prepare_collective(const OpContext& op, ProcessGroup& group, const Tensor& buf,
                        const StreamEvent& written) {
  prepare_collective(op, group, buf);
  if (op.device.is_cpu()) return;
  if (host_waits_for(op, group, buf))
    synchronize(written);
  else
    group.wait_on_device(written);
}

void consume_collective(const OpContext& op, const ProcessGroup& group, Work& work,
                        const Tensor& buf) {
  if (host_waits_for(op, group, buf))
    work.wait();
  else if (op.device.is_sim())
    work.wait_on(op.sim.get());  // SimCollectiveWork takes the simulated device's stream
  else
    work.wait_on(op.stream);
}

}  // namespace tide

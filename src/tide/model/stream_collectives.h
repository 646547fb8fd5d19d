#pragma once
// Collectives in a stream's order. Why: on a device the host must not wait for the stream
// around each collective (issue #27: at most one host wait per step). A device buffer goes to
// the device's group (NCCL, or its stand-in on sim:N: comm/device_routed_group.h), which orders
// the call after the compute stream's queued work by an event; the stream then waits for the
// call's result on the device (Work::wait_on), and the host goes on queueing. Only a host
// buffer (MPI, which reads it at once) needs the host to wait for the stream first, and the
// call itself waited for.

#include "tide/comm/process_group.h"
#include "tide/kernels/ops.h"

namespace tide {

// Whether a collective on `buf` for the ops of `op` is waited for by the host (a host buffer,
// or everything on the CPU) rather than by the stream.
bool host_waits_for(const OpContext& op, const Tensor& buf);

// Call before a collective on `buf` issued for the ops of `op`: waits the host for the stream
// only where the call reads host memory the stream may still write.
void prepare_collective(const OpContext& op, const Tensor& buf);

// Call after it: ops queued on `op` from now on see the call's result. A device buffer's call
// is waited for by the stream (the host goes on); a host buffer's by the host.
void consume_collective(const OpContext& op, Work& work, const Tensor& buf);

// The two around a blocking-style call: prepare, issue (`issue` returns the Work), consume.
template <class Issue>
void collective_on_stream(const OpContext& op, const Tensor& buf, Issue&& issue) {
  prepare_collective(op, buf);
  WorkPtr work = issue();
  consume_collective(op, *work, buf);
}

}  // namespace tide

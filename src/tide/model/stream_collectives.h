#pragma once
// Collectives in a stream's order. Why: on a device the host must not wait for the stream
// around each collective (issue #27: at most one host wait per step). A device buffer goes to
// the device's group (NCCL, or its stand-in on sim:N: comm/device_routed_group.h), which orders
// the call after the compute stream's queued work by an event; the stream then waits for the
// call's result on the device (Work::wait_on), and the host goes on queueing. A call the host
// runs (MPI on a host buffer, a one-rank local group's copy) reads its buffer at once: the host
// waits for the stream first, and for the call.

#include "tide/comm/process_group.h"
#include "tide/core/stream_event.h"
#include "tide/kernels/ops.h"

namespace tide {

// Whether the host, rather than the stream, waits around a collective of `group` on `buf` for
// the ops of `op`: on the CPU, and where the group does not order the call by the device's
// streams (ProcessGroup::orders_on_stream).
bool host_waits_for(const OpContext& op, const ProcessGroup& group, const Tensor& buf);

// Call before the collective: waits the host for the stream where the host runs the call.
void prepare_collective(const OpContext& op, const ProcessGroup& group, const Tensor& buf);

// The same, where the call also sends what another stream of the device wrote (the copy
// stream's copy up), up to `written`: the device's group waits for that on the device too, so
// the compute stream never waits for the copy; where the host runs the call, the host waits.
void prepare_collective(const OpContext& op, ProcessGroup& group, const Tensor& buf,
                        const StreamEvent& written);

// Call after it: ops queued on `op` from now on see the call's result (the stream waits for
// it on the device, or the host waited).
void consume_collective(const OpContext& op, const ProcessGroup& group, Work& work,
                        const Tensor& buf);

// The two around a blocking-style call: prepare, issue (`issue` returns the Work), consume.
template <class Issue>
void collective_on_stream(const OpContext& op, const ProcessGroup& group, const Tensor& buf,
                          Issue&& issue) {
  prepare_collective(op, group, buf);
  WorkPtr work = issue();
  consume_collective(op, group, *work, buf);
}

}  // namespace tide

#pragma once
// SimCollectiveGroup: the simulated device's NCCL. Why: on a GPU the collectives over device
// buffers are NCCL's, ordered by the device's streams instead of the host (nccl_process_group.h):
// each call waits on its own stream for what the compute stream queued before it, and its Work
// is an event after it. This group keeps exactly that contract on sim:N, so the engine's GPU
// wiring (one mesh group per axis, device buffers through the device's collectives, host
// buffers through MPI: device_routed_group.h) runs in CI, under ThreadSanitizer too.
//
// Each call queues one task on the group's communication stream (a SimStream worker), after an
// event recorded on the compute stream; the task posts the call to `inner` (a host group over
// the same ranks: MPI, whose communicator nothing else uses) in the order the calls were made,
// as NCCL keeps a stream's order. The Work is done once the call was posted and has completed.
// A collective's posted call does not hold up the next. A send or receive does, as NCCL's
// point-to-point calls hold their stream until the peer's matching call has run, and like
// NCCL's they take no tags (tag 0 only): messages between two ranks match in the order they
// were issued. So an executor that would deadlock or mix up messages on NCCL does so here, in
// CI (the pipeline engine gives each stream of messages its own group: pipeline_engine.h).
// The calls are watched as NCCL's are (work_watchdog.h), so CI sees a hung device call time out.

#include <atomic>
#include <memory>

#include "tide/comm/process_group.h"
#include "tide/comm/work_watchdog.h"
#include "tide/core/sim_device.h"

namespace tide {

class SimCollectiveGroup final : public ProcessGroup {
 public:
  // `inner`: a host group over these ranks that only this group uses (device_routed_group.h
  // splits one off); `compute`: the stream the ops run on, whose work each call waits for.
  SimCollectiveGroup(std::shared_ptr<ProcessGroup> inner, std::shared_ptr<SimStream> compute);
  ~SimCollectiveGroup() override;  // drains the communication stream

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend() const override { return "sim"; }
  bool orders_on_stream(const Tensor&) const override { return true; }
  void wait_on_device(const StreamEvent& event) override;

  WorkPtr all_reduce_async(Tensor buf, ReduceOp op) override;
  WorkPtr reduce_scatter_async(Tensor in, Tensor out, ReduceOp op) override;
  WorkPtr all_gather_async(Tensor in, Tensor out) override;
  WorkPtr broadcast_async(Tensor buf, int root) override;
  WorkPtr send_async(Tensor buf, int dst, int tag) override;
  WorkPtr recv_async(Tensor buf, int src, int tag) override;
  WorkPtr barrier_async() override;
  std::shared_ptr<ProcessGroup> split(int color, int key) override;

  void set_timeout(double seconds) override { inner_->set_timeout(seconds); }
  void set_step(int64_t step) override { inner_->set_step(step); }
  // The inner group's: it counts what the calls moved, once they ran.
  CommCounters counters() const override { return inner_->counters(); }
  void reset_counters() override { inner_->reset_counters(); }

 private:
  // Queues `call` (which returns the inner group's Work) on the communication stream after the
  // compute stream's work so far; `buffers` are checked to be on the simulated device. `hold`:
  // the stream waits for the call to complete before it runs the next (point to point).
  // `bytes` and `peer` (the root or peer; -1: none) name the call for the watchdog.
  WorkPtr launch(std::initializer_list<const Tensor*> buffers, const char* who, uint64_t bytes,
                 int peer, std::function<WorkPtr()> call, bool hold = false);
  // A send's or receive's checks: the peer, and tag 0 (NCCL's rule).
  void check_p2p(int peer, int tag, const char* who) const;

  std::shared_ptr<ProcessGroup> inner_;
  std::shared_ptr<SimStream> compute_;
  std::unique_ptr<SimStream> stream_;  // the communication stream
  // The watchdog (work_watchdog.h) watches every call; its abort makes later calls throw, as
  // an aborted NCCL communicator's do (a call already posted to MPI cannot be taken back).
  DeviceCallWatch watch_;
  std::atomic<bool> aborted_{false};
  std::shared_ptr<void> registration_;
};

}  // namespace tide

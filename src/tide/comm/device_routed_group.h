#pragma once
// DeviceRoutedGroup: a group of ranks whose buffers may be on the host or on a device. Why: a
// multi-rank run on a device moves its device buffers (gradients, parameters, activations)
// with the device's collectives, NCCL on a GPU, ordered by its streams, while MPI stays the
// control plane for host buffers (the ranks' agreement, the loss readback, the watchdog). One
// group per mesh axis carries both, so the engine calls one group and never asks which.
//
// A call goes to the device group when its buffer is on a device, else to the host group. The
// device group is made by `make_device` over a communicator split off the host group (a
// duplicate), so host and device calls never share one communicator: each keeps its own
// order, which is the same on every rank because the ranks issue calls in the same order.
// split() splits the host group and makes the piece's device group (a collective over this
// group's ranks, as the split itself). barrier() is the host group's.
//
// The device groups: make_nccl_process_group on cuda:N, SimCollectiveGroup on sim:N.

#include <functional>
#include <memory>

#include "tide/comm/process_group.h"

namespace tide {

// Makes the device's group over the ranks of `bootstrap` (a host group only it uses).
using DeviceGroupFactory =
    std::function<std::shared_ptr<ProcessGroup>(std::shared_ptr<ProcessGroup> bootstrap)>;

class DeviceRoutedGroup final : public ProcessGroup {
 public:
  // Collective over `host`.
  DeviceRoutedGroup(std::shared_ptr<ProcessGroup> host, DeviceGroupFactory make_device);

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::string backend() const override;  // "<host>+<device>", e.g. "mpi+nccl"

  WorkPtr all_reduce_async(Tensor buf, ReduceOp op) override;
  WorkPtr reduce_scatter_async(Tensor in, Tensor out, ReduceOp op) override;
  WorkPtr all_gather_async(Tensor in, Tensor out) override;
  WorkPtr broadcast_async(Tensor buf, int root) override;
  WorkPtr send_async(Tensor buf, int dst, int tag) override;
  WorkPtr recv_async(Tensor buf, int src, int tag) override;
  WorkPtr barrier_async() override;
  std::shared_ptr<ProcessGroup> split(int color, int key) override;

  void set_timeout(double seconds) override;
  void set_step(int64_t step) override;
  WatchdogLink watchdog_link() override { return host_->watchdog_link(); }
  bool orders_on_stream(const Tensor& buf) const override {
    return !buf.device.is_cpu() && device_->orders_on_stream(buf);
  }
  void wait_on_device(const StreamEvent& event) override { device_->wait_on_device(event); }
  // Both groups' traffic together.
  CommCounters counters() const override;
  void reset_counters() override;

  ProcessGroup& host() const { return *host_; }
  ProcessGroup& device() const { return *device_; }

 private:
  // The group for a call on `t` (and `other`, which must be on the same side).
  ProcessGroup& route(const Tensor& t, const Tensor& other, const char* who) const;
  ProcessGroup& route(const Tensor& t, const char* who) const { return route(t, t, who); }

  std::shared_ptr<ProcessGroup> host_;
  DeviceGroupFactory make_device_;
  std::shared_ptr<ProcessGroup> device_;
};

}  // namespace tide

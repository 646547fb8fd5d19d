#include "tide/comm/device_routed_group.h"

#include "tide/core/error.h"

namespace tide {

DeviceRoutedGroup::DeviceRoutedGroup(std::shared_ptr<ProcessGroup> host,
                                     DeviceGroupFactory make_device)
    : host_(std::move(host)), make_device_(std::move(make_device)) {
  TIDE_CHECK(host_ != nullptr && make_device_,
             "DeviceRoutedGroup: needs a host group and a way to make the device's group");
  // The duplicate: one color, each rank keeps its place.
  device_ = make_device_(host_->split(0, host_->rank()));
  TIDE_CHECK(
      device_ != nullptr && device_->size() == host_->size() && device_->rank() == host_->rank(),
      "DeviceRoutedGroup: the device's group must hold the host group's ranks in order");
}

std::string DeviceRoutedGroup::backend() const {
  return host_->backend() + "+" + device_->backend();
}

ProcessGroup& DeviceRoutedGroup::route(const Tensor& t, const Tensor& other,
                                       const char* who) const {
  TIDE_CHECK(t.device.is_cpu() == other.device.is_cpu(),
             "{}: one buffer is on {} and the other on {}; a collective's buffers are both on "
             "the host or both on the device",
             who, t.device.str(), other.device.str());
  return t.device.is_cpu() ? *host_ : *device_;
}

WorkPtr DeviceRoutedGroup::all_reduce_async(Tensor buf, ReduceOp op) {
  return route(buf, "all_reduce").all_reduce_async(buf, op);
}

WorkPtr DeviceRoutedGroup::reduce_scatter_async(Tensor in, Tensor out, ReduceOp op) {
  return route(in, out, "reduce_scatter").reduce_scatter_async(in, out, op);
}

WorkPtr DeviceRoutedGroup::all_gather_async(Tensor in, Tensor out) {
  return route(in, out, "all_gather").all_gather_async(in, out);
}

WorkPtr DeviceRoutedGroup::broadcast_async(Tensor buf, int root) {
  return route(buf, "broadcast").broadcast_async(buf, root);
}

WorkPtr DeviceRoutedGroup::send_async(Tensor buf, int dst, int tag) {
  return route(buf, "send").send_async(buf, dst, tag);
}

WorkPtr DeviceRoutedGroup::recv_async(Tensor buf, int src, int tag) {
  return route(buf, "recv").recv_async(buf, src, tag);
}

WorkPtr DeviceRoutedGroup::barrier_async() {
  return host_->barrier_async();
}

std::shared_ptr<ProcessGroup> DeviceRoutedGroup::split(int color, int key) {
  std::shared_ptr<ProcessGroup> sub = host_->split(color, key);
  return sub ? std::make_shared<DeviceRoutedGroup>(std::move(sub), make_device_) : nullptr;
}

void DeviceRoutedGroup::set_timeout(double seconds) {
  host_->set_timeout(seconds);
  device_->set_timeout(seconds);
}

void DeviceRoutedGroup::set_step(int64_t step) {
  host_->set_step(step);
  device_->set_step(step);
}

CommCounters DeviceRoutedGroup::counters() const {
  const CommCounters h = host_->counters(), d = device_->counters();
  return {h.bytes_sent + d.bytes_sent, h.bytes_received + d.bytes_received, h.calls + d.calls};
}

void DeviceRoutedGroup::reset_counters() {
  host_->reset_counters();
  device_->reset_counters();
}

}  // namespace tide

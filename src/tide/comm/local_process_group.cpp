#include "tide/comm/local_process_group.h"

#include <cstring>

#include "tide/core/device.h"

namespace tide {

namespace {
WorkPtr done() {
  return std::make_shared<CompletedWork>();
}

// A host copy, or on a GPU a blocking device copy (the caller has synchronised its stream
// before the collective, as for every group but NCCL's). The simulated device's memory is host
// pages, copied as the MPI backend moves it (the caller orders it against the device's stream).
void copy_buffer(const Tensor& in, const Tensor& out, const char* who) {
  if (in.data == out.data) return;
  if (in.device.is_cuda() || out.device.is_cuda()) {
    copy_device_bytes(out.data, in.data, in.nbytes(), who);
    return;
  }
  std::memcpy(out.data, in.data, in.nbytes());
}
}  // namespace

WorkPtr LocalProcessGroup::all_reduce_async(Tensor, ReduceOp) {
  count_only_call();
  return done();  // sum or mean over one rank is the buffer itself
}

WorkPtr LocalProcessGroup::reduce_scatter_async(Tensor in, Tensor out, ReduceOp) {
  comm_check::reduce_scatter_sizes(in, out, 1);
  copy_buffer(in, out, "reduce_scatter");
  count_only_call();
  return done();
}

WorkPtr LocalProcessGroup::all_gather_async(Tensor in, Tensor out) {
  comm_check::all_gather_sizes(in, out, 1);
  copy_buffer(in, out, "all_gather");
  count_only_call();
  return done();
}

WorkPtr LocalProcessGroup::broadcast_async(Tensor, int root) {
  comm_check::root(root, 1);
  count_only_call();
  return done();
}

WorkPtr LocalProcessGroup::send_async(Tensor, int dst, int) {
  comm_check::peer(dst, 1, 0, "send");
  return done();  // unreachable: the only rank is this one, which peer() rejects
}

WorkPtr LocalProcessGroup::recv_async(Tensor, int src, int) {
  comm_check::peer(src, 1, 0, "recv");
  return done();
}

WorkPtr LocalProcessGroup::barrier_async() {
  return done();
}

std::shared_ptr<ProcessGroup> LocalProcessGroup::split(int color, int key) {
  comm_check::split_args(color, key);
  if (color < 0) return nullptr;
  return std::make_shared<LocalProcessGroup>();
}

}  // namespace tide

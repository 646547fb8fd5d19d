#include "tide/comm/local_process_group.h"

#include <cstring>

namespace tide {

namespace {
WorkPtr done() {
  return std::make_shared<CompletedWork>();
}

// Host copy only: a GPU tensor in a local group would need the CUDA copy of kernels/, which
// sits above comm/; the single-rank trainer never hands GPU buffers to a 1-rank group copy. The
// simulated device's memory is host pages, copied as the MPI backend moves it (the caller
// orders it against the device's stream).
void copy_host(const Tensor& in, const Tensor& out, const char* who) {
  TIDE_CHECK(in.device.is_cpu() || in.device.is_sim(),
             "{}: the local (single-process) group copies host buffers only, got a {} tensor; "
             "launch with mpirun and the NCCL backend for device buffers",
             who, in.device.str());
  if (in.data != out.data) std::memcpy(out.data, in.data, in.nbytes());
}
}  // namespace

WorkPtr LocalProcessGroup::all_reduce_async(Tensor, ReduceOp) {
  count_only_call();
  return done();  // sum or mean over one rank is the buffer itself
}

WorkPtr LocalProcessGroup::reduce_scatter_async(Tensor in, Tensor out, ReduceOp) {
  comm_check::reduce_scatter_sizes(in, out, 1);
  copy_host(in, out, "reduce_scatter");
  count_only_call();
  return done();
}

WorkPtr LocalProcessGroup::all_gather_async(Tensor in, Tensor out) {
  comm_check::all_gather_sizes(in, out, 1);
  copy_host(in, out, "all_gather");
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

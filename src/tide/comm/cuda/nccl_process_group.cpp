// The NCCL process group (see comm/nccl_process_group.h), in the CUDA module
// (core/cuda_module.h): make_nccl_process_group and set_compute_stream reach it through the comm
// floor's table. Compiled only when NCCL was found (TIDE_HAVE_NCCL).
#ifdef TIDE_HAVE_NCCL

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>

#include "tide/comm/cuda_table.h"
#include "tide/comm/ring_traffic.h"
#include "tide/core/cuda_module.h"

namespace tide {

namespace {

#define TIDE_CUDA_OK(call)                                                                    \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    TIDE_CHECK(e_ == cudaSuccess, "CUDA call {} failed: {}; check the device and its memory", \
               #call, cudaGetErrorString(e_));                                                \
  } while (0)

#define TIDE_NCCL_OK(call)                                                   \
  do {                                                                       \
    ncclResult_t r_ = (call);                                                \
    TIDE_CHECK(r_ == ncclSuccess,                                            \
               "NCCL call {} failed: {} ({}); run with NCCL_DEBUG=WARN for " \
               "details",                                                    \
               #call, ncclGetErrorString(r_), ncclGetLastError(nullptr));    \
  } while (0)

// Queried and destroyed on the watchdog's thread too (work_watchdog.h): each call makes the
// event's device current there first, as PyTorch's watchdog does.
class NcclWork final : public Work {
 public:
  NcclWork(cudaEvent_t ev, int device) : ev_(ev), device_(device) {}
  ~NcclWork() override {
    cudaSetDevice(device_);
    cudaEventDestroy(ev_);
  }
  void wait() override { TIDE_CUDA_OK(cudaEventSynchronize(ev_)); }
  // The compute stream waits on the device for the collective; the host goes on at once.
  void wait_on(void* stream) override {
    TIDE_CUDA_OK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), ev_, 0));
  }
  bool is_completed() override {
    TIDE_CUDA_OK(cudaSetDevice(device_));
    const cudaError_t e = cudaEventQuery(ev_);
    if (e == cudaErrorNotReady) return false;
    TIDE_CUDA_OK(e);
    return true;
  }

 private:
  cudaEvent_t ev_;
  int device_;
};

ncclDataType_t reduce_type(DType t, const char* who) {
  switch (t) {
    case DType::F32:
      return ncclFloat32;
    case DType::BF16:
      return ncclBfloat16;
    case DType::F16:
      return ncclFloat16;
    default:
      TIDE_FAIL("{}: NCCL reductions take f32, bf16 or f16 but got {}; convert the buffer", who,
                dtype_name(t));
  }
}

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(std::shared_ptr<ProcessGroup> bootstrap, int device, cudaStream_t compute,
                   WatchFor watch_for)
      : bootstrap_(std::move(bootstrap)),
        device_(device),
        compute_(compute),
        watch_for_(watch_for) {
    int count = 0;
    TIDE_CHECK(cudaGetDeviceCount(&count) == cudaSuccess && device >= 0 && device < count,
               "NCCL group: CUDA device {} is not available ({} visible); pick a device in 0..{} "
               "or run on a GPU machine",
               device, count, count - 1);
    TIDE_CUDA_OK(cudaSetDevice(device_));
    // The unique id is 128 opaque bytes: moved as 32 int32 words over the bootstrap group.
    ncclUniqueId id{};
    static_assert(sizeof(id) % 4 == 0);
    if (bootstrap_->rank() == 0) TIDE_NCCL_OK(ncclGetUniqueId(&id));
    bootstrap_->broadcast(Tensor(&id, {static_cast<int64_t>(sizeof(id) / 4)}, DType::I32), 0);
    TIDE_NCCL_OK(ncclCommInitRank(&comm_, bootstrap_->size(), id, bootstrap_->rank()));
    TIDE_CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    TIDE_CUDA_OK(cudaMalloc(&barrier_buf_, sizeof(float)));
    // The watchdog (work_watchdog.h): a hung call or an asynchronous error aborts the
    // communicator, which ends its kernels and frees the host thread waiting on them.
    watch_ = watch_for_(*bootstrap_, Device::cuda(device_));
    if (watch_.add_communicator)
      registration_ = watch_.add_communicator(
          [this] {
            aborted_ = true;
            ncclCommAbort(comm_);
          },
          [this] { return async_error(); });
  }

  ~NcclProcessGroup() override {
    registration_.reset();  // the watchdog's hooks no longer run
    cudaSetDevice(device_);
    if (!aborted_) {  // an aborted communicator is freed already, its stream may never drain
      cudaStreamSynchronize(stream_);
      ncclCommDestroy(comm_);
    }
    cudaStreamDestroy(stream_);
    cudaFree(barrier_buf_);
  }

  int rank() const override { return bootstrap_->rank(); }
  int size() const override { return bootstrap_->size(); }
  std::string backend() const override { return "nccl"; }
  bool orders_on_stream(const Tensor&) const override { return true; }
  void wait_on_device(const StreamEvent& event) override {
    TIDE_CHECK(event.device == Device::cuda(device_),
               "wait_on_device: this NCCL group runs on cuda:{} but the event is on {}", device_,
               event.device.str());
    TIDE_CUDA_OK(cudaSetDevice(device_));
    TIDE_CUDA_OK(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(event.cuda.get()), 0));
  }
  void set_compute_stream(cudaStream_t s) { compute_ = s; }

  WorkPtr all_reduce_async(Tensor buf, ReduceOp op) override {
    check_device(buf, "all_reduce");
    const ncclDataType_t t = reduce_type(buf.dtype, "all_reduce");
    const RingTraffic tr = ring_all_reduce_traffic(buf.numel(), size(), rank());
    const size_t es = dtype_size(buf.dtype);
    count_call(tr.sent * es, tr.received * es);
    return launch("all_reduce", buf.nbytes(), -1, [&] {
      TIDE_NCCL_OK(ncclAllReduce(buf.data, buf.data, static_cast<size_t>(buf.numel()), t,
                                 nccl_op(op), comm_, stream_));
    });
  }

  WorkPtr reduce_scatter_async(Tensor in, Tensor out, ReduceOp op) override {
    comm_check::reduce_scatter_sizes(in, out, size());
    check_device(in, "reduce_scatter");
    const ncclDataType_t t = reduce_type(in.dtype, "reduce_scatter");
    const RingTraffic tr = ring_reduce_scatter_traffic(out.numel(), size());
    const size_t es = dtype_size(in.dtype);
    count_call(tr.sent * es, tr.received * es);
    return launch("reduce_scatter", in.nbytes(), -1, [&] {
      TIDE_NCCL_OK(ncclReduceScatter(in.data, out.data, static_cast<size_t>(out.numel()), t,
                                     nccl_op(op), comm_, stream_));
    });
  }

  WorkPtr all_gather_async(Tensor in, Tensor out) override {
    comm_check::all_gather_sizes(in, out, size());
    check_device(in, "all_gather");
    const RingTraffic tr = ring_all_gather_traffic(static_cast<int64_t>(in.nbytes()), size());
    count_call(tr.sent, tr.received);
    // Moved as bytes: no arithmetic, so any dtype works (in-place when in is slot `rank` of out).
    return launch("all_gather", out.nbytes(), -1, [&] {
      TIDE_NCCL_OK(ncclAllGather(in.data, out.data, in.nbytes(), ncclUint8, comm_, stream_));
    });
  }

  WorkPtr broadcast_async(Tensor buf, int root) override {
    comm_check::root(root, size());
    check_device(buf, "broadcast");
    const RingTraffic tr =
        chain_broadcast_traffic(static_cast<int64_t>(buf.nbytes()), size(), rank(), root);
    count_call(tr.sent, tr.received);
    return launch("broadcast", buf.nbytes(), root, [&] {
      TIDE_NCCL_OK(
          ncclBroadcast(buf.data, buf.data, buf.nbytes(), ncclUint8, root, comm_, stream_));
    });
  }

  WorkPtr send_async(Tensor buf, int dst, int tag) override {
    check_p2p(buf, dst, tag, "send");
    count_call(buf.nbytes(), 0);
    return launch("send", buf.nbytes(), dst, [&] {
      TIDE_NCCL_OK(ncclSend(buf.data, buf.nbytes(), ncclUint8, dst, comm_, stream_));
    });
  }

  WorkPtr recv_async(Tensor buf, int src, int tag) override {
    check_p2p(buf, src, tag, "recv");
    count_call(0, buf.nbytes());
    return launch("recv", buf.nbytes(), src, [&] {
      TIDE_NCCL_OK(ncclRecv(buf.data, buf.nbytes(), ncclUint8, src, comm_, stream_));
    });
  }

  // NCCL has no barrier: an all-reduce of one float completes only when every rank joined.
  WorkPtr barrier_async() override {
    count_call(0, 0);
    return launch("barrier", 0, -1, [&] {
      TIDE_NCCL_OK(
          ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclFloat32, ncclSum, comm_, stream_));
    });
  }

  std::shared_ptr<ProcessGroup> split(int color, int key) override {
    auto sub = bootstrap_->split(color, key);
    if (!sub) return nullptr;
    return std::make_shared<NcclProcessGroup>(sub, device_, compute_, watch_for_);
  }

 private:
  static ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::Avg ? ncclAvg : ncclSum; }

  void check_device(const Tensor& t, const char* who) const {
    TIDE_CHECK(t.device == Device::cuda(device_),
               "{}: the NCCL group works on cuda:{} but got a {} tensor; move the buffer to "
               "cuda:{} (host buffers go through the MPI backend)",
               who, device_, t.device.str(), device_);
  }

  void check_p2p(const Tensor& buf, int peer, int tag, const char* who) const {
    comm_check::peer(peer, size(), rank(), who);
    TIDE_CHECK(tag == 0,
               "{}: NCCL has no message tags (got tag {}); messages between two ranks match in "
               "the order they are issued, so use tag 0 and issue them in the same order",
               who, tag);
    check_device(buf, who);
  }

  // The communicator's asynchronous error for the watchdog, "" while there is none.
  std::string async_error() {
    ncclResult_t r = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &r) != ncclSuccess || r == ncclSuccess || r == ncclInProgress)
      return "";
    return fmt::format("NCCL reported {} ({}) on cuda:{}", ncclGetErrorString(r),
                       ncclGetLastError(comm_), device_);
  }

  // Orders the call after the compute stream's work, runs it on the comm stream, and returns a
  // Work on an event recorded after it, watched by the watchdog (`op`, `bytes` and `peer`, the
  // root or peer or -1, name the call there).
  template <class Fn>
  WorkPtr launch(const char* op, uint64_t bytes, int peer, Fn&& enqueue) {
    TIDE_CHECK(!aborted_,
               "{}: the collective watchdog aborted this NCCL communicator after a call timed out "
               "or failed (comm.timeout_s); the job is ending",
               op);
    TIDE_CUDA_OK(cudaSetDevice(device_));
    cudaEvent_t ready = nullptr, done = nullptr;
    TIDE_CUDA_OK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    TIDE_CUDA_OK(cudaEventRecord(ready, compute_));
    TIDE_CUDA_OK(cudaStreamWaitEvent(stream_, ready, 0));
    cudaEventDestroy(ready);  // safe: destruction is deferred until the event completes
    enqueue();
    TIDE_CUDA_OK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    TIDE_CUDA_OK(cudaEventRecord(done, stream_));
    auto work = std::make_shared<NcclWork>(done, device_);
    if (watch_.watch) watch_.watch(work, op, bytes, peer);
    return work;
  }

  std::shared_ptr<ProcessGroup> bootstrap_;
  int device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaStream_t compute_ = nullptr;  // nullptr: the legacy default stream
  void* barrier_buf_ = nullptr;
  WatchFor watch_for_;
  DeviceCallWatch watch_;
  std::atomic<bool> aborted_{false};
  std::shared_ptr<void> registration_;  // destroyed first (declared last): the hooks use comm_
};

std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<ProcessGroup> bootstrap, int device,
                                              void* compute_stream, WatchFor watch_for) {
  return std::make_shared<NcclProcessGroup>(std::move(bootstrap), device,
                                            static_cast<cudaStream_t>(compute_stream), watch_for);
}

void set_nccl_compute_stream(ProcessGroup& group, void* cuda_stream) {
  auto* g = dynamic_cast<NcclProcessGroup*>(&group);
  TIDE_CHECK(g != nullptr,
             "set_compute_stream: the {} group has no CUDA stream; only NCCL groups take one",
             group.backend());
  g->set_compute_stream(static_cast<cudaStream_t>(cuda_stream));
}

}  // namespace
}  // namespace tide

TIDE_CUDA_MODULE_ENTRY const tide::CudaCommTable* tide_cuda_comm() {
  static const tide::CudaCommTable table{sizeof(tide::CudaCommTable), &tide::make_nccl_group,
                                         &tide::set_nccl_compute_stream};
  return &table;
}

#endif  // TIDE_HAVE_NCCL

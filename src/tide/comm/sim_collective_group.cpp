#include "tide/comm/sim_collective_group.h"

#include "tide/core/error.h"

namespace tide {

namespace {

// The Work of a call: done once the communication stream has posted the inner group's call
// (after the compute stream's work) and that call has completed. A host wait for it is counted
// on the compute stream (SimStream::synchronizations): on a GPU it waits for that stream's work.
class SimCollectiveWork final : public Work {
 public:
  SimCollectiveWork(std::shared_ptr<SimEvent> posted, std::shared_ptr<WorkPtr> inner,
                    SimStream* compute)
      : posted_(std::move(posted)), inner_(std::move(inner)), compute_(compute) {}
  void wait() override {
    compute_->count_host_wait();
    posted_->wait();  // rethrows the post's error
    (*inner_)->wait();
  }
  bool is_completed() override {
    if (!posted_->done()) return false;
    // A failed stream skipped the post: done (wait() rethrows the stream's error).
    return *inner_ == nullptr || (*inner_)->is_completed();
  }
  // `stream` is a SimStream (the compute stream): it waits for the post, then for the call,
  // in a task of its own; the host goes on, as after cudaStreamWaitEvent.
  void wait_on(void* stream) override {
    auto* s = static_cast<SimStream*>(stream);
    s->wait(posted_);
    s->enqueue([inner = inner_] { (*inner)->wait(); });
  }

 private:
  std::shared_ptr<SimEvent> posted_;
  std::shared_ptr<WorkPtr> inner_;  // written by the stream's task, read after posted_
  SimStream* compute_;
};

}  // namespace

SimCollectiveGroup::SimCollectiveGroup(std::shared_ptr<ProcessGroup> inner,
                                       std::shared_ptr<SimStream> compute)
    : inner_(std::move(inner)), compute_(std::move(compute)) {
  TIDE_CHECK(inner_ != nullptr && compute_ != nullptr,
             "SimCollectiveGroup: needs a host group and the simulated device's compute stream");
  // One thread: the worker only waits for the inner group's calls.
  stream_ = std::make_unique<SimStream>(compute_->device(), 1);
  watch_ = device_call_watch(*inner_, compute_->device());
  if (watch_.add_communicator)
    registration_ = watch_.add_communicator([this] { aborted_ = true; }, {});
}

SimCollectiveGroup::~SimCollectiveGroup() = default;  // ~SimStream runs what is queued

void SimCollectiveGroup::wait_on_device(const StreamEvent& event) {
  TIDE_CHECK(event.device == compute_->device(),
             "wait_on_device: this group's calls run on {} but the event is on {}",
             compute_->device().str(), event.device.str());
  stream_->wait(event.sim);
}

WorkPtr SimCollectiveGroup::launch(std::initializer_list<const Tensor*> buffers, const char* who,
                                   uint64_t bytes, int peer, std::function<WorkPtr()> call,
                                   bool hold) {
  TIDE_CHECK(!aborted_,
             "{}: the collective watchdog aborted this group's communicator after a call timed "
             "out (comm.timeout_s); the job is ending",
             who);
  for (const Tensor* t : buffers)
    TIDE_CHECK(t->device == compute_->device(),
               "{}: the simulated device's collectives work on {} but got a {} tensor (host "
               "buffers go through the host group)",
               who, compute_->device().str(), t->device.str());
  stream_->wait(compute_->record());
  // A collective is posted, not waited for, on the stream; a send or receive is waited for
  // there, as NCCL's blocks its stream until the peer's call has matched it.
  auto inner = std::make_shared<WorkPtr>();
  stream_->enqueue([inner, hold, call = std::move(call)] {
    *inner = call();
    if (hold) (*inner)->wait();
  });
  auto work = std::make_shared<SimCollectiveWork>(stream_->record(), inner, compute_.get());
  if (watch_.watch) watch_.watch(work, who, bytes, peer);
  return work;
}

WorkPtr SimCollectiveGroup::all_reduce_async(Tensor buf, ReduceOp op) {
  return launch({&buf}, "all_reduce", buf.nbytes(), -1,
                [=, this] { return inner_->all_reduce_async(buf, op); });
}

WorkPtr SimCollectiveGroup::reduce_scatter_async(Tensor in, Tensor out, ReduceOp op) {
  comm_check::reduce_scatter_sizes(in, out, size());
  return launch({&in, &out}, "reduce_scatter", in.nbytes(), -1,
                [=, this] { return inner_->reduce_scatter_async(in, out, op); });
}

WorkPtr SimCollectiveGroup::all_gather_async(Tensor in, Tensor out) {
  comm_check::all_gather_sizes(in, out, size());
  return launch({&in, &out}, "all_gather", out.nbytes(), -1,
                [=, this] { return inner_->all_gather_async(in, out); });
}

WorkPtr SimCollectiveGroup::broadcast_async(Tensor buf, int root) {
  comm_check::root(root, size());
  return launch({&buf}, "broadcast", buf.nbytes(), root,
                [=, this] { return inner_->broadcast_async(buf, root); });
}

void SimCollectiveGroup::check_p2p(int peer, int tag, const char* who) const {
  comm_check::peer(peer, size(), rank(), who);
  TIDE_CHECK(tag == 0,
             "{}: the simulated device's point-to-point calls take no message tags, as NCCL's "
             "(got tag {}); messages between two ranks match in the order they are issued, so "
             "use tag 0 and issue them in the same order on both ranks",
             who, tag);
}

// Tag 0 on the inner group too: MPI matches one tag's messages between two ranks in the order
// they were sent, as NCCL matches its untagged ones.
WorkPtr SimCollectiveGroup::send_async(Tensor buf, int dst, int tag) {
  check_p2p(dst, tag, "send");
  return launch(
      {&buf}, "send", buf.nbytes(), dst, [=, this] { return inner_->send_async(buf, dst, 0); },
      /*hold=*/true);
}

WorkPtr SimCollectiveGroup::recv_async(Tensor buf, int src, int tag) {
  check_p2p(src, tag, "recv");
  return launch(
      {&buf}, "recv", buf.nbytes(), src, [=, this] { return inner_->recv_async(buf, src, 0); },
      /*hold=*/true);
}

WorkPtr SimCollectiveGroup::barrier_async() {
  return launch({}, "barrier", 0, -1, [this] { return inner_->barrier_async(); });
}

std::shared_ptr<ProcessGroup> SimCollectiveGroup::split(int color, int key) {
  std::shared_ptr<ProcessGroup> sub = inner_->split(color, key);
  return sub ? std::make_shared<SimCollectiveGroup>(std::move(sub), compute_) : nullptr;
}

}  // namespace tide

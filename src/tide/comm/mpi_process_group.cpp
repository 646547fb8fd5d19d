#include "tide/comm/mpi_process_group.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "tide/comm/mpi_ring_ops.h"
#include "tide/comm/ring_traffic.h"
#include "tide/comm/watchdog.h"

namespace tide {

namespace {

// One or more MPI non-blocking calls posted by `post_fn`, then `done_fn` (e.g. the division of
// an average) once all of them completed.
class RequestOp final : public MpiOp {
 public:
  using PostFn = std::function<void(std::vector<MPI_Request>&)>;
  RequestOp(PostFn post_fn, std::function<void()> done_fn = {})
      : post_(std::move(post_fn)), done_(std::move(done_fn)) {}
  void start() override { post_(reqs_); }
  bool progress() override {
    int flag = 0;
    MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &flag, MPI_STATUSES_IGNORE);
    if (!flag) return false;
    if (done_) done_();
    return true;
  }

 private:
  PostFn post_;
  std::function<void()> done_;
  std::vector<MPI_Request> reqs_;
};

// MPI element type used to move (not reduce) a dtype.
MPI_Datatype move_type(DType t) {
  switch (dtype_size(t)) {
    case 4:
      return MPI_UINT32_T;
    case 2:
      return MPI_UINT16_T;
  }
  TIDE_ASSERT(false);
  return MPI_BYTE;
}

// The simulated device's memory is host memory: MPI moves it as a CUDA-aware MPI moves GPU
// memory, and the caller orders it against the device's stream (waits before and after).
void check_host(const Tensor& t, const char* who) {
  TIDE_CHECK(t.device.is_cpu() || t.device.is_sim(),
             "{}: the MPI backend moves host buffers but got a {} tensor; use the NCCL backend "
             "(comm.backend = nccl) for device buffers",
             who, t.device.str());
}

void check_reducible(const Tensor& t, const char* who) {
  check_host(t, who);
  TIDE_CHECK(is_float_dtype(t.dtype),
             "{}: MPI reductions take f32, bf16 or f16 but got {}; convert the buffer to one "
             "of them",
             who, dtype_name(t.dtype));
}

// MPI element type used to reduce a dtype: bf16 and f16 travel as 16-bit patterns that the
// engine's user-defined sums (MpiEngine::sum_op) add.
MPI_Datatype reduce_type(DType t) {
  return t == DType::F32 ? MPI_FLOAT : MPI_UINT16_T;
}

std::function<void()> averager(DType t, void* x, int64_t n, int world, ReduceOp op) {
  if (op != ReduceOp::Avg) return {};
  return [=] { divide_elements(x, t, n, static_cast<float>(world)); };
}

}  // namespace

MpiProcessGroup::MpiProcessGroup(std::shared_ptr<MpiEngine> engine, MPI_Comm comm,
                                 CommAlgorithm algorithm)
    : engine_(std::move(engine)), comm_(comm), algorithm_(algorithm) {
  engine_->run([&] {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Comm_dup(comm_, &ring_comm_);
    // The members' world ranks, for messages (local, no communication).
    MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
    MPI_Comm_group(comm_, &group);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    std::vector<int> ranks(static_cast<size_t>(size_));
    std::iota(ranks.begin(), ranks.end(), 0);
    world_ranks_.resize(static_cast<size_t>(size_));
    MPI_Group_translate_ranks(group, size_, ranks.data(), world, world_ranks_.data());
    MPI_Group_free(&group);
    MPI_Group_free(&world);
  });
  in_group_ = group_suffix(world_ranks_, engine_->world_size());
}

MpiProcessGroup::~MpiProcessGroup() {
  for (auto& w : outstanding_) {
    if (auto work = w.lock()) {
      try {
        work->wait();
      } catch (...) {  // the caller saw (or ignored) this error already
      }
    }
  }
  try {
    engine_->run([&] {
      MPI_Comm_free(&ring_comm_);
      MPI_Comm_free(&comm_);
    });
  } catch (...) {
  }
}

std::shared_ptr<MpiProcessGroup> MpiProcessGroup::world(CommAlgorithm algorithm) {
  auto engine = mpi_engine();
  MPI_Comm comm = MPI_COMM_NULL;
  // A duplicate, so tide's traffic never matches messages of other MPI users in the process.
  engine->run([&] { MPI_Comm_dup(MPI_COMM_WORLD, &comm); });
  return std::make_shared<MpiProcessGroup>(engine, comm, algorithm);
}

WorkPtr MpiProcessGroup::submit(std::unique_ptr<MpiOp> op, std::string what) {
  std::erase_if(outstanding_, [](const std::weak_ptr<MpiWork>& w) {
    auto s = w.lock();
    return !s || s->is_completed();
  });
  auto work = engine_->submit(std::move(op), std::move(what));
  outstanding_.push_back(work);
  return work;
}

int MpiProcessGroup::next_ring_tag() {
  ring_seq_ = (ring_seq_ + 1) % 32768;  // 32767 is the smallest MPI_TAG_UB MPI allows
  return ring_seq_;
}

WorkPtr MpiProcessGroup::all_reduce_async(Tensor buf, ReduceOp op) {
  check_reducible(buf, "all_reduce");
  const int64_t n = buf.numel();
  const int count = mpi_count(n, "all_reduce");
  const std::string what = "all_reduce of " + human_bytes(buf.nbytes()) + in_group();
  if (algorithm_ == CommAlgorithm::Ring) {
    count_only_call();  // bytes are counted per message by the ring op
    return submit(make_ring_all_reduce(this, ring_comm_, next_ring_tag(), buf, op), what);
  }
  const RingTraffic t = ring_all_reduce_traffic(n, size_, rank_);
  const auto elem = static_cast<int64_t>(dtype_size(buf.dtype));
  count_call(t.sent * elem, t.received * elem);
  void* x = buf.data;
  const MPI_Datatype type = reduce_type(buf.dtype);
  const MPI_Op sum = engine_->sum_op(buf.dtype);
  return submit(std::make_unique<RequestOp>(
                    [=, this](std::vector<MPI_Request>& r) {
                      r.resize(1);
                      MPI_Iallreduce(MPI_IN_PLACE, x, count, type, sum, comm_, &r[0]);
                    },
                    averager(buf.dtype, x, n, size_, op)),
                what);
}

WorkPtr MpiProcessGroup::reduce_scatter_async(Tensor in, Tensor out, ReduceOp op) {
  comm_check::reduce_scatter_sizes(in, out, size_);
  check_reducible(in, "reduce_scatter");
  const int64_t k = out.numel();
  mpi_count(in.numel(), "reduce_scatter");
  const std::string what = "reduce_scatter of " + human_bytes(in.nbytes()) + in_group();
  const char* in_begin = static_cast<const char*>(in.data);
  const char* out_begin = static_cast<const char*>(out.data);
  // In place: the output is this rank's own slice of the input (a sliced chunk reduced where it
  // lies, as NCCL defines in-place reduce-scatter). Any other overlap is an error.
  const bool in_place = out_begin == in_begin + out.nbytes() * rank_;
  TIDE_CHECK(
      in_place || out_begin + out.nbytes() <= in_begin || in_begin + in.nbytes() <= out_begin,
      "reduce_scatter: the output overlaps the input other than as this rank's slice of "
      "it; give the output its own buffer or make it slice {} of the input",
      rank_);
  if (algorithm_ == CommAlgorithm::Ring) {
    count_only_call();
    return submit(make_ring_reduce_scatter(this, ring_comm_, next_ring_tag(), in, out, op), what);
  }
  const RingTraffic t = ring_reduce_scatter_traffic(k, size_);
  const auto elem = static_cast<int64_t>(dtype_size(in.dtype));
  count_call(t.sent * elem, t.received * elem);
  void* src = in.data;
  void* dst = out.data;
  const MPI_Datatype type = reduce_type(in.dtype);
  const MPI_Op sum = engine_->sum_op(in.dtype);
  // MPI's in-place form leaves the result at the start of the buffer: move it to the slice.
  std::function<void()> average = averager(out.dtype, dst, k, size_, op);
  std::function<void()> done = average;
  if (in_place && rank_ > 0)
    done = [=] {
      std::memmove(dst, src, static_cast<size_t>(k * elem));
      if (average) average();
    };
  return submit(std::make_unique<RequestOp>(
                    [=, this](std::vector<MPI_Request>& r) {
                      r.resize(1);
                      MPI_Ireduce_scatter_block(in_place ? MPI_IN_PLACE : src, in_place ? src : dst,
                                                static_cast<int>(k), type, sum, comm_, &r[0]);
                    },
                    done),
                what);
}

WorkPtr MpiProcessGroup::all_gather_async(Tensor in, Tensor out) {
  comm_check::all_gather_sizes(in, out, size_);
  check_host(in, "all_gather");
  mpi_count(out.numel(), "all_gather");
  const std::string what = "all_gather of " + human_bytes(out.nbytes()) + in_group();
  if (algorithm_ == CommAlgorithm::Ring) {
    count_only_call();
    return submit(make_ring_all_gather(this, ring_comm_, next_ring_tag(), in, out), what);
  }
  const RingTraffic t = ring_all_gather_traffic(static_cast<int64_t>(in.nbytes()), size_);
  count_call(t.sent, t.received);
  const void* src = in.data;
  void* dst = out.data;
  const int k = static_cast<int>(in.numel());
  const MPI_Datatype type = move_type(in.dtype);
  // MPI forbids aliasing send and receive buffers; a caller gathering into its own slot of
  // `out` (the ZeRO layout) gets MPI_IN_PLACE.
  const bool in_place =
      static_cast<const char*>(src) == static_cast<char*>(dst) + in.nbytes() * rank_;
  return submit(std::make_unique<RequestOp>([=, this](std::vector<MPI_Request>& r) {
                  r.resize(1);
                  MPI_Iallgather(in_place ? MPI_IN_PLACE : src, k, type, dst, k, type, comm_,
                                 &r[0]);
                }),
                what);
}

WorkPtr MpiProcessGroup::broadcast_async(Tensor buf, int root) {
  comm_check::root(root, size_);
  check_host(buf, "broadcast");
  const int count = mpi_count(buf.numel(), "broadcast");
  const RingTraffic t =
      chain_broadcast_traffic(static_cast<int64_t>(buf.nbytes()), size_, rank_, root);
  count_call(t.sent, t.received);
  void* x = buf.data;
  const MPI_Datatype type = move_type(buf.dtype);
  return submit(std::make_unique<RequestOp>([=, this](std::vector<MPI_Request>& r) {
                  r.resize(1);
                  MPI_Ibcast(x, count, type, root, comm_, &r[0]);
                }),
                fmt::format("broadcast of {} from {}{}", human_bytes(buf.nbytes()),
                            peer_name(world_ranks_, root), in_group()));
}

WorkPtr MpiProcessGroup::send_async(Tensor buf, int dst, int tag) {
  comm_check::peer(dst, size_, rank_, "send");
  comm_check::tag(tag);
  check_host(buf, "send");
  const int count = mpi_count(buf.numel(), "send");
  count_call(buf.nbytes(), 0);
  const void* x = buf.data;
  const MPI_Datatype type = move_type(buf.dtype);
  return submit(std::make_unique<RequestOp>([=, this](std::vector<MPI_Request>& r) {
                  r.resize(1);
                  MPI_Isend(x, count, type, dst, tag, comm_, &r[0]);
                }),
                fmt::format("send of {} to {} (tag {})", human_bytes(buf.nbytes()),
                            peer_name(world_ranks_, dst), tag));
}

WorkPtr MpiProcessGroup::recv_async(Tensor buf, int src, int tag) {
  comm_check::peer(src, size_, rank_, "recv");
  comm_check::tag(tag);
  check_host(buf, "recv");
  const int count = mpi_count(buf.numel(), "recv");
  count_call(0, buf.nbytes());
  void* x = buf.data;
  const MPI_Datatype type = move_type(buf.dtype);
  return submit(std::make_unique<RequestOp>([=, this](std::vector<MPI_Request>& r) {
                  r.resize(1);
                  MPI_Irecv(x, count, type, src, tag, comm_, &r[0]);
                }),
                fmt::format("recv of {} from {} (tag {})", human_bytes(buf.nbytes()),
                            peer_name(world_ranks_, src), tag));
}

WorkPtr MpiProcessGroup::barrier_async() {
  count_call(0, 0);
  return submit(std::make_unique<RequestOp>([this](std::vector<MPI_Request>& r) {
                  r.resize(1);
                  MPI_Ibarrier(comm_, &r[0]);
                }),
                "barrier" + in_group_);
}

std::shared_ptr<ProcessGroup> MpiProcessGroup::split(int color, int key) {
  comm_check::split_args(color, key);
  MPI_Comm sub = MPI_COMM_NULL;
  engine_->run([&] { MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &sub); },
               "split (MPI_Comm_split)");
  if (sub == MPI_COMM_NULL) return nullptr;
  return std::make_shared<MpiProcessGroup>(engine_, sub, algorithm_);
}

}  // namespace tide

#include "tide/comm/mpi_ring_ops.h"

#include <cstddef>
#include <cstring>
#include <vector>

#include "tide/comm/mpi_process_group.h"
#include "tide/comm/ring_traffic.h"
#include "tide/core/dtype.h"

namespace tide {

namespace {

// Steps of a ring algorithm: each step sends one block right and receives one block from the
// left; the next step is posted only when both are done (the sent block may be the one
// reduced next).
class RingOp : public MpiOp {
 public:
  RingOp(MpiProcessGroup* g, MPI_Comm comm, int tag, int steps)
      : g_(g), comm_(comm), tag_(tag), steps_(steps), rank_(g->rank()), world_(g->size()) {}

  void start() override {
    prepare();
    if (steps_ > 0) post_step(0);
  }

  bool progress() override {
    if (step_ < steps_) {
      int flag = 0;
      MPI_Testall(2, reqs_, &flag, MPI_STATUSES_IGNORE);
      if (!flag) return false;
      finish_step(step_);
      if (++step_ < steps_) {
        post_step(step_);
        return false;
      }
    }
    finish();
    return true;
  }

 protected:
  virtual void prepare() {}
  virtual void post_step(int s) = 0;
  virtual void finish_step(int s) = 0;
  virtual void finish() {}

  // Sends `send_bytes` from `send` to rank+1 and receives `recv_bytes` into `recv` from rank-1,
  // counting exactly those bytes.
  void post(const void* send, int64_t send_bytes, void* recv, int64_t recv_bytes) {
    const int right = ring_mod(rank_ + 1, world_), left = ring_mod(rank_ - 1, world_);
    MPI_Irecv(recv, mpi_count(recv_bytes, "ring"), MPI_BYTE, left, tag_, comm_, &reqs_[0]);
    MPI_Isend(send, mpi_count(send_bytes, "ring"), MPI_BYTE, right, tag_, comm_, &reqs_[1]);
    g_->add_traffic(static_cast<uint64_t>(send_bytes), static_cast<uint64_t>(recv_bytes));
  }

  MpiProcessGroup* g_;
  MPI_Comm comm_;
  int tag_, steps_, step_ = 0, rank_, world_;
  MPI_Request reqs_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
};

// Buffers are handled as bytes; add_elements and divide_elements (core/dtype.h) do the
// arithmetic of the dtype.
class RingAllReduce final : public RingOp {
 public:
  RingAllReduce(MpiProcessGroup* g, MPI_Comm comm, int tag, Tensor buf, ReduceOp op)
      : RingOp(g, comm, tag, 2 * (g->size() - 1)),
        x_(static_cast<std::byte*>(buf.data)),
        n_(buf.numel()),
        dtype_(buf.dtype),
        elem_(static_cast<int64_t>(dtype_size(buf.dtype))),
        op_(op) {
    // Largest chunk: chunk sizes differ by at most one.
    scratch_.resize(static_cast<size_t>((n_ / world_ + 1) * elem_));
  }

 private:
  std::byte* at(int c) const { return x_ + chunk_begin(n_, world_, c) * elem_; }
  int64_t len(int c) const { return chunk_size(n_, world_, c); }

  void post_step(int s) override {
    const int phase1 = world_ - 1;
    if (s < phase1) {  // reduce-scatter: send chunk r-s, receive chunk r-s-1 to add
      const int send = ring_mod(rank_ - s, world_), recv = ring_mod(rank_ - s - 1, world_);
      post(at(send), len(send) * elem_, scratch_.data(), len(recv) * elem_);
    } else {  // all-gather: send reduced chunk r+1-t, receive reduced chunk r-t in place
      const int t = s - phase1;
      const int send = ring_mod(rank_ + 1 - t, world_), recv = ring_mod(rank_ - t, world_);
      post(at(send), len(send) * elem_, at(recv), len(recv) * elem_);
    }
  }

  void finish_step(int s) override {
    if (s >= world_ - 1) return;
    const int c = ring_mod(rank_ - s - 1, world_);
    add_elements(dtype_, at(c), at(c), scratch_.data(), len(c));  // chunk += received
  }

  void finish() override {
    if (op_ == ReduceOp::Avg) divide_elements(x_, dtype_, n_, static_cast<float>(world_));
  }

  std::byte* x_;
  int64_t n_;
  DType dtype_;
  int64_t elem_;  // bytes per element
  ReduceOp op_;
  std::vector<std::byte> scratch_;
};

// Rank r ends with chunk r: at step s it sends its running sum of chunk r-s-1 and receives the
// left neighbour's running sum of chunk r-s-2, to which it adds its own input.
class RingReduceScatter final : public RingOp {
 public:
  RingReduceScatter(MpiProcessGroup* g, MPI_Comm comm, int tag, Tensor in, Tensor out, ReduceOp op)
      : RingOp(g, comm, tag, g->size() - 1),
        in_(static_cast<const std::byte*>(in.data)),
        out_(static_cast<std::byte*>(out.data)),
        k_(out.numel()),
        dtype_(out.dtype),
        bytes_(static_cast<int64_t>(out.nbytes())),
        op_(op),
        send_(static_cast<size_t>(bytes_)),
        recv_(static_cast<size_t>(bytes_)) {}

 private:
  const std::byte* chunk(int c) const { return in_ + static_cast<int64_t>(c) * bytes_; }

  void post_step(int s) override {
    // Step 0 sends the input chunk itself; later steps send the running sum.
    const std::byte* send = s == 0 ? chunk(ring_mod(rank_ - 1, world_)) : send_.data();
    post(send, bytes_, recv_.data(), bytes_);
  }

  void finish_step(int s) override {
    const std::byte* mine = chunk(ring_mod(rank_ - s - 2, world_));
    std::byte* dst = s == steps_ - 1 ? out_ : send_.data();  // the last sum is chunk r: the output
    add_elements(dtype_, dst, recv_.data(), mine, k_);
  }

  void finish() override {
    if (steps_ == 0 && out_ != in_) std::memcpy(out_, in_, static_cast<size_t>(bytes_));
    if (op_ == ReduceOp::Avg) divide_elements(out_, dtype_, k_, static_cast<float>(world_));
  }

  const std::byte* in_;
  std::byte* out_;
  int64_t k_;
  DType dtype_;
  int64_t bytes_;  // of one chunk (the output)
  ReduceOp op_;
  std::vector<std::byte> send_, recv_;
};

// Rank r first places its own block at slot r, then passes blocks around the ring: at step s it
// forwards block r-s and receives block r-s-1.
class RingAllGather final : public RingOp {
 public:
  RingAllGather(MpiProcessGroup* g, MPI_Comm comm, int tag, Tensor in, Tensor out)
      : RingOp(g, comm, tag, g->size() - 1),
        in_(static_cast<const char*>(in.data)),
        out_(static_cast<char*>(out.data)),
        block_(static_cast<int64_t>(in.nbytes())) {}

 private:
  char* slot(int c) const { return out_ + static_cast<int64_t>(c) * block_; }
  void prepare() override {
    if (slot(rank_) != in_) std::memcpy(slot(rank_), in_, static_cast<size_t>(block_));
  }
  void post_step(int s) override {
    post(slot(ring_mod(rank_ - s, world_)), block_, slot(ring_mod(rank_ - s - 1, world_)), block_);
  }
  void finish_step(int) override {}

  const char* in_;
  char* out_;
  int64_t block_;
};

}  // namespace

std::unique_ptr<MpiOp> make_ring_all_reduce(MpiProcessGroup* g, MPI_Comm comm, int tag, Tensor buf,
                                            ReduceOp op) {
  return std::make_unique<RingAllReduce>(g, comm, tag, buf, op);
}

std::unique_ptr<MpiOp> make_ring_reduce_scatter(MpiProcessGroup* g, MPI_Comm comm, int tag,
                                                Tensor in, Tensor out, ReduceOp op) {
  return std::make_unique<RingReduceScatter>(g, comm, tag, in, out, op);
}

std::unique_ptr<MpiOp> make_ring_all_gather(MpiProcessGroup* g, MPI_Comm comm, int tag, Tensor in,
                                            Tensor out) {
  return std::make_unique<RingAllGather>(g, comm, tag, in, out);
}

}  // namespace tide

#pragma once
// ZeRO-Offload (Ren et al., ../shared/papers/zero-offload.en.txt), the optimizer half:
// zero_optimization.offload_optimizer.device=cpu on top of ZeRO stages 1-3.
//
// Why: the fp32 master weights and Adam's m and v are 12 of the 16 bytes per parameter of
// mixed-precision Adam. Keeping them (this rank's slice, 12 Psi/N bytes) on the host tier and
// running Adam on the CPU leaves only the parameters and gradients on the compute tier (the
// device; on a CPU-only machine the BudgetedAllocator standing in for it). What moves, per step
// and rank, is the owned gradient slice down (4 Psi/N bytes in f32) and the updated parameter
// slice back up (4 Psi/N), Psi counting the chunks' padding.
//
// Where each piece runs (one offload thread, owned here; the compute thread is the caller):
//
//   backward (compute thread)      ZeroPolicy reduce-scatters chunk c; when its last reduction
//                                  of the step completes it calls on_reduced(c)
//   offload thread, during backward  copy the owned GRAD slice of c to its host buffer, divide
//                                  by N (the mean over ranks), and sum the squares of each
//                                  tensor's part of the slice for the global norm
//   finish_gradients (compute)     waits for every chunk's copy
//   update (both)                  the offload thread runs CPU AdamW on chunk 0, 1, ...; the
//                                  compute thread copies chunk c's updated master slice into
//                                  the PARAM slice while the offload thread updates chunk c+1
//
// The executor adds the global norm per tensor: the offload thread's sums (tensor_grad_sums.h,
// on the host copy, after the division) are bitwise what the policy stack takes from the
// store's slices without offload (the same function over the same element ranges of the same
// values).
//
// Adam needs the clip coefficient, hence the global norm, hence every chunk: with clipping (or
// with skip_non_finite, whose verdict also comes from the norm) Adam starts after backward and
// only the gradient copies and norm partials hide behind backward. Without clipping and with
// non-finite norms an error (OptimizerSettings::grad_clip = 0, skip_non_finite = false), the
// update of every chunk is known when it arrives, so the offload thread runs Adam on it at once,
// overlapped with the rest of backward (the overlap). The cost of that choice: a
// non-finite norm is found after the state was updated, which only matters for the error it
// raises anyway. Both orders give bitwise the non-offloaded result: the same AdamW calls on the
// same values (optimizer_step.h), only where and when they run differs.
//
// One-step delayed update (OffloadSettings::delayed_update, after dpu_warmup_steps): the
// executor (its policy stack) calls start_update() at the end of step t and finish_update() at the
// end of step t+1, so step t's Adam runs during step t+1's forward and backward (which use the
// parameters of step t-1). The offload thread runs its jobs in order: step t+1's gradient copies
// queue behind step t's Adam and never overwrite host gradients it still reads.
//
// Counters per step: bytes and moves each way, the seconds the compute thread waited on the
// offload thread, and the copy/Adam seconds of the offload thread with the part of them that
// ran before backward ended (hidden).
//
// pin_memory (OffloadSettings): on a device the caller gives page-locked host memory for the
// buffers the copies read and write (make_host_allocator); nothing to pin on the CPU.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "tide/kernels/mover.h"
#include "tide/memory/chunk_store.h"
#include "tide/memory/zero_settings.h"
#include "tide/optim/adamw.h"
#include "tide/parallel/zero.h"

namespace tide {

struct OffloadStepCounters {
  uint64_t bytes_to_host = 0;     // gradient slices copied compute -> host
  uint64_t bytes_to_compute = 0;  // updated parameter slices copied host -> compute
  int moves_to_host = 0, moves_to_compute = 0;
  double wait_seconds = 0;    // the compute thread blocked on the offload thread
  double copy_seconds = 0;    // offload thread: gradient copies and norm partials
  double adam_seconds = 0;    // offload thread: CPU AdamW
  double hidden_seconds = 0;  // of copy + Adam, the part that ran before backward ended

  OffloadStepCounters& operator+=(const OffloadStepCounters& o) {  // several stores' step
    bytes_to_host += o.bytes_to_host;
    bytes_to_compute += o.bytes_to_compute;
    moves_to_host += o.moves_to_host;
    moves_to_compute += o.moves_to_compute;
    wait_seconds += o.wait_seconds;
    copy_seconds += o.copy_seconds;
    adam_seconds += o.adam_seconds;
    hidden_seconds += o.hidden_seconds;
    return *this;
  }
};

class OffloadPolicy final : public ReducedGradSink {
 public:
  // The store must keep a separate MASTER (StoreOptions::separate_master) sliced like ADAM_M and
  // ADAM_V. `dp_size`: N, the divisor of the mean. `threads`: OpenMP threads of the CPU Adam
  // (0: OpenMP's default). Host gradient buffers (4 Psi/N bytes) come from `grad_host`, and
  // on a device with 16-bit parameters there their staging for the copy up (2 Psi/N bytes;
  // none with offload_param, whose slices are on the host: the update writes them there).
  // `op`: the context whose stream writes the store's GRAD and PARAM chunks (the model's). On a
  // device the slices go down and up as copies on `copies`'s stream (make_copy_context; op's
  // when it is op itself), ordered with op's by events, so that they overlap op's work: a
  // gradient slice is queued for the host when its reduction is (after an event of op's
  // stream), and the offload thread waits for that copy; the parameters go up queued after
  // Adam, op's stream waits for them before its next op, and the next Adam of that chunk waits
  // for them too.
  OffloadPolicy(ChunkStore& store, int dp_size, const OffloadSettings& settings, int threads,
                Allocator& grad_host, const OpContext& op = {}, const OpContext& copies = {});
  ~OffloadPolicy() override;
  OffloadPolicy(const OffloadPolicy&) = delete;
  OffloadPolicy& operator=(const OffloadPolicy&) = delete;

  // The owned PARAM slices changed outside a step (initialisation, a loaded checkpoint): copy
  // them into the MASTER slices (f32 parameters only; 16-bit ones are the master rounded).
  void sync_master();
  // A step begins. `early`: the hyper-parameters (lr included) and step of an update known
  // before the norm (no clipping): Adam runs on each chunk as it arrives; nullptr: update().
  void begin_step(const AdamWHyper* early, const AdamWStep& early_step);
  void on_reduced(int chunk) override;
  // After backward: waits for every chunk's gradients on the host.
  void finish_gradients();
  // After finish_gradients: per tensor id, the sum of squares of its part of this rank's owned
  // gradient slice (divided by N; 0 for a tensor outside the slice).
  std::span<const double> tensor_sums() const { return tensor_sums_; }
  // The host copy of chunk c's owned gradient slice (after finish_gradients: divided by N).
  Tensor host_grad(int c) const {
    return Tensor(host_grad_[c], Shape{store_.layout().slice_elems(c)});
  }
  // The update (skipped steps do not call it): Adam per chunk on the offload thread (unless it
  // ran early), each chunk's master slice copied into its PARAM slice as soon as it is done.
  // update() = start_update() + finish_update().
  void update(const AdamWHyper& hyper, const AdamWStep& step);
  // One-step delayed update (DPU): start_update() queues Adam of every chunk and returns; it
  // runs while the next step's forward and backward compute (that step's gradient copies queue
  // behind it, so they find Adam done with the host gradients). finish_update() waits for it
  // and copies the parameters back.
  void start_update(const AdamWHyper& hyper, const AdamWStep& step);
  void finish_update();
  bool update_pending() const { return pending_; }

  const OffloadStepCounters& counters() const { return counters_; }
  // Bytes of the host gradient buffers.
  size_t grad_buffer_bytes() const { return grad_bytes_; }

 private:
  using Clock = std::chrono::steady_clock;
  enum class JobKind { GRAD, ADAM };
  struct Job {
    JobKind kind;
    int chunk;
    StreamEvent ready;  // on a device: the gradient slice's copy down is done
  };
  struct Span {
    Clock::time_point begin{}, end{};
  };
  void worker_loop();
  void run(const Job& j);
  void adam(int c);
  // Blocks until `done[c]`, timed into counters_.wait_seconds; rethrows an offload thread error.
  void wait_done(const std::vector<char>& done, int c);
  void push(Job j);

  ChunkStore& store_;
  int dp_size_;
  OffloadSettings s_;
  int threads_;
  Allocator& grad_host_;
  OpContext op_;
  OpContext copies_;  // the slices' copies down and up (op_ on the CPU)
  // On a device: the parameters' copies up (finish_update, on copies_) are done; op_'s stream
  // waits for it before its next op, and the next Adam, which overwrites the master slices they
  // read, before it starts.
  StreamEvent params_up_;
  size_t grad_bytes_ = 0;
  std::vector<float*> host_grad_;  // per chunk: the owned slice, on the host
  // Per chunk on a device with 16-bit parameters: the owned parameter slice rounded on the
  // host, what finish_update copies up (empty otherwise).
  std::vector<void*> param_staging_;
  std::vector<double> tensor_sums_;  // per tensor id (with `tensor_sums`)

  // Shared with the offload thread (under mu_).
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Job> jobs_;
  bool stop_ = false;
  std::exception_ptr error_;
  std::vector<char> grad_done_, adam_done_;
  std::vector<Span> copy_span_, adam_span_;
  bool early_ = false;
  bool pending_ = false;  // start_update() ran, finish_update() has not
  AdamWHyper hyper_;
  AdamWStep step_;

  Clock::time_point step_begin_{}, backward_end_{};
  OffloadStepCounters counters_;
  std::thread worker_;  // last: started once everything above exists
};

}  // namespace tide

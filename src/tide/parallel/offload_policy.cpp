#include "tide/parallel/offload_policy.h"

#include <algorithm>

#include "tide/optim/grad_norm.h"
#include "tide/parallel/optimizer_step.h"
#include "tide/parallel/tensor_grad_sums.h"

namespace tide {

namespace {
double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// The n values of dtype `from` (2 bytes each) at the start of the f32 buffer h, widened to f32
// in place: blocks from the last down, so that each block's f32 (bytes [4i, 4i + 64)) only
// covers 16-bit values of blocks already read (indices >= 2i >= i + 16, or its own).
void widen_in_place(float* h, int64_t n, DType from) {
  constexpr int64_t kBlock = 16;
  const auto* src = reinterpret_cast<const uint16_t*>(h);
  for (int64_t i = (n - 1) / kBlock * kBlock; i >= 0; i -= kBlock) {
    const int64_t m = std::min(kBlock, n - i);
    uint16_t block[kBlock];
    std::copy(src + i, src + i + m, block);
    convert_elements(block, from, h + i, DType::F32, m);
  }
}
}  // namespace

OffloadPolicy::OffloadPolicy(ChunkStore& store, int dp_size, const OffloadSettings& settings,
                             int threads, Allocator& grad_host, const OpContext& op,
                             const OpContext& copies)
    : store_(store),
      dp_size_(dp_size),
      s_(settings),
      threads_(threads),
      grad_host_(grad_host),
      op_(op),
      copies_(copies.device.is_cpu() ? op : copies) {
  TIDE_CHECK(copies_.device == op_.device,
             "ZeRO-Offload: the copy context is for {} but the model's ops run on {}; make it "
             "with make_copy_context(op)",
             copies_.device.str(), op_.device.str());
  TIDE_CHECK(store_.options().separate_master && store_.has(ChunkKind::MASTER),
             "ZeRO-Offload needs the fp32 master weights in their own chunks on the host: build "
             "the model with ModelOptions::store.separate_master = true");
  const int n = store_.layout().num_chunks();
  // On a device with 16-bit parameters there, a host copy of each owned parameter slice in that
  // dtype (finish_update's staging for the copy up); offload_param's slices are on the host.
  const bool staging = !op_.device.is_cpu() && store_.compute_dtype() != DType::F32 &&
                       !store_.options().param_slices;
  for (int c = 0; c < n; ++c) {
    const int64_t elems = store_.layout().slice_elems(c);
    const size_t bytes = static_cast<size_t>(elems) * sizeof(float);
    host_grad_.push_back(static_cast<float*>(
        grad_host_.allocate(bytes, fmt::format("offloaded gradient slice of chunk {}", c))));
    grad_bytes_ += bytes;
    if (!staging) continue;
    const size_t staged = static_cast<size_t>(elems) * dtype_size(store_.compute_dtype());
    param_staging_.push_back(
        grad_host_.allocate(staged, fmt::format("parameter staging slice of chunk {}", c)));
  }
  tensor_sums_.assign(static_cast<size_t>(store_.layout().num_tensors()), 0.0);
  grad_done_.assign(n, 0);
  adam_done_.assign(n, 0);
  copy_span_.resize(n);
  adam_span_.resize(n);
  worker_ = std::thread([this] { worker_loop(); });
}

OffloadPolicy::~OffloadPolicy() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    jobs_.clear();  // after a failed step: what has not started never will
  }
  work_cv_.notify_all();
  worker_.join();
  try {
    synchronize(copies_);   // a failed step's copies may still use the host buffers
  } catch (const Error&) {  // reported at the wait that found it, or moot now
  }
  for (int c = 0; c < static_cast<int>(host_grad_.size()); ++c)
    grad_host_.free(host_grad_[c],
                    static_cast<size_t>(store_.layout().slice_elems(c)) * sizeof(float));
  for (int c = 0; c < static_cast<int>(param_staging_.size()); ++c)
    grad_host_.free(param_staging_[c], static_cast<size_t>(store_.layout().slice_elems(c)) *
                                           dtype_size(store_.compute_dtype()));
}

void OffloadPolicy::worker_loop() {
  for (;;) {
    Job j;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      j = jobs_.front();
      jobs_.pop_front();
    }
    try {
      run(j);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    {
      // Marked done even after an error, so that the compute thread never waits forever; it
      // rethrows the error instead.
      std::lock_guard<std::mutex> lock(mu_);
      if (j.kind == JobKind::GRAD) grad_done_[j.chunk] = 1;
      if (j.kind == JobKind::ADAM || early_) adam_done_[j.chunk] = 1;
    }
    done_cv_.notify_all();
  }
}

void OffloadPolicy::run(const Job& j) {
  const int c = j.chunk;
  if (j.kind == JobKind::ADAM) return adam(c);
  copy_span_[c].begin = Clock::now();
  const Tensor g = store_.slice(ChunkKind::GRAD, c);
  float* h = host_grad_[c];
  // Down in the gradients' dtype (2 bytes per element in bf16), widened to f32 on the host: on
  // a device the copy on_reduced queued put them at the start of h as they are (a converting
  // copy through the host is no device copy).
  if (op_.device.is_cpu()) {
    convert_elements(g.data, g.dtype, h, DType::F32, g.numel());
  } else {
    synchronize(j.ready);
    if (g.dtype != DType::F32) widen_in_place(h, g.numel(), g.dtype);
  }
  // The mean over ranks, rounded to the gradients' dtype: what ZeroPolicy::finish_gradients
  // writes without offload (it divides in that dtype), so that 16-bit gradients on a rank count
  // whose mean is inexact (3) give the same bits too.
  if (dp_size_ > 1) divide_elements_rounded(h, g.numel(), static_cast<float>(dp_size_), g.dtype);
  // The owned slice: elements [r S, (r + 1) S) of the chunk.
  const ChunkLayout& lay = store_.layout();
  tensor_grad_sums(lay, c, Tensor(h, Shape{g.numel()}),
                   store_.options().group_rank * lay.slice_elems(c), tensor_sums_, threads_);
  copy_span_[c].end = Clock::now();
  if (early_) adam(c);
}

void OffloadPolicy::adam(int c) {
  adam_span_[c].begin = Clock::now();
  synchronize(params_up_);  // on a device: the last update's parameters have gone up
  adamw_step_chunk(OpContext{}, store_, c, host_grad_[c], hyper_, step_, threads_);
  adam_span_[c].end = Clock::now();
}

void OffloadPolicy::push(Job j) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(j);
  }
  work_cv_.notify_one();
}

void OffloadPolicy::wait_done(const std::vector<char>& done, int c) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!done[c]) {
    const auto t0 = Clock::now();
    done_cv_.wait(lock, [&] { return done[c] != 0; });
    counters_.wait_seconds += seconds(Clock::now() - t0);
  }
  if (error_) std::rethrow_exception(error_);
}

void OffloadPolicy::sync_master() {
  // 16-bit parameters are the master rounded: the master (initialised and loaded in f32) is
  // the source, never the other way round.
  if (store_.compute_dtype() != DType::F32) return;
  for (int c = 0; c < store_.layout().num_chunks(); ++c)
    copy(op_, store_.slice(ChunkKind::MASTER, c), store_.slice(ChunkKind::PARAM, c));
  synchronize(op_);
}

void OffloadPolicy::begin_step(const AdamWHyper* early, const AdamWStep& early_step) {
  std::lock_guard<std::mutex> lock(mu_);
  TIDE_ASSERT(pending_ || jobs_.empty());
  TIDE_CHECK(!(pending_ && early), "ZeRO-Offload: Adam as chunks arrive with a delayed update");
  if (error_) std::rethrow_exception(error_);
  early_ = early != nullptr;
  if (early) {
    hyper_ = *early;
    step_ = early_step;
  }
  std::fill(grad_done_.begin(), grad_done_.end(), 0);
  std::fill(copy_span_.begin(), copy_span_.end(), Span{});
  if (!pending_) {  // a delayed update keeps its flags and spans until finish_update()
    std::fill(adam_done_.begin(), adam_done_.end(), 0);
    std::fill(adam_span_.begin(), adam_span_.end(), Span{});
  }
  counters_ = {};
  step_begin_ = Clock::now();
}

void OffloadPolicy::on_reduced(int c) {
  counters_.bytes_to_host += static_cast<uint64_t>(store_.slice(ChunkKind::GRAD, c).nbytes());
  counters_.moves_to_host += 1;
  Job j{JobKind::GRAD, c, {}};
  if (!op_.device.is_cpu()) {
    // Down on the copy stream, queued after what op's stream wrote into the slice (its
    // reduction, the staging); a delayed update still reading the host buffer finishes first.
    // The slice is next written in the next step, after finish_gradients waited for this copy.
    if (pending_) wait_done(adam_done_, c);
    const Tensor g = store_.slice(ChunkKind::GRAD, c);
    wait_stream(copies_, op_);
    copy(copies_, Tensor(host_grad_[c], g.shape, g.dtype), g);
    j.ready = record_event(copies_);
  }
  push(j);
}

void OffloadPolicy::finish_gradients() {
  const Clock::time_point backward_end = Clock::now();
  const int n = store_.layout().num_chunks();
  TIDE_CHECK(counters_.moves_to_host == n,
             "ZeRO-Offload: {} of {} chunks had their gradients reduced this step",
             counters_.moves_to_host, n);
  for (int c = 0; c < n; ++c) wait_done(grad_done_, c);
  auto hidden = [&](const Span& s) {
    if (s.end == Clock::time_point{}) return 0.0;
    return std::max(0.0, seconds(std::min(s.end, backward_end) - s.begin));
  };
  for (int c = 0; c < n; ++c) {
    counters_.copy_seconds += seconds(copy_span_[c].end - copy_span_[c].begin);
    counters_.hidden_seconds += hidden(copy_span_[c]);
  }
  backward_end_ = backward_end;
}

void OffloadPolicy::update(const AdamWHyper& hyper, const AdamWStep& step) {
  if (!early_) start_update(hyper, step);
  TIDE_ASSERT(!early_ ||
              (hyper_.lr == hyper.lr && step_.t == step.t && step_.grad_scale == step.grad_scale));
  pending_ = true;
  finish_update();
}

void OffloadPolicy::start_update(const AdamWHyper& hyper, const AdamWStep& step) {
  TIDE_ASSERT(!early_ && !pending_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    hyper_ = hyper;
    step_ = step;
    std::fill(adam_done_.begin(), adam_done_.end(), 0);
    std::fill(adam_span_.begin(), adam_span_.end(), Span{});
  }
  for (int c = 0; c < store_.layout().num_chunks(); ++c) push({JobKind::ADAM, c, {}});
  pending_ = true;
}

void OffloadPolicy::finish_update() {
  TIDE_ASSERT(pending_);
  const int n = store_.layout().num_chunks();
  // The copies up overwrite PARAM slices that op's stream may still read (this step's forward,
  // backward and gathers): they start after what it has queued.
  wait_stream(copies_, op_);
  // Chunk c goes back to the compute tier while the offload thread updates chunk c+1.
  for (int c = 0; c < n; ++c) {
    wait_done(adam_done_, c);
    const Tensor m = store_.slice(ChunkKind::MASTER, c), p = store_.slice(ChunkKind::PARAM, c);
    if (p.device.is_cpu() && !op_.device.is_cpu()) {
      // offload_param on a device: the slice is host memory, which the host writes (a copy
      // between two host buffers on a stream blocks the host). Every read of it queued so far
      // (a gather up) came before the chunk's gradient copy down that its Adam waited for (the
      // gradient is complete only after the chunk's last use), and the next reads are queued
      // after this.
      convert_elements(m.data, DType::F32, p.data, p.dtype, m.numel());
    } else if (param_staging_.empty()) {
      copy(copies_, p, m);  // up in the compute dtype (on a device: queued on the stream)
    } else {
      // 16-bit parameters on a device: a converting copy through the host is no device copy.
      // The host rounds the master into the chunk's staging slice and the stream copies that up
      // as it is (2 bytes per parameter). The copy is done before the next update rewrites the
      // staging: that update waits for Adam, which waited for the next step's gradient copy
      // down (run's j.ready), queued after this one.
      const Tensor staged(param_staging_[c], p.shape, p.dtype);
      convert_elements(m.data, DType::F32, staged.data, p.dtype, m.numel());
      copy(copies_, p, staged);
    }
    counters_.bytes_to_compute += static_cast<uint64_t>(p.nbytes());
    counters_.moves_to_compute += 1;
  }
  params_up_ = record_event(copies_);
  wait_event(op_, params_up_);  // op's next reads of the parameters
  pending_ = false;
  // Hidden: the part of Adam that ran inside this step's forward and backward (a delayed
  // update's Adam started in the previous step; a synchronous one after backward: none).
  for (int c = 0; c < n; ++c) {
    const Span& s = adam_span_[c];
    counters_.adam_seconds += seconds(s.end - s.begin);
    const auto b = std::max(s.begin, step_begin_), e = std::min(s.end, backward_end_);
    counters_.hidden_seconds += std::max(0.0, seconds(e - b));
  }
}

}  // namespace tide

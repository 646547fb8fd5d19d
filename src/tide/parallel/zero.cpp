#include "tide/parallel/zero.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "tide/kernels/mover.h"
#include "tide/model/stream_collectives.h"

namespace tide {

namespace {

// Rank r's slice of a whole chunk, as a view (in-place reduce-scatter and all-gather).
Tensor own_part(const Tensor& whole, int64_t slice, int rank) {
  return Tensor(static_cast<char*>(whole.data) + rank * slice * int64_t(dtype_size(whole.dtype)),
                Shape{slice}, whole.dtype, whole.device);
}

}  // namespace

void check_zero_settings(const ZeroSettings& s, const ChunkLayout& layout,
                         const std::vector<std::vector<int>>& group_params) {
  TIDE_CHECK(s.stage >= 0 && s.stage <= 3, "zero_optimization.stage must be 0, 1, 2 or 3 (got {})",
             s.stage);
  // reduce_bucket_size and allgather_bucket_size may be smaller than a chunk: such a chunk is
  // reduced (gathered) alone and waited for at once.
  if (s.stage < 3) return;
  int64_t need = 0;
  for (const auto& ids : group_params) need = std::max(need, layout.chunk_elems_of(ids));
  TIDE_CHECK(s.max_live_parameters >= need,
             "zero_optimization.stage3_max_live_parameters ({}) is below what one op needs "
             "gathered at once ({} elements: the chunks of its parameter group); raise it or "
             "lower chunk_size_mb",
             s.max_live_parameters, need);
}

ZeroPolicy::ZeroPolicy(ChunkStore& store, ProcessGroup& dp, const ZeroSettings& settings,
                       std::vector<std::vector<int>> group_params, Allocator& buffers, OpContext op,
                       OpContext copies)
    : store_(store),
      dp_(dp),
      s_(settings),
      op_(std::move(op)),
      copies_(copies.device.is_cpu() ? op_ : std::move(copies)),
      group_params_(std::move(group_params)),
      pool_(&buffers),
      staging_(buffers, settings.comm_dtype, op_),
      gathers_(dp.size() > 1 || store.options().param_slices != nullptr) {
  const ChunkLayout& lay = store_.layout();
  TIDE_CHECK(s_.stage >= 1 && s_.stage <= 3, "ZeroPolicy runs stages 1-3 (got {})", s_.stage);
  TIDE_CHECK(store_.options().sliced_kinds == zero_sliced_kinds(s_.stage) &&
                 lay.group_size() == dp_.size() && store_.options().group_rank == dp_.rank(),
             "the chunk store is not sliced for ZeRO stage {} over {} ranks", s_.stage, dp_.size());
  check_zero_settings(s_, lay, group_params_);
  TIDE_CHECK(copies_.device == op_.device,
             "ZeroPolicy: the ops run on {} but the copy context is for {}; make it with "
             "make_copy_context(op)",
             op_.device.str(), copies_.device.str());
  for (const auto& ids : group_params_) group_chunks_.push_back(lay.chunks_of(ids));
  const int n = lay.num_chunks();
  param_buffer_.assign(n, -1);
  grad_buffer_.assign(n, -1);
  copied_up_.resize(n);
  if (s_.stage == 3) {
    gathered_.assign(n, Gathered::NO);
    gather_work_.resize(n);
    gather_trace_.resize(n);
    persistent_.assign(n, false);
    for (int c = 0; c < n; ++c)
      if (lay.payload_elems(c) <= s_.param_persistence_threshold) {
        persistent_[c] = true;
        wait_gathered(c);
      }
  }
}

ZeroPolicy::~ZeroPolicy() {
  // Never leave a collective writing into a buffer that is about to be freed.
  for (const Pending& p : reductions_) p.work->wait();
  for (const WorkPtr& w : gather_work_)
    if (w) w->wait();
  try {
    synchronize(copies_);   // a copy up may still write a pool buffer
  } catch (const Error&) {  // a failed step's error, reported at the wait that found it
  }
  for (int c = 0; c < store_.layout().num_chunks(); ++c)
    for (ChunkKind k : {ChunkKind::PARAM, ChunkKind::GRAD})
      if (store_.has(k) && store_.attached(k, c)) store_.detach_whole(k, c);
}

void ZeroPolicy::wait(Work& w, const Tensor& buf, const char* what, int chunk) {
  if (!host_waits_for(op_, dp_, buf)) return consume_collective(op_, dp_, w, buf);
  if (w.is_completed()) return w.wait();
  const TraceSpan span(store_.tracer(), what, "comm", {{"chunk", chunk}});
  const auto t0 = std::chrono::steady_clock::now();
  w.wait();
  counters_.wait_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void* ZeroPolicy::attach(ChunkKind k, int c) {
  int& b = (k == ChunkKind::PARAM ? param_buffer_ : grad_buffer_)[c];
  TIDE_ASSERT(b < 0);
  // A buffer of the chunk's size class (the largest chunk halved while the chunk fits;
  // ChunkLayout::buffer_elems says why not each chunk's own size).
  b = pool_.take(static_cast<size_t>(store_.layout().buffer_elems(c)) *
                 dtype_size(store_.dtype(k)));
  store_.attach_whole(k, c, pool_.data(b), pool_.device());
  return pool_.data(b);
}

void ZeroPolicy::detach(ChunkKind k, int c) {
  int& b = (k == ChunkKind::PARAM ? param_buffer_ : grad_buffer_)[c];
  store_.detach_whole(k, c);
  pool_.give(b);
  b = -1;
}

void ZeroPolicy::begin_step(std::span<const ParamAccess> accesses) {
  for (const ParamAccess& a : accesses)
    TIDE_CHECK(a.group >= 0 && a.group < static_cast<int>(group_params_.size()),
               "access to parameter group {} of {}", a.group, group_params_.size());
  accesses_ = accesses;
  pos_ = prefetched_to_ = 0;
  in_step_ = true;
  counters_ = {};
  if (s_.stage == 3) {
    counters_.peak_live_param_elems = live_elems_;
    prefetch_after(0);
  }
}

// --- stage 3: parameters ------------------------------------------------------------------

void ZeroPolicy::start_gather(int c) {
  TIDE_ASSERT(gathered_[c] == Gathered::NO);
  attach(ChunkKind::PARAM, c);
  gather_trace_[c] = AsyncTrace::start(store_.tracer(), "all-gather params", {{"chunk", c}});
  const Tensor whole = store_.chunk(ChunkKind::PARAM, c);
  gather_work_[c] = issue_gather(c, gather_source(c), whole);
  gathered_[c] = Gathered::IN_FLIGHT;
  const int64_t elems = store_.layout().chunk_elems(c);
  live_elems_ += elems;
  counters_.all_gathers += 1;
  counters_.peak_live_param_elems = std::max(counters_.peak_live_param_elems, live_elems_);
}

Tensor ZeroPolicy::gather_source(int c) {
  const Tensor slice = store_.slice(ChunkKind::PARAM, c), whole = store_.chunk(ChunkKind::PARAM, c);
  if (slice.device == whole.device) return slice;
  // offload_param on a device: the slice is on the host, the gathered chunk on the device. A
  // collective moves one device's memory: the slice goes up into its part of the chunk first,
  // which is then gathered in place. The copy runs on the copy stream, beside the ops, after
  // what they queued so far (they may still read the pool buffer the chunk was given). No host
  // wait: the slice's one writer, the update (OffloadPolicy::finish_update), writes it on the
  // host after Adam waited for the chunk's gradient copy down, queued on the same copy stream
  // after this step's last copy up of it.
  const Tensor mine = own_part(whole, store_.layout().slice_elems(c), dp_.rank());
  wait_stream(copies_, op_);
  copy(copies_, mine, slice);
  copied_up_[c] = record_event(copies_);
  return mine;
}

WorkPtr ZeroPolicy::issue_gather(int c, const Tensor& source, const Tensor& whole) {
  // On a device the gather writes a pool buffer that ops queued earlier may still read, and
  // sends what the streams may still be writing (the update's parameters on op's stream,
  // offload_param's copy up on the copy stream): the device's group orders it after both by
  // events, and the host waits only where the host runs the call. A one-rank local group's
  // gather is in place and moves nothing, so it is ordered after nothing.
  if (!moves_nothing()) {
    if (copied_up_[c])
      prepare_collective(op_, dp_, whole, *copied_up_[c]);
    else
      prepare_collective(op_, dp_, whole);
  }
  return dp_.all_gather_async(source, whole);
}

void ZeroPolicy::finish_gather(int c, Work& w, const Tensor& whole) {
  wait(w, whole, "wait all-gather", c);
  // The ops read the copy up's bytes. A one-rank local group's gather moved nothing and waited
  // for nothing, so they wait for the copy itself; elsewhere the gather came after it.
  if (copied_up_[c] && moves_nothing()) wait_event(op_, *copied_up_[c]);
  copied_up_[c].reset();
}

void ZeroPolicy::wait_gathered(int c) {
  if (!gathers_) return;  // one rank: its slice is the whole chunk, where the ops can read it
  if (gathered_[c] == Gathered::NO) start_gather(c);
  if (gathered_[c] == Gathered::IN_FLIGHT) {
    finish_gather(c, *gather_work_[c], store_.chunk(ChunkKind::PARAM, c));
    gather_work_[c].reset();
    gather_trace_[c].finish();
    gathered_[c] = Gathered::YES;
  }
}

void ZeroPolicy::release_gathered(int c) {
  wait_gathered(c);  // a prefetch still in flight must land before its buffer is reused
  detach(ChunkKind::PARAM, c);
  gathered_[c] = Gathered::NO;
  live_elems_ -= store_.layout().chunk_elems(c);
}

// Starts gathering the chunks of the accesses from `pos` on, while the accesses looked at stay
// within stage3_prefetch_bucket_size elements and the gathered ones within the live limit.
void ZeroPolicy::prefetch_after(size_t pos) {
  if (!gathers_) return;
  const ChunkLayout& lay = store_.layout();
  int64_t ahead = 0;
  for (size_t q = pos; q < accesses_.size(); ++q) {
    for (int c : param_chunks(accesses_[q])) {
      const int64_t elems = lay.chunk_elems(c);
      ahead += elems;
      if (ahead > s_.prefetch_bucket_size) return;
      if (gathered_[c] != Gathered::NO) continue;
      if (live_elems_ + elems > s_.max_live_parameters) return;
      start_gather(c);
    }
    prefetched_to_ = std::max(prefetched_to_, q + 1);
  }
}

// Chunk c is used by the next access that reads parameters (W accesses read none) or by one
// already prefetched for.
bool ZeroPolicy::needed_soon(int c) const {
  size_t next = pos_;
  while (next < accesses_.size() && accesses_[next].use == Use::WEIGHT) ++next;
  const size_t end = std::min(accesses_.size(), std::max(next + 1, prefetched_to_));
  for (size_t q = pos_; q < end; ++q) {
    const auto cs = param_chunks(accesses_[q]);
    if (std::find(cs.begin(), cs.end(), c) != cs.end()) return true;
  }
  return false;
}

void ZeroPolicy::on_acquire(ChunkStore& store, std::span<const int> ids, Use use) {
  const ChunkLayout& lay = store.layout();
  if (sink_) poll_reductions();
  if (use == Use::WEIGHT)  // W adds to gradients: an earlier micro-batch's reduction must land
    for (int id : ids) complete_reductions_of(lay.slot(id).chunk);
  if (s_.stage < 3) return;
  if (!in_step_ || pos_ >= accesses_.size()) {
    if (use != Use::WEIGHT)
      for (int id : ids) wait_gathered(lay.slot(id).chunk);
    return;
  }
  const ParamAccess& a = accesses_[pos_];
  TIDE_CHECK(a.use == use && std::ranges::equal(group_params_[a.group], ids),
             "ZeRO-3: the model's parameter accesses do not follow the step's sequence at access "
             "{} (group {}): the engine's access list is wrong",
             pos_, a.group);
  ++pos_;
  for (int c : param_chunks(a)) wait_gathered(c);
  prefetch_after(pos_);
}

void ZeroPolicy::fetch(ChunkStore&, int chunk, Use) {
  TIDE_CHECK(s_.stage == 3, "param chunk {} is not resident; ZeRO stage {} keeps them all", chunk,
             s_.stage);
  wait_gathered(chunk);
}

void ZeroPolicy::evict(ChunkStore&, int chunk, Use) {
  if (s_.stage < 3 || persistent_[chunk] || gathered_[chunk] == Gathered::NO) return;
  if (in_step_ && needed_soon(chunk)) return;
  release_gathered(chunk);
}

// --- gradients ------------------------------------------------------------------------------

void ZeroPolicy::fetch_grads(ChunkStore& store, int c) {
  TIDE_CHECK(s_.stage >= 2, "gradient chunk {} is not resident under ZeRO stage {}", c, s_.stage);
  const ChunkLayout& lay = store.layout();
  const int64_t slice = lay.slice_elems(c), r = dp_.rank();
  const Tensor mine = store.slice(ChunkKind::GRAD, c);
  const Tensor buf(attach(ChunkKind::GRAD, c), Shape{lay.chunk_elems(c)}, mine.dtype, mine.device);
  // Seed: the owned part starts from what this rank accumulated over earlier micro-batches,
  // the rest from zero, so the reduce-scatter sum adds this micro-batch to the accumulation.
  fill_zero(op_, buf);
  copy(op_, own_part(buf, slice, static_cast<int>(r)), mine);
}

void ZeroPolicy::on_grads_ready(ChunkStore& store, int c, int micro_batch) {
  const ChunkLayout& lay = store.layout();
  const int64_t elems = lay.chunk_elems(c);
  while (!reductions_.empty() && reducing_elems_ + elems > s_.reduce_bucket_size) {
    Pending p = std::move(reductions_.front());
    reductions_.pop_front();
    complete_reduction(p);
  }
  const Tensor whole = store.chunk(ChunkKind::GRAD, c);
  AsyncTrace trace = AsyncTrace::start(store.tracer(), "reduce-scatter grads",
                                       {{"chunk", c}, {"mb", micro_batch}});
  // One rank sends nothing: its gradients are not converted (the one-rank reference's bits).
  CommStaging::Staged staged;
  if (dp_.size() > 1 && staging_.needed(whole.dtype))
    staged = staging_.stage(whole, lay.buffer_elems(c));
  const Tensor sent = staged.buffer >= 0 ? staged.tensor : whole;
  if (!moves_nothing()) prepare_collective(op_, dp_, sent);  // else: nothing reads the device
  Pending p{
      c,
      sent,
      dp_.reduce_scatter_async(sent, own_part(sent, lay.slice_elems(c), dp_.rank()), ReduceOp::Sum),
      trace,
      store.grads_complete(c),
      staged};
  counters_.reduce_scatters += 1;
  if (!s_.overlaps(elems)) {
    complete_reduction(p);
    return;
  }
  reductions_.push_back(std::move(p));
  reducing_elems_ += elems;
  if (sink_) poll_reductions();
}

void ZeroPolicy::poll_reductions() {
  while (!reductions_.empty() && reductions_.front().work->is_completed()) {
    Pending p = std::move(reductions_.front());
    reductions_.pop_front();
    complete_reduction(p);
  }
}

void ZeroPolicy::complete_reduction(Pending& p) {
  wait(*p.work, p.buf, "wait reduce-scatter", p.chunk);
  p.trace.finish();
  const int c = p.chunk;
  const ChunkLayout& lay = store_.layout();
  const int64_t slice = lay.slice_elems(c), r = dp_.rank(), elems = lay.chunk_elems(c);
  const Tensor grads = store_.chunk(ChunkKind::GRAD, c);
  staging_.unstage(p.staged, r * slice, own_part(grads, slice, static_cast<int>(r)));
  auto* whole = static_cast<char*>(grads.data);
  const size_t es = dtype_size(store_.dtype(ChunkKind::GRAD));
  auto part = [&](int64_t begin, int64_t n) {
    return Tensor(whole + begin * es, Shape{n}, grads.dtype, grads.device);
  };
  if (s_.overlaps(elems)) reducing_elems_ -= elems;
  if (s_.stage == 1) {
    // The chunk is the accumulator: its owned part holds the sum so far; the rest must be zero
    // for the next micro-batch (the reduce-scatter left partial sums there).
    fill_zero(op_, part(0, r * slice));
    fill_zero(op_, part((r + 1) * slice, elems - (r + 1) * slice));
  } else if (store_.attached(ChunkKind::GRAD, c)) {  // one rank: the slice is the whole chunk
    // (The buffer goes back to the pool at once: its next user is queued after this copy on
    // the same stream, or waits for the stream before a collective writes it.)
    copy(op_, store_.slice(ChunkKind::GRAD, c), part(r * slice, slice));
    detach(ChunkKind::GRAD, c);
  }
  if (p.last && sink_) sink_->on_reduced(c);
}

void ZeroPolicy::complete_reductions_of(int c) {
  auto last = std::find_if(reductions_.rbegin(), reductions_.rend(),
                           [&](const Pending& p) { return p.chunk == c; });
  if (last == reductions_.rend()) return;
  // Complete in issue order up to and including the last reduction of chunk c.
  const size_t n = reductions_.size() - (last - reductions_.rbegin());
  for (size_t i = 0; i < n; ++i) {
    Pending p = std::move(reductions_.front());
    reductions_.pop_front();
    complete_reduction(p);
  }
}

bool ZeroPolicy::busy(ChunkKind kind, int c) const {
  // Stage 3: a gather in flight reads the owned parameter slice.
  if (kind == ChunkKind::PARAM) return s_.stage == 3 && gathered_[c] == Gathered::IN_FLIGHT;
  if (kind != ChunkKind::GRAD) return false;
  return std::any_of(reductions_.begin(), reductions_.end(),
                     [&](const Pending& p) { return p.chunk == c; });
}

void ZeroPolicy::settle(ChunkKind kind, int c) {
  if (kind == ChunkKind::GRAD) complete_reductions_of(c);
  if (kind == ChunkKind::PARAM && s_.stage == 3 && gathered_[c] == Gathered::IN_FLIGHT)
    wait_gathered(c);
}

void ZeroPolicy::finish_gradients() {
  while (!reductions_.empty()) {
    Pending p = std::move(reductions_.front());
    reductions_.pop_front();
    complete_reduction(p);
  }
  TIDE_ASSERT(reducing_elems_ == 0);
  in_step_ = false;
  if (s_.stage == 3)  // nothing but the persistent chunks stays gathered between steps
    for (int c = 0; c < store_.layout().num_chunks(); ++c)
      if (!persistent_[c] && gathered_[c] != Gathered::NO) release_gathered(c);
  const int N = dp_.size();
  if (N == 1 || sink_) return;
  // The mean over ranks, divided as the process groups' ReduceOp::Avg divides. Under auto
  // placement on a device a slice may be on the host tier: the host divides it, after one wait
  // for the stream (the copy that moved it down may still be writing it).
  bool waited = false;
  for (int c = 0; c < store_.layout().num_chunks(); ++c) {
    const Tensor g = store_.slice(ChunkKind::GRAD, c);
    if (g.device.is_cpu() && !op_.device.is_cpu()) {
      if (!waited) synchronize(op_);
      waited = true;
      divide_by(OpContext{}, g, static_cast<float>(N));
      continue;
    }
    divide_by(op_, g, static_cast<float>(N));
  }
}

// --- after the optimizer --------------------------------------------------------------------

void ZeroPolicy::after_update() {
  const ChunkLayout& lay = store_.layout();
  struct Gather {
    int chunk;
    int64_t elems;
    Tensor whole;
    WorkPtr work;
    AsyncTrace trace;
  };
  std::deque<Gather> gathers;
  int64_t gathering = 0;
  auto complete = [&](Gather& g) {
    finish_gather(g.chunk, *g.work, g.whole);
    g.trace.finish();
  };
  for (int c = 0; c < lay.num_chunks(); ++c) {
    if (s_.stage == 3 && (!persistent_[c] || !gathers_)) continue;
    const int64_t elems = lay.chunk_elems(c);
    while (!gathers.empty() && gathering + elems > s_.allgather_bucket_size) {
      complete(gathers.front());
      gathering -= gathers.front().elems;
      gathers.pop_front();
    }
    const Tensor whole = store_.chunk(ChunkKind::PARAM, c);
    // Stages 1-2 gather in place (the owned part of the whole chunk is the updated slice);
    // stage 3's persistent chunks gather from the slice into their buffer.
    const Tensor mine =
        s_.stage == 3 ? gather_source(c) : own_part(whole, lay.slice_elems(c), dp_.rank());
    AsyncTrace trace = AsyncTrace::start(store_.tracer(), "all-gather params", {{"chunk", c}});
    gathers.push_back({c, elems, whole, issue_gather(c, mine, whole), trace});
    gathering += elems;
    counters_.all_gathers += 1;
  }
  for (Gather& g : gathers) complete(g);
}

}  // namespace tide

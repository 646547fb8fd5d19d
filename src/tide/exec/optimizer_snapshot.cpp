#include "tide/exec/optimizer_snapshot.h"

#include <algorithm>
#include <cstring>

#include "tide/kernels/mover.h"
#include "tide/memory/allocator.h"

namespace tide {

namespace {
constexpr ChunkKind kOverwritten[] = {ChunkKind::MASTER, ChunkKind::ADAM_M, ChunkKind::ADAM_V};
}  // namespace

void OptimizerSnapshot::begin(std::span<ChunkStore* const> stores, const OpContext& op) {
  // Each range adamw_step writes: per store, kind and chunk, the owned slice of a sliced kind
  // or the whole chunk.
  std::vector<Tensor> live;
  for (ChunkStore* s : stores)
    for (ChunkKind k : kOverwritten) {
      TIDE_CHECK(s->has(k), "the store has no {} chunks: build it with_optimizer to train",
                 chunk_kind_name(k));
      for (int c = 0; c < s->layout().num_chunks(); ++c) {
        const Tensor t = s->sliced(k) ? s->slice(k, c) : s->chunk(k, c);
        live.push_back(t.view({t.numel()}));
      }
    }
  // The previous step's restore may still be reading the copy on the stream: the host waits
  // for it only before it frees or moves a copy (the first step, a new layout). Else this
  // step's copies into it are queued after the restore on the same stream.
  bool same = live.size() == ranges_.size() && op.device == op_.device;
  for (size_t i = 0; i < live.size() && same; ++i)
    same = ranges_[i].saved.shape == live[i].shape && ranges_[i].saved.dtype == live[i].dtype;
  if (!same) {
    synchronize(op_);
    copies_ = Arena();
    host_ = make_host_allocator(op.device, /*pinned=*/true);
    size_t total = 0;
    for (const Tensor& t : live) total += Arena::aligned(t.nbytes());
    copies_ = Arena("optimizer snapshot", total, host_.get());
    ranges_.resize(live.size());
    for (size_t i = 0; i < live.size(); ++i)
      ranges_[i].saved = copies_.alloc_tensor(live[i].shape, live[i].dtype);
  }
  op_ = op;
  for (size_t i = 0; i < live.size(); ++i) ranges_[i].live = live[i];
  next_ = 0;
  done_ = 0;
}

bool OptimizerSnapshot::save_some(size_t max_bytes) {
  while (next_ < ranges_.size() && done_ == ranges_[next_].saved.nbytes()) ++next_, done_ = 0;
  if (next_ == ranges_.size()) return false;
  Range& r = ranges_[next_];
  // Whole elements: at least one, at most what is left.
  const size_t es = dtype_size(r.live.dtype);
  const size_t n = std::min(std::max(max_bytes / es, size_t{1}) * es, r.saved.nbytes() - done_);
  const Shape shape{static_cast<int64_t>(n / es)};
  copy(op_, Tensor(static_cast<std::byte*>(r.saved.data) + done_, shape, r.live.dtype),
       Tensor(static_cast<std::byte*>(r.live.data) + done_, shape, r.live.dtype, r.live.device));
  done_ += n;
  return true;
}

void OptimizerSnapshot::save_rest() {
  while (save_some(SIZE_MAX)) {
  }
}

size_t OptimizerSnapshot::pending_bytes() const {
  size_t n = 0;
  for (size_t i = next_; i < ranges_.size(); ++i)
    n += ranges_[i].saved.nbytes() - (i == next_ ? done_ : 0);
  return n;
}

void OptimizerSnapshot::save(std::span<ChunkStore* const> stores, const OpContext& op) {
  begin(stores, op);
  save_rest();
}

void OptimizerSnapshot::restore() const {
  TIDE_ASSERT(pending_bytes() == 0);
  for (const Range& r : ranges_) copy(op_, r.live, r.saved);
}

size_t OptimizerSnapshot::bytes() const {
  size_t n = 0;
  for (const Range& r : ranges_) n += r.saved.nbytes();
  return n;
}

}  // namespace tide

#include "tide/estimate/zero_buffers.h"

#include <algorithm>
#include <deque>
#include <span>

#include "tide/core/error.h"
#include "tide/memory/buffer_pool.h"
#include "tide/pipeline/block_parts.h"

namespace tide {

namespace {

// ZeroPolicy's bookkeeping without the data: which chunks hold a buffer, and when they give it
// back. Each member mirrors the ZeroPolicy member of the same name.
class Replay {
 public:
  Replay(const ChunkLayout& layout, const std::vector<BlockGroups>& blocks, ActivationPolicy policy,
         int stage, const ZeroSettings& s, size_t dtype_bytes, size_t staging_bytes)
      : lay_(layout),
        blocks_(blocks),
        groups_(blocks),
        policy_(policy),
        stage_(stage),
        s_(s),
        dtype_bytes_(dtype_bytes),
        staging_bytes_(staging_bytes) {
    for (const std::vector<int>& ids : groups_.ids) group_chunks_.push_back(lay_.chunks_of(ids));
    const int n = lay_.num_chunks();
    grad_buffer_.assign(n, -1);
    staged_.assign(n, -1);
    param_buffer_.assign(n, -1);
    gathered_.assign(n, false);
    persistent_.assign(n, false);
    if (stage_ == 3)
      for (int c = 0; c < n; ++c)
        if (lay_.payload_elems(c) <= s_.param_persistence_threshold) {
          persistent_[c] = true;
          ++peak_.persistent;
          start_gather(c);
        }
  }

  ZeroBufferPeak run(int micro_batches) {
    const int n = static_cast<int>(blocks_.size());
    struct Step {
      int block, group, mb;  // group: of the block (BlockGroups::groups)
      Use use;
    };
    std::vector<Step> steps;  // the engine's data-parallel schedule (pipeline/block_parts.h)
    for (int m = 0; m < micro_batches; ++m)
      for (pipeline::Op action : {pipeline::Op::F, pipeline::Op::B})
        for (const pipeline::BlockPart& p : pipeline::block_parts(action, n, false)) {
          const Use use = p.op == pipeline::Op::F   ? Use::FORWARD
                          : p.op == pipeline::Op::B ? Use::BACKWARD
                                                    : Use::WEIGHT;
          for (int g : part_groups(blocks_[p.block], use, policy_))
            steps.push_back({p.block, g, m, use});
        }
    for (const Step& st : steps)
      accesses_.push_back({groups_.first[st.block] + st.group, st.use == Use::WEIGHT});
    ready_.assign(lay_.num_chunks(), std::vector<int>(micro_batches, 0));
    if (stage_ == 3) prefetch_after(0);
    for (const Step& st : steps) {
      const std::vector<int>& cs = group_chunks_[groups_.first[st.block] + st.group];
      // on_acquire
      if (st.use == Use::WEIGHT)
        for (int c : cs) complete_reductions_of(c);
      if (stage_ == 3) {
        ++pos_;
        if (st.use != Use::WEIGHT)  // a W reads no parameters
          for (int c : cs)
            if (!gathered_[c]) start_gather(c);
        prefetch_after(pos_);
      }
      // acquire: a W needs its gradient chunks whole (fetch_grads)
      if (st.use == Use::WEIGHT && stage_ >= 2)
        for (int c : cs)
          if (grad_buffer_[c] < 0) grad_buffer_[c] = take(true, c);
      // release: each chunk of the group is offered to evict
      for (int c : cs) evict(c);
      // a W's release reports the group's finished gradients (GroupAccess)
      if (st.use == Use::WEIGHT)
        for (int id : blocks_[st.block].grads_done[st.group]) {
          const int c = lay_.slot(id).chunk;
          if (++ready_[c][st.mb] == static_cast<int>(lay_.tensors_in_chunk(c).size()))
            on_grads_ready(c);
        }
    }
    // finish_gradients
    while (!reductions_.empty()) complete_front();
    if (stage_ == 3)
      for (int c = 0; c < lay_.num_chunks(); ++c)
        if (!persistent_[c] && gathered_[c]) release_gathered(c);
    TIDE_ASSERT(pool_.in_use() == peak_.persistent && staging_pool_.in_use() == 0);
    peak_.staging = staging_pool_.count();
    peak_.buffers = pool_.count() + peak_.staging;
    peak_.bytes = static_cast<int64_t>(pool_.allocated_bytes() + staging_pool_.allocated_bytes());
    return peak_;
  }

 private:
  // ZeroPolicy::attach / detach: a pool buffer of chunk c's size class.
  int take(bool grad, int c) {
    const int b = pool_.take(static_cast<size_t>(lay_.buffer_elems(c)) * dtype_bytes_);
    ++(grad ? grads_ : params_);
    if (pool_.in_use() > peak_in_use_) {
      peak_in_use_ = pool_.in_use();
      peak_.grad_buffers = grads_;
      peak_.param_buffers = params_;
    }
    return b;
  }
  void give(bool grad, int& buffer) {
    pool_.give(buffer);
    buffer = -1;
    --(grad ? grads_ : params_);
  }

  void start_gather(int c) {
    param_buffer_[c] = take(false, c);
    gathered_[c] = true;
    live_elems_ += lay_.chunk_elems(c);
  }
  void release_gathered(int c) {
    give(false, param_buffer_[c]);
    gathered_[c] = false;
    live_elems_ -= lay_.chunk_elems(c);
  }
  void prefetch_after(size_t pos) {
    int64_t ahead = 0;
    for (size_t q = pos; q < accesses_.size(); ++q) {
      for (int c : param_chunks(q)) {
        const int64_t elems = lay_.chunk_elems(c);
        ahead += elems;
        if (ahead > s_.prefetch_bucket_size) return;
        if (gathered_[c]) continue;
        if (live_elems_ + elems > s_.max_live_parameters) return;
        start_gather(c);
      }
      prefetched_to_ = std::max(prefetched_to_, q + 1);
    }
  }
  bool needed_soon(int c) const {
    size_t next = pos_;
    while (next < accesses_.size() && accesses_[next].weight) ++next;
    const size_t end = std::min(accesses_.size(), std::max(next + 1, prefetched_to_));
    for (size_t q = pos_; q < end; ++q) {
      const auto cs = param_chunks(q);
      if (std::find(cs.begin(), cs.end(), c) != cs.end()) return true;
    }
    return false;
  }
  void evict(int c) {
    if (stage_ < 3 || persistent_[c] || !gathered_[c]) return;
    if (needed_soon(c)) return;
    release_gathered(c);
  }

  void on_grads_ready(int c) {
    const int64_t elems = lay_.chunk_elems(c);
    while (!reductions_.empty() && reducing_elems_ + elems > s_.reduce_bucket_size)
      complete_front();
    // CommStaging::stage: the chunk converted into a buffer of its size class.
    if (staging_bytes_ > 0)
      staged_[c] = staging_pool_.take(static_cast<size_t>(lay_.buffer_elems(c)) * staging_bytes_);
    if (!s_.overlaps(elems)) {
      complete(c);
      return;
    }
    reductions_.push_back(c);
    reducing_elems_ += elems;
  }
  void complete_front() {
    const int c = reductions_.front();
    reductions_.pop_front();
    reducing_elems_ -= lay_.chunk_elems(c);
    complete(c);
  }
  void complete(int c) {
    if (staged_[c] >= 0) {  // CommStaging::unstage
      staging_pool_.give(staged_[c]);
      staged_[c] = -1;
    }
    if (stage_ < 2) return;  // stage 1 reduces in the chunk itself
    give(true, grad_buffer_[c]);
  }
  void complete_reductions_of(int c) {
    const auto last = std::find(reductions_.rbegin(), reductions_.rend(), c);
    if (last == reductions_.rend()) return;
    const size_t n = reductions_.size() - (last - reductions_.rbegin());
    for (size_t i = 0; i < n; ++i) complete_front();
  }

  const ChunkLayout& lay_;
  const std::vector<BlockGroups>& blocks_;
  const ParamGroups groups_;
  const ActivationPolicy policy_;
  const int stage_;
  const ZeroSettings s_;
  std::vector<std::vector<int>> group_chunks_;
  const size_t dtype_bytes_, staging_bytes_;
  BufferPool pool_{nullptr}, staging_pool_{nullptr};  // ZeroPolicy's, and CommStaging's
  std::vector<int> staged_;  // per chunk: the staging buffer of its reduction, or -1
  std::vector<int> grad_buffer_, param_buffer_;  // per chunk: the pool buffer held, or -1
  std::vector<bool> gathered_, persistent_;
  std::vector<std::vector<int>> ready_;  // [chunk][micro-batch]: tensors complete
  std::deque<int> reductions_;
  int64_t reducing_elems_ = 0, live_elems_ = 0;
  struct GroupAccess {
    int group;
    bool weight;  // a W: gathers nothing
  };
  std::span<const int> param_chunks(size_t q) const {
    if (accesses_[q].weight) return {};
    return group_chunks_[accesses_[q].group];
  }
  std::vector<GroupAccess> accesses_;
  size_t pos_ = 0, prefetched_to_ = 0;
  int peak_in_use_ = 0, grads_ = 0, params_ = 0;
  ZeroBufferPeak peak_;
};

}  // namespace

ZeroSettings runnable_zero_settings(ZeroSettings s, const ChunkLayout& layout,
                                    const std::vector<BlockGroups>& blocks) {
  int64_t group = 0;
  for (const std::vector<int>& ids : ParamGroups(blocks).ids)
    group = std::max(group, layout.chunk_elems_of(ids));
  s.max_live_parameters = std::max(s.max_live_parameters, group);
  return s;
}

ZeroBufferPeak simulate_zero_buffers(const ChunkLayout& layout,
                                     const std::vector<BlockGroups>& blocks,
                                     ActivationPolicy policy, int stage,
                                     const ZeroSettings& settings, int micro_batches,
                                     size_t dtype_bytes, size_t staging_bytes) {
  TIDE_CHECK(stage >= 1 && stage <= 3, "ZeRO buffers are simulated for stages 1-3 (got {})", stage);
  TIDE_CHECK(micro_batches >= 1, "a step needs at least one micro-batch (got {})", micro_batches);
  if (stage == 1 && staging_bytes == 0) return {};  // reduces in place, gathers in place
  return Replay(layout, blocks, policy, stage, settings, dtype_bytes, staging_bytes)
      .run(micro_batches);
}

ZeroBufferPeak stage_zero_staging(const ChunkLayout& layout, size_t staging_bytes) {
  BufferPool pool(nullptr);
  for (int c = 0; c < layout.num_chunks(); ++c)
    pool.take(static_cast<size_t>(layout.chunk_elems(c)) * staging_bytes);
  ZeroBufferPeak b;
  b.staging = b.buffers = pool.count();
  b.bytes = static_cast<int64_t>(pool.allocated_bytes());
  return b;
}

}  // namespace tide

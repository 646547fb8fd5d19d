#include "tide/train/optimizer_snapshot.h"

#include <cstring>

namespace tide {

namespace {

constexpr ChunkKind kOverwritten[] = {ChunkKind::MASTER, ChunkKind::ADAM_M, ChunkKind::ADAM_V};

// Each range adamw_step writes, in a fixed order: per store, kind and chunk, the owned slice of
// a sliced kind or the whole chunk.
template <typename F>
void for_each_range(std::span<ChunkStore* const> stores, F&& f) {
  for (ChunkStore* s : stores)
    for (ChunkKind k : kOverwritten) {
      TIDE_CHECK(s->has(k), "the store has no {} chunks: build it with_optimizer to train",
                 chunk_kind_name(k));
      for (int c = 0; c < s->layout().num_chunks(); ++c)
        f(s->sliced(k) ? s->slice(k, c) : s->chunk(k, c));
    }
}

}  // namespace

void OptimizerSnapshot::save(std::span<ChunkStore* const> stores) {
  size_t i = 0;
  for_each_range(stores, [&](const Tensor& t) {
    if (i == saved_.size()) saved_.emplace_back();
    saved_[i].resize(t.nbytes());
    std::memcpy(saved_[i].data(), t.data, t.nbytes());
    ++i;
  });
  saved_.resize(i);
}

void OptimizerSnapshot::restore(std::span<ChunkStore* const> stores) const {
  size_t i = 0;
  for_each_range(stores, [&](const Tensor& t) {
    TIDE_ASSERT(i < saved_.size() && saved_[i].size() == t.nbytes());
    std::memcpy(t.data, saved_[i].data(), t.nbytes());
    ++i;
  });
  TIDE_ASSERT(i == saved_.size());
}

size_t OptimizerSnapshot::bytes() const {
  size_t n = 0;
  for (const auto& b : saved_) n += b.size();
  return n;
}

}  // namespace tide

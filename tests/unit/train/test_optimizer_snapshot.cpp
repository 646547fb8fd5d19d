// OptimizerSnapshot (exec/optimizer_snapshot.h), the copy post-validation rolls back to: taken
// in pieces of any size (as PipelineEngine takes it in pipeline bubbles), then whatever is
// written into MASTER/PARAM, ADAM_M and ADAM_V, restore() gives the saved bytes back exactly.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tide/core/rng.h"
#include "tide/exec/optimizer_snapshot.h"
#include "tide/model/gpt.h"

using namespace tide;

namespace {

GPTConfig config() {
  GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.vocab_size = 29;
  c.max_seq_len = 8;
  return c;
}

constexpr ChunkKind kKinds[] = {ChunkKind::MASTER, ChunkKind::ADAM_M, ChunkKind::ADAM_V};

// Every chunk of the kinds AdamW writes, filled from `seed`.
void scribble(ChunkStore& s, uint64_t seed) {
  for (ChunkKind k : kKinds)
    for (int c = 0; c < s.layout().num_chunks(); ++c) {
      const Tensor t = s.chunk(k, c);
      const PhiloxStream rng{seed, static_cast<uint64_t>(static_cast<int>(k) * 1000 + c)};
      for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = rng.normal(i);
    }
}

std::vector<std::vector<float>> contents(ChunkStore& s) {
  std::vector<std::vector<float>> all;
  for (ChunkKind k : kKinds)
    for (int c = 0; c < s.layout().num_chunks(); ++c) {
      const Tensor t = s.chunk(k, c);
      all.emplace_back(t.f32(), t.f32() + t.numel());
    }
  return all;
}

}  // namespace

TEST(OptimizerSnapshot, PiecewiseCopyRestoresExactly) {
  // Several chunks (small chunk size), so pieces cross chunk and kind boundaries.
  ModelOptions o;
  o.chunk_elems = 700;
  GPT gpt(config(), ActivationPolicy::SAVE_ALL, o);
  ChunkStore& store = gpt.store();
  ASSERT_GT(store.layout().num_chunks(), 2);
  std::vector<ChunkStore*> stores = {&store};
  OptimizerSnapshot snap;
  for (size_t piece : {size_t{7}, size_t{4096}, size_t{1} << 30}) {
    scribble(store, piece);
    const auto before = contents(store);
    snap.begin(stores);
    const size_t total = snap.pending_bytes();
    EXPECT_EQ(total, snap.bytes());
    size_t pieces = 0;
    while (snap.save_some(piece)) {
      ++pieces;
      EXPECT_LE(total - snap.pending_bytes(), pieces * piece);
    }
    EXPECT_EQ(snap.pending_bytes(), 0u);
    EXPECT_GE(pieces, total / piece) << "piece " << piece;
    scribble(store, piece + 1);  // the optimistic update
    ASSERT_NE(contents(store), before);
    snap.restore();
    EXPECT_EQ(contents(store), before) << "piece " << piece;
  }
  // 12 bytes per parameter element (padding included).
  size_t elems = 0;
  for (int c = 0; c < store.layout().num_chunks(); ++c)
    elems += store.chunk(ChunkKind::MASTER, c).numel();
  EXPECT_EQ(snap.bytes(), 12 * elems);
}

TEST(OptimizerSnapshot, SaveIsBeginAndRest) {
  GPT gpt(config(), ActivationPolicy::SAVE_ALL);
  std::vector<ChunkStore*> stores = {&gpt.store()};
  scribble(gpt.store(), 3);
  const auto before = contents(gpt.store());
  OptimizerSnapshot snap;
  snap.save(stores);
  EXPECT_EQ(snap.pending_bytes(), 0u);
  scribble(gpt.store(), 4);
  snap.restore();
  EXPECT_EQ(contents(gpt.store()), before);
}

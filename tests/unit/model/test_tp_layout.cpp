// tp_sharded (layout.h) against the layout itself: a tensor is split over the tp ranks exactly
// when its shard's shape differs from the unsharded one or tp_global_index moves some element,
// and the ranks' shards of a split tensor cover every element once. The Engine's gradient norm
// and the TP checkpoints count a tensor once or per rank by tp_sharded, so a tensor it
// misclassifies would be counted t times (or once) there.

#include <gtest/gtest.h>

#include <vector>

#include "tide/model/layout.h"

using namespace tide;

TEST(TpLayout, TpShardedIsExactlyTheTensorsTheLayoutSplits) {
  GPTConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 16;
  c.vocab_size = 37;  // pads over t = 2 and 4
  c.max_seq_len = 8;
  const ChunkLayout whole = make_layout(c);
  for (int t : {2, 4}) {
    for (int id = 0; id < whole.num_tensors(); ++id) {
      const std::string& name = whole.slot(id).name;
      const int64_t n = whole.slot(id).numel;
      std::vector<int> hits(static_cast<size_t>(n), 0);
      bool moved = false;
      for (int r = 0; r < t; ++r) {
        const ChunkLayout lay = make_layout(c, RankCoords{.tp = t, .tp_rank = r});
        const TensorSlot& s = lay.slot(lay.find(name));
        moved |= s.numel != n;
        for (int64_t i = 0; i < s.numel; ++i) {
          const int64_t g = tp_global_index(c, RankCoords{.tp = t, .tp_rank = r}, name, i);
          moved |= g != i;
          if (g >= 0) ++hits[g];
        }
      }
      EXPECT_EQ(tp_sharded(name), moved) << name << ", t " << t;
      // A split tensor: every element on exactly one rank; a replicated one: on every rank.
      for (int64_t g = 0; g < n; ++g)
        ASSERT_EQ(hits[g], moved ? 1 : t) << name << " element " << g << ", t " << t;
    }
  }
}

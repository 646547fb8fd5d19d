// tp_sharded (layout.h) against the layout itself: a tensor is split over the tp ranks exactly
// when its shard's shape differs from the unsharded one or tp_global_index moves some element,
// and the ranks' shards of a split tensor cover every element once. The Engine's gradient norm
// and the TP checkpoints count a tensor once or per rank by tp_sharded, so a tensor it
// misclassifies would be counted t times (or once) there.

#include <gtest/gtest.h>

#include <vector>

#include "tide/core/error.h"
#include "tide/model/layout.h"

using namespace tide;

namespace {

void expect_tp_sharded_is_what_the_layout_splits(const GPTConfig& c, std::vector<int> tps) {
  const ChunkLayout whole = make_layout(c);
  for (int t : tps) {
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

GPTConfig small(ModelFamily family) {
  GPTConfig c;
  c.family = family;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 16;
  c.vocab_size = 37;  // pads over t = 2 and 4
  c.max_seq_len = 8;
  return c;
}

}  // namespace

TEST(TpLayout, TpShardedIsExactlyTheTensorsTheLayoutSplits) {
  expect_tp_sharded_is_what_the_layout_splits(small(ModelFamily::gpt2), {2, 4});
}

// The Llama family: grouped-query attention (4 query heads over 2 or 4 key/value heads), the qkv
// bias, an untied head (output.weight, vocabulary-parallel) and a tied one.
TEST(TpLayout, LlamaTpShardedIsExactlyTheTensorsTheLayoutSplits) {
  for (int kv : {2, 4})
    for (bool tied : {false, true}) {
      GPTConfig c = small(ModelFamily::llama);
      c.n_kv_head = kv;
      c.intermediate_size = 24;
      c.qkv_bias = true;
      c.tie_word_embeddings = tied;
      SCOPED_TRACE(testing::Message() << "n_kv_head " << kv << (tied ? ", tied" : ", untied"));
      expect_tp_sharded_is_what_the_layout_splits(c, kv == 4 ? std::vector{2, 4} : std::vector{2});
    }
}

// The rows of rank r's qkv_proj are its query heads, then the key/value heads those read, in the
// whole tensor's q | k | v blocks: rank 1 of 2 with 4 query heads of 4 over 2 kv heads holds
// query heads 2, 3, key head 1 and value head 1.
TEST(TpLayout, LlamaQkvRowsAreTheRanksHeads) {
  GPTConfig c = small(ModelFamily::llama);
  c.n_kv_head = 2;  // head size 4, W = (4 + 2 + 2) 4 = 32 rows
  c.intermediate_size = 24;
  const RankCoords at{.tp = 2, .tp_rank = 1};
  const std::string qkv = "h.0.self_attn.qkv_proj.weight";
  std::vector<int64_t> rows;
  for (int64_t row = 0; row < 16; ++row) rows.push_back(tp_global_index(c, at, qkv, row * 16) / 16);
  EXPECT_EQ(rows,
            (std::vector<int64_t>{8, 9, 10, 11, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31}));
  // gate_up_proj (2I/t, C): gate rows [12, 24) then up rows [36, 48) of I = 24.
  EXPECT_EQ(tp_global_index(c, at, "h.1.mlp.gate_up_proj.weight", 0) / 16, 12);
  EXPECT_EQ(tp_global_index(c, at, "h.1.mlp.gate_up_proj.weight", 12 * 16) / 16, 36);
  EXPECT_EQ(make_layout(c, at).slot(make_layout(c, at).find(qkv)).numel, 16 * 16);
}

TEST(TpLayout, LlamaKeyValueHeadsThatDoNotDivideAreAClearError) {
  GPTConfig c = small(ModelFamily::llama);
  c.n_kv_head = 1;
  try {
    make_layout(c, RankCoords{.tp = 2});
    ADD_FAILURE() << "n_kv_head 1 over 2 ranks accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.n_kv_head 1 does not divide over 2 "
                                         "tensor-parallel ranks"),
              std::string::npos)
        << e.what();
  }
  c.n_kv_head = 2;
  c.intermediate_size = 25;
  EXPECT_THROW(make_layout(c, RankCoords{.tp = 2}), Error);
}

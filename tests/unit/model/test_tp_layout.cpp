// tp_sharded (layout.h) against the layout itself: a tensor is split over the tp ranks exactly
// when its shard's shape differs from the unsharded one or tp_global_index moves some element,
// and the ranks' shards of a split tensor cover every element once (a key/value row replicated
// over tp/n_kv_head ranks once per copy), and count it in the gradient norm once
// (TensorSlot::norm_numel). The Engine's gradient norm and the TP checkpoints count a tensor
// once or per rank by tp_sharded, so a tensor it misclassifies would be counted t times (or
// once) there.

#include <gtest/gtest.h>

#include <vector>

#include "tide/core/error.h"
#include "tide/model/layout.h"

using namespace tide;

namespace {

// The ranks holding element g of the whole tensor `name` when it is split over t: 1, or for
// the k and v rows of a Llama qkv_proj with fewer kv heads than ranks tp/n_kv_head.
int copies(const GPTConfig& c, const std::string& name, int t, int64_t g) {
  if (!name.ends_with("qkv_proj.weight") && !name.ends_with("qkv_proj.bias")) return 1;
  const int64_t row = name.ends_with(".weight") ? g / c.n_embd : g;
  return row < c.n_head * c.head_size() ? 1 : kv_head_replicas(c, t);
}

void expect_tp_sharded_is_what_the_layout_splits(const GPTConfig& c, std::vector<int> tps) {
  const ChunkLayout whole = make_layout(c);
  for (int t : tps) {
    for (int id = 0; id < whole.num_tensors(); ++id) {
      const std::string& name = whole.slot(id).name;
      const int64_t n = whole.slot(id).numel;
      std::vector<int> hits(static_cast<size_t>(n), 0), counted(static_cast<size_t>(n), 0);
      bool moved = false;
      for (int r = 0; r < t; ++r) {
        const ChunkLayout lay = make_layout(c, RankCoords{.tp = t, .tp_rank = r});
        const TensorSlot& s = lay.slot(lay.find(name));
        moved |= s.numel != n;
        for (int64_t i = 0; i < s.numel; ++i) {
          const int64_t g = tp_global_index(c, RankCoords{.tp = t, .tp_rank = r}, name, i);
          moved |= g != i;
          if (g >= 0) ++hits[g], counted[g] += i < s.norm_numel;
        }
      }
      EXPECT_EQ(tp_sharded(name), moved) << name << ", t " << t;
      // A split tensor: every element on exactly one rank (a replicated kv row on each of its
      // copies), counted in the gradient norm by one; a replicated one: on every rank, counted
      // by each (the norm takes tp rank 0's: tp_sharded false).
      for (int64_t g = 0; g < n; ++g) {
        ASSERT_EQ(hits[g], moved ? copies(c, name, t, g) : t)
            << name << " element " << g << ", t " << t;
        ASSERT_EQ(counted[g], moved ? 1 : t) << name << " element " << g << ", t " << t;
      }
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

// The Llama family: grouped-query attention (4 query heads over 1, 2 or 4 key/value heads: at
// t = 4 and with 1 kv head at t = 2 the kv heads replicated), the qkv bias, an untied head
// (output.weight, vocabulary-parallel) and a tied one.
TEST(TpLayout, LlamaTpShardedIsExactlyTheTensorsTheLayoutSplits) {
  for (int kv : {1, 2, 4})
    for (bool tied : {false, true}) {
      GPTConfig c = small(ModelFamily::llama);
      c.n_kv_head = kv;
      c.intermediate_size = 24;
      c.qkv_bias = true;
      c.tie_word_embeddings = tied;
      SCOPED_TRACE(testing::Message() << "n_kv_head " << kv << (tied ? ", tied" : ", untied"));
      expect_tp_sharded_is_what_the_layout_splits(c, {2, 4});
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

// Fewer key/value heads than ranks (Megatron's replication): each rank holds one kv head, the
// one its query heads read, whose rows map to the same whole rows on every copy. 4 query heads
// (head size 4) over 1 kv head at t = 2: both ranks hold k rows [16, 20) and v rows [20, 24);
// over 2 kv heads at t = 4: ranks 0, 1 kv head 0, ranks 2, 3 kv head 1.
TEST(TpLayout, LlamaReplicatedKvHeadsMapManyToOne) {
  GPTConfig c = small(ModelFamily::llama);
  c.intermediate_size = 24;
  c.qkv_bias = true;
  const std::string w = "h.0.self_attn.qkv_proj.weight", b = "h.0.self_attn.qkv_proj.bias";
  auto rows = [&](RankCoords at) {
    std::vector<int64_t> out;
    for (int64_t row = 0; row < qkv_rows_per_rank(c, at.tp); ++row) {
      out.push_back(tp_global_index(c, at, w, row * 16) / 16);
      EXPECT_EQ(tp_global_index(c, at, b, row), out.back()) << "the bias row of weight row " << row;
    }
    return out;
  };
  c.n_kv_head = 1;
  EXPECT_EQ(kv_heads_per_rank(c, 2), 1);
  EXPECT_EQ(kv_head_replicas(c, 2), 2);
  EXPECT_EQ(qkv_rows_per_rank(c, 2), (2 + 2) * 4);
  EXPECT_EQ(rows({.tp = 2, .tp_rank = 0}),
            (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23}));
  EXPECT_EQ(rows({.tp = 2, .tp_rank = 1}),
            (std::vector<int64_t>{8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}));
  // The layout: (NHl + 2) HS rows; the second copy counts its 8 q rows in the norm only.
  for (int r : {0, 1}) {
    const ChunkLayout lay = make_layout(c, {.tp = 2, .tp_rank = r});
    const TensorSlot& sw = lay.slot(lay.find(w));
    const TensorSlot& sb = lay.slot(lay.find(b));
    EXPECT_EQ(sw.shape, (Shape{16, 16})) << "rank " << r;
    EXPECT_EQ(sb.shape, (Shape{16})) << "rank " << r;
    EXPECT_EQ(sw.norm_numel, r == 0 ? 16 * 16 : 8 * 16) << "rank " << r;
    EXPECT_EQ(sb.norm_numel, r == 0 ? 16 : 8) << "rank " << r;
    EXPECT_EQ(lay.slot(lay.find("h.0.self_attn.o_proj.weight")).norm_numel, 16 * 8);
  }
  c.n_kv_head = 2;
  EXPECT_EQ(kv_heads_per_rank(c, 2), 1);  // divides: one each, not replicated
  EXPECT_EQ(kv_head_replicas(c, 2), 1);
  EXPECT_EQ(kv_head_replicas(c, 4), 2);
  EXPECT_EQ(qkv_rows_per_rank(c, 4), (1 + 2) * 4);
  EXPECT_EQ(rows({.tp = 4, .tp_rank = 1}),
            (std::vector<int64_t>{4, 5, 6, 7, 16, 17, 18, 19, 24, 25, 26, 27}));
  EXPECT_EQ(rows({.tp = 4, .tp_rank = 2}),
            (std::vector<int64_t>{8, 9, 10, 11, 20, 21, 22, 23, 28, 29, 30, 31}));
  EXPECT_EQ(rows({.tp = 4, .tp_rank = 3}),
            (std::vector<int64_t>{12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31}));
  // Without tensor parallelism, and where the heads divide: every row its own.
  c.n_kv_head = 4;
  EXPECT_EQ(kv_heads_per_rank(c, 2), 2);
  EXPECT_EQ(kv_head_replicas(c, 2), 1);
  EXPECT_EQ(qkv_rows_per_rank(c, 1), c.qkv_width());
}

// Key/value heads that neither divide over the ranks nor divide them (n_head 6 over 3 kv heads
// at t = 2; over 2 kv heads at t = 3), and an MLP that does not divide: clear errors.
TEST(TpLayout, LlamaKeyValueHeadsThatDoNotDivideAreAClearError) {
  GPTConfig c = small(ModelFamily::llama);
  c.n_head = 6;
  c.n_embd = 24;
  c.intermediate_size = 24;
  for (auto [kv, t] : {std::pair{3, 2}, std::pair{2, 3}}) {
    c.n_kv_head = kv;
    try {
      make_layout(c, RankCoords{.tp = t});
      ADD_FAILURE() << "n_kv_head " << kv << " over " << t << " ranks accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(
                    fmt::format("model.n_kv_head {} does not divide over {} tensor-parallel "
                                "ranks and is not a divisor of {}",
                                kv, t, t)),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("pick a tensor_parallel.size"), std::string::npos)
          << e.what();
    }
  }
  c.n_kv_head = 1;  // replicated over 2, 3 or 6 ranks
  for (int t : {2, 3, 6}) EXPECT_NO_THROW(make_layout(c, RankCoords{.tp = t})) << t;
  c = small(ModelFamily::llama);
  c.n_kv_head = 2;
  c.intermediate_size = 25;
  EXPECT_THROW(make_layout(c, RankCoords{.tp = 2}), Error);
}

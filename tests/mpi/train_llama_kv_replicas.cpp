// The Llama family under tensor parallelism with fewer key/value heads than tp ranks (issue
// #28, Megatron's replication: model/layout.h): each rank holds the one kv head its query heads
// read, the ranks sharing it hold bitwise copies, their weight gradients are summed over them in
// W, and the gradient norm counts the copies once.
//
// The oracle is the single-rank Trainer on the same global batch (every rank runs it: a tiny
// model): losses and gradient norms to 1e-5, the final parameters read back from the
// whole-model checkpoint the run writes to 1e-4 per tensor, the validation loss to 1e-5
// (dp_runs::expect_equivalent, the tolerances of the other Llama and GPT-2 TP tests: tensor
// parallelism changes only the order of float sums, the row-parallel partial sums and the
// per-rank norm sums, never the arithmetic, so the runs differ by rounding). Gradient clipping
// at 0.5 is active (the norms are above it), so a norm that counted the copies twice would also
// scale every update. After training the copies of every kv head are bitwise equal.
//
//   np 2: 4 query heads over 1 kv head at tp 2 (each head on both ranks): with SP (selective
//         policy, untied head), and without (full policy with P_a, tied head).
//   np 4: 4 query heads over 2 kv heads at tp 4 (two pairs of copies) with SP; over 1 kv head at
//         tp 4 (four copies); tp 2 x dp 2 under ZeRO-1 and ZeRO-2 over 1 kv head.
//
// Checkpoints (np 2): a tp-2 run over 1 kv head saves at step 4; the whole-model checkpoint
// holds every rank's shard at tp_global_index, bit for bit (both copies of the kv rows equal the
// one whole row); resumed at tp 1 it continues like the tp-2 run (1e-5), resumed at tp 2 to the
// bit (the optimizer state scattered to both copies).
// Attention dropout 0.1 (small_llama_keys): the masks follow global coordinates, one per query
// head.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "dp_runs.h"
#include "mpi_test.h"

using namespace tide;
using namespace tide::dp_runs;

namespace {

constexpr int64_t kKvSteps = 8;
constexpr float kClip = 0.5f;

TrainConfig kv_config(const std::string& shard, const std::string& dir, int kv, int micro,
                      bool tied, std::vector<std::string> keys, int64_t steps = kKvSteps) {
  std::vector<std::string> extra = small_llama_keys(kv, tied);
  extra.push_back(fmt::format("gradient_clipping={}", kClip));
  extra.insert(extra.end(), keys.begin(), keys.end());
  return dp_config(shard, dir, micro, /*accum=*/2, steps, 0.0f, extra);
}

// The k and v rows of every qkv_proj (weight and bias) on this rank equal, bit for bit, those
// of the first rank holding the same kv head (an all-gather over the tp group).
void expect_kv_copies_bitwise_equal(const GPT& m, const std::string& what) {
  const GPTConfig& c = m.config();
  const int t = m.tp(), copies = kv_head_replicas(c, t);
  ASSERT_GT(copies, 1) << what;
  const int64_t q_rows = c.n_head / t * c.head_size();
  const ChunkLayout& lay = m.store().layout();
  for (int id = 0; id < lay.num_tensors(); ++id) {
    const std::string& name = lay.slot(id).name;
    if (!name.ends_with("qkv_proj.weight") && !name.ends_with("qkv_proj.bias")) continue;
    const Tensor x = m.store().tensor(ChunkKind::PARAM, id);
    const int64_t width = name.ends_with(".weight") ? c.n_embd : 1;
    const int64_t n = x.numel() - q_rows * width;  // the kv rows
    std::vector<float> all(static_cast<size_t>(n * t));
    m.tp_group()->all_gather(Tensor(x.f32() + q_rows * width, {n}), Tensor(all.data(), {n * t}));
    const int first = m.tp_rank() / copies * copies;
    EXPECT_EQ(std::memcmp(&all[static_cast<size_t>(first * n)],
                          &all[static_cast<size_t>(m.tp_rank() * n)], n * sizeof(float)),
              0)
        << what << ": " << name << "'s kv rows on tp rank " << m.tp_rank() << " differ from rank "
        << first << "'s";
  }
}

struct Case {
  int kv, tp;
  bool tied;
  std::vector<std::string> keys;
  int dp = 1;
};

void expect_cases_match_the_single_rank_run(const std::vector<Case>& cases) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(CommAlgorithm::Mpi);
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    ASSERT_EQ(c.tp * c.dp, world->size());
    std::vector<std::string> keys = c.keys;
    keys.push_back(fmt::format("tensor_parallel.size={}", c.tp));
    std::string what =
        fmt::format("llama, 4 query heads over {} kv heads{}", c.kv, c.tied ? ", tied" : "");
    for (const std::string& k : keys) what += ", " + k;
    // The single-rank Trainer on the same global batch (dp micro-batches of kMicro each).
    CheckpointedRun base;
    {
      Trainer t(kv_config(shard, fmt::format("{}/base{}_{}", dir, i, world->rank()), c.kv,
                          c.dp * kMicro, c.tied, {}));
      base = train_and_save(t, kKvSteps, "model.ckpt");
    }
    EXPECT_LT(base.r.losses.back(), base.r.losses.front() - 0.05f) << what << ": it learns";
    EXPECT_GT(base.r.grad_norms.front(), kClip) << what << ": clipping is not active";
    Trainer t(kv_config(shard, fmt::format("{}/run{}", dir, i), c.kv, kMicro, c.tied, keys), world);
    ASSERT_EQ(t.model().tp(), c.tp) << what;
    EXPECT_EQ(kv_head_replicas(t.model().config(), c.tp), c.tp / c.kv) << what;
    const CheckpointedRun run = train_and_save(t, kKvSteps, "model.ckpt");
    expect_equivalent(run.r, base.r, what.c_str());
    EXPECT_NEAR(run.val, base.val, 1e-5 * base.val) << what;
    expect_kv_copies_bitwise_equal(t.model(), what);
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

const std::string kSp = "tensor_parallel.sequence_parallel=true";

std::string policy(const char* p) {
  return fmt::format("activation_checkpointing.policy={}", p);
}

}  // namespace

TEST(LlamaKvReplicas, MatchTheSingleRankRun) {
  const int n = mpi_test::world().size();
  if (n == 2) {
    expect_cases_match_the_single_rank_run({
        {1, 2, false, {kSp, policy("selective")}},
        {1, 2, true, {policy("full"), "activation_checkpointing.partition_activations=true"}},
    });
  } else if (n == 4) {
    expect_cases_match_the_single_rank_run({
        {2, 4, false, {kSp, policy("selective")}},
        {1, 4, false, {policy("none")}},
        {1, 2, false, {kSp, "zero_optimization.stage=1"}, 2},
        {1, 2, true, {"zero_optimization.stage=2"}, 2},
    });
  } else {
    GTEST_SKIP() << "tp 2 on 2 ranks; tp 4 and tp 2 x dp 2 on 4";
  }
}

TEST(LlamaKvReplicas, CheckpointHoldsTheHeadOnceAndResumesAtTp1AndTp2) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(CommAlgorithm::Mpi);
  if (world->size() != 2) GTEST_SKIP() << "tp 2 on 2 ranks";
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);
  const std::vector<std::string> tp2 = {"tensor_parallel.size=2", kSp, policy("selective")};
  const std::string out = dir + "/a";
  constexpr int64_t half = kKvSteps / 2;
  CheckpointedRun whole_run;  // the tp-2 run, uninterrupted
  {
    Trainer t(kv_config(shard, out, 1, kMicro, false, tp2), world);
    train_and_save(t, half, "model_step4.ckpt");
    // The checkpoint holds each rank's shard at tp_global_index, bit for bit: both copies of
    // the kv rows read back as the one whole row.
    RunResult ck;
    read_checkpoint_params(out + "/model_step4.ckpt", t.config().model, ck);
    const GPT& m = t.model();
    const ChunkLayout& lay = m.store().layout();
    for (int id = 0; id < lay.num_tensors(); ++id) {
      const std::string& name = lay.slot(id).name;
      const auto at = std::find(ck.names.begin(), ck.names.end(), name);
      ASSERT_NE(at, ck.names.end()) << name;
      const std::vector<float>& w = ck.params[at - ck.names.begin()];
      const Tensor x = m.store().tensor(ChunkKind::PARAM, id);
      int64_t wrong = 0;
      for (int64_t i = 0; i < x.numel(); ++i) {
        const int64_t g = tp_global_index(m.config(), m.coords(), name, i);
        if (g >= 0) wrong += std::memcmp(&w[g], x.f32() + i, 4) != 0;
      }
      EXPECT_EQ(wrong, 0) << name << " on tp rank " << m.tp_rank();
    }
    whole_run = train_and_save(t, half, "model.ckpt");
  }
  // Resumed at tp 1 (every rank on its own): the tp-2 run's last steps, to 1e-5.
  {
    Trainer t(kv_config(shard, fmt::format("{}/one{}", dir, world->rank()), 1, kMicro, false,
                        {"checkpoint.resume=" + out + "/model_step4.ckpt"}));
    ASSERT_EQ(t.step(), half);
    const CheckpointedRun r = train_and_save(t, half, "model.ckpt");
    expect_equivalent(r.r, whole_run.r, "resumed at tp 1");
  }
  // Resumed at tp 2: the tp-2 run's last steps to the bit, the copies still equal.
  {
    std::vector<std::string> keys = tp2;
    keys.push_back("checkpoint.resume=" + out + "/model_step4.ckpt");
    Trainer t(kv_config(shard, dir + "/b", 1, kMicro, false, keys), world);
    ASSERT_EQ(t.step(), half);
    const CheckpointedRun r = train_and_save(t, half, "model.ckpt");
    EXPECT_EQ(differs(r.r, whole_run.r), "") << "resumed at tp 2";
    expect_kv_copies_bitwise_equal(t.model(), "resumed at tp 2");
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

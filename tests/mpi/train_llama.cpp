// The Llama family (model.family=llama, issue #28) under data parallelism: ZeRO stages 0-3 on
// N ranks train like one rank with the same global batch, and stages 1-3 like each other to
// the bit, as GPT-2 does in train_zero.cpp. The model has all the family's parts: grouped-query
// attention (2 query heads over 1 key/value head), a qkv bias, an untied head, llama3 RoPE.

#include <gtest/gtest.h>

#include <filesystem>

#include "dp_runs.h"
#include "mpi_test.h"

using namespace tide;
using namespace tide::dp_runs;

namespace {

TrainConfig llama_dp_config(const std::string& shard, const std::string& dir, int stage, int micro,
                            bool tied) {
  TrainConfig c =
      dp_config(shard, dir, micro, /*accum=*/2, kSteps, 0.0f,
                {"model.family=llama", "model.n_kv_head=1", "model.intermediate_size=48",
                 "model.qkv_bias=true", fmt::format("model.tie_word_embeddings={}", tied),
                 "model.rope_theta=500", "model.rope_scaling.type=llama3",
                 "model.rope_scaling.original_max_position_embeddings=16"});
  c.zero.stage = stage;
  c.zero.param_persistence_threshold = 0;  // as train_zero.cpp: every chunk gathered
  return c;
}

}  // namespace

TEST(LlamaDp, ZeroStagesMatchOneRank) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr(CommAlgorithm::Mpi);
  const int N = world->size();
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);
  for (bool tied : {false, true}) {
    std::vector<RunResult> runs;
    for (int stage : {0, 1, 2, 3}) {
      runs.push_back(train(llama_dp_config(shard, dir, stage, kMicro, tied), world, kSteps));
      expect_same_on_every_rank(*world, runs.back());
    }
    if (world->rank() == 0) {
      const RunResult one =
          train(llama_dp_config(shard, dir, 0, N * kMicro, tied), nullptr, kSteps);
      for (int stage = 0; stage < 4; ++stage) {
        const std::string what =
            fmt::format("llama{} ZeRO-{} on {} ranks vs one rank", tied ? " tied" : "", stage, N);
        expect_equivalent(runs[stage], one, what.c_str(), 1e-3);
      }
      for (int stage = 2; stage < 4; ++stage)
        EXPECT_EQ(differs(runs[stage], runs[1]), "") << "stage " << stage << " vs stage 1";
      EXPECT_LT(runs[1].losses.back(), runs[1].losses.front() - 0.3f);
    }
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

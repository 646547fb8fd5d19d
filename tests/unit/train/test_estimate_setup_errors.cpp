// Impossible setups stop with one line that names the problem and the fix. `tide estimate`
// gets its setup only through the config (flags are key overrides), so these are the config's
// checks (config/check_settings.cpp), which `tide train` makes too; the setups are built as
// the app builds them: load_train_config with the overrides, then setup_from_train_config.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "error_of.h"
#include "tide/config/estimate_setup.h"

using namespace tide;

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

namespace {

// GPT-2 1.5B (48 layers, 25 heads, hidden 1600, 1024 positions) on `world` ranks as tp x pp,
// with `more` overrides; the error of deriving its setup, or "" when there is none.
std::string error_of(int world, int tp, int pp, std::vector<std::string> more = {}) {
  std::vector<std::string> o = {
      "model.preset=gpt2-1.5b", "seq_len=1024", fmt::format("world_size={}", world),
      fmt::format("tensor_parallel.size={}", tp), fmt::format("pipeline.stages={}", pp)};
  o.insert(o.end(), more.begin(), more.end());
  return test::error_of(
      [&] { setup_from_train_config(load_train_config("", o, /*check_paths=*/false)); });
}

}  // namespace

TEST(EstimateSetupErrors, HeadsNotDivisibleByTensorParallel) {
  const std::string e = error_of(2, 2, 1);  // hidden 1600 divides by 2, 25 heads do not
  EXPECT_HAS(e, "model.n_head (25) is not divisible by tensor_parallel.size (2)");
  EXPECT_HAS(e, "choose a size that divides 25");
}

TEST(EstimateSetupErrors, HiddenNotDivisibleByTensorParallel) {
  EXPECT_HAS(error_of(3, 3, 1), "model.n_embd (1600) is not divisible by tensor_parallel.size (3)");
}

TEST(EstimateSetupErrors, LayersNotDivisibleByPipelineStages) {
  EXPECT_HAS(error_of(5, 1, 5),
             "model.n_layer (48) is not divisible by pipeline.stages x "
             "pipeline.virtual_stages = 5 x 1 = 5");
}

TEST(EstimateSetupErrors, SequenceNotDivisibleByTensorParallelUnderSequenceParallelism) {
  EXPECT_EQ(error_of(5, 5, 1), "");  // 25 heads and hidden 1600 divide by 5; seq 1024 does not
  EXPECT_HAS(error_of(5, 5, 1, {"tensor_parallel.sequence_parallel=true"}),
             "seq_len (1024) is not divisible by tensor_parallel.size (5) under "
             "tensor_parallel.sequence_parallel");
}

// The one rule TrainSetup::validate had that the config's checks lacked (check_world_layout):
// the world the estimate sizes, world_size 0 being one rank.
TEST(EstimateSetupErrors, WorldSizeNotDivisibleByTpTimesPp) {
  EXPECT_HAS(error_of(12, 1, 8),
             "world_size 12 is not divisible by tensor_parallel.size x "
             "pipeline.stages = 1 x 8 = 8");
  EXPECT_EQ(error_of(16, 1, 8), "");
  EXPECT_HAS(error_of(0, 1, 8), "world_size 1 (0: one rank in tide estimate) is not divisible");
  // tide train's config takes 0 as the ranks launched: not refused when it is read.
  EXPECT_EQ(test::error_of([] {
              load_train_config("", {"pipeline.stages=2", "model.n_layer=2", "model.vocab_size=64"},
                                /*check_paths=*/false);
            }),
            "");
}

TEST(EstimateSetupErrors, OffloadOfParamsNeedsStageThree) {
  EXPECT_HAS(
      error_of(8, 1, 1,
               {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=cpu",
                "zero_optimization.offload_param.device=cpu"}),
      "parameter offload needs ZeRO stage 3");
}

TEST(EstimateSetupErrors, SequenceLongerThanThePositions) {
  EXPECT_HAS(error_of(8, 1, 1, {"seq_len=2048"}), "seq_len 2048 exceeds model.max_seq_len 1024");
}

TEST(EstimateSetupErrors, InterleavedNeedsMicroBatchesAMultipleOfStages) {
  const std::vector<std::string> interleaved = {"pipeline.schedule=interleaved",
                                                "pipeline.virtual_stages=2"};
  auto with_accum = [&](int m) {
    std::vector<std::string> o = interleaved;
    o.push_back(fmt::format("gradient_accumulation_steps={}", m));
    return error_of(4, 1, 4, o);
  };
  EXPECT_HAS(with_accum(6),
             "needs gradient_accumulation_steps (the micro-batches per step, 6) to "
             "be a multiple of pipeline.stages (4)");
  EXPECT_EQ(with_accum(8), "");
}

TEST(EstimateSetupErrors, ZbVNeedsTwoChunksOfWholeLayers) {
  EXPECT_HAS(error_of(4, 1, 4, {"pipeline.schedule=zb-v", "pipeline.virtual_stages=3"}),
             "pipeline.schedule=zb-v runs exactly two model chunks per stage");
  // 45 layers divide over 5 stages, not over their 10 chunks (a preset's layers are its own).
  const std::vector<std::string> shape = {"model.n_layer=45", "model.n_head=25",
                                          "model.n_embd=1600", "model.vocab_size=50257"};
  auto zbv = [&](std::vector<std::string> o) {
    o.insert(o.end(), {"world_size=5", "pipeline.stages=5", "pipeline.schedule=zb-v"});
    return test::error_of(
        [&] { setup_from_train_config(load_train_config("", o, /*check_paths=*/false)); });
  };
  EXPECT_HAS(zbv(shape),
             "model.n_layer (45) is not divisible by pipeline.stages x "
             "pipeline.virtual_stages = 5 x 2 = 10");
  EXPECT_EQ(
      zbv({"model.n_layer=40", "model.n_head=25", "model.n_embd=1600", "model.vocab_size=50257"}),
      "");
}

TEST(EstimateSetupErrors, MemoryLimitBelowOneMicroBatch) {
  EXPECT_HAS(error_of(4, 1, 4, {"pipeline.schedule=zb-auto", "pipeline.memory_limit=0.5"}),
             "pipeline.memory_limit=0.5 is below one micro-batch's activations (1 M_B)");
  EXPECT_EQ(error_of(4, 1, 4, {"pipeline.schedule=zb-auto", "pipeline.memory_limit=1"}), "");
}

// placement.policy=auto (was LimitFit.AutoSettingsErrors, on TrainSetup::validate).
TEST(EstimateSetupErrors, AutoPlacementSettings) {
  auto err = [](std::vector<std::string> o) {
    o.insert(o.end(), {"model.n_layer=4", "model.n_head=2", "model.n_embd=32",
                       "model.vocab_size=64", "seq_len=16"});
    return test::error_of(
        [&] { setup_from_train_config(load_train_config("", o, /*check_paths=*/false)); });
  };
  EXPECT_HAS(err({"placement.device_memory_limit=-1"}), "placement.device_memory_limit");
  EXPECT_HAS(err({"placement.policy=auto"}), "needs placement.device_memory_limit > 0");
  EXPECT_EQ(err({"placement.policy=auto", "device=cuda"}), "");  // the GPU's memory sizes it
  const std::string limit = "placement.device_memory_limit=1048576";
  EXPECT_HAS(err({"placement.policy=auto", limit, "zero_optimization.stage=1",
                  "zero_optimization.offload_optimizer.device=cpu"}),
             "auto decides where the optimizer state and the parameters live itself");
  for (const char* schedule : {"zb-v", "zb-auto", "zb-h1"})
    EXPECT_EQ(err({"placement.policy=auto", limit, "world_size=2", "pipeline.stages=2",
                   fmt::format("pipeline.schedule={}", schedule)}),
              "")
        << schedule;
}

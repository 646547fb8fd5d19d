// The pipeline.* keys: each bad combination is one clear line naming the key and the fix, at
// config time (parse_train_config, before a Trainer exists or anything is written), and what
// depends on the ranks launched when the Trainer checks them (check_trainer_can_honour).
#include <gtest/gtest.h>

#include "error_of.h"
#include "tide/config/config.h"
#include "tide/config/estimate_setup.h"
#include "tide/config/pipeline_setup.h"
#include "tide/config/unsupported_settings.h"
#include "tide/pipeline/simulator.h"

using namespace tide;
using tide::test::error_of;

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

namespace {

// The config's error ("" when it parses), with model.n_layer 12 unless overridden.
std::string config_error(std::vector<std::string> overrides) {
  overrides.insert(overrides.begin(), "model.n_layer=12");
  return error_of([&] { load_train_config("", overrides); });
}

}  // namespace

TEST(PipelineConfig, GoodCombinationsParseToTheirSchedule) {
  for (const char* s : {"1f1b", "gpipe", "zb-h1", "zb-h2", "zb-1p", "zb-2p", "zb-auto"}) {
    const TrainConfig c = load_train_config(
        "", {"model.n_layer=12", "pipeline.stages=4", fmt::format("pipeline.schedule={}", s),
             "gradient_accumulation_steps=8"});
    EXPECT_EQ(c.pipeline_schedule, s);
    const pipeline::Schedule sch = make_pipeline_schedule(c);
    EXPECT_EQ(sch.stages, 4) << s;
    EXPECT_EQ(sch.microbatches, 8) << s;
    EXPECT_EQ(sch.chunks, 1) << s;
  }
  // zb-v: two chunks per stage without saying so; aliases are canonical.
  TrainConfig c =
      load_train_config("", {"model.n_layer=12", "pipeline.stages=2", "pipeline.schedule=zb_v"});
  EXPECT_EQ(c.pipeline_schedule, "zb-v");
  EXPECT_EQ(c.virtual_stages, 2);
  EXPECT_EQ(make_pipeline_schedule(c).chunks, 2);
  c = load_train_config(
      "", {"model.n_layer=12", "pipeline.stages=2", "pipeline.schedule=interleaved-1f1b",
           "pipeline.virtual_stages=3", "gradient_accumulation_steps=4"});
  EXPECT_EQ(make_pipeline_schedule(c).chunks, 3);
  // zb-auto under a memory limit of 2 M_B: the schedule keeps to it.
  c = load_train_config("", {"model.n_layer=12", "pipeline.stages=4", "pipeline.schedule=zb-auto",
                             "pipeline.memory_limit=2", "gradient_accumulation_steps=8"});
  EXPECT_LE(pipeline::simulate(make_pipeline_schedule(c), pipeline::CostModel{}).peak_memory,
            2.0 + 1e-9);
  // tide estimate sizes every schedule tide train runs (zb-v with its two chunks per stage),
  // here on the two ranks of the two stages.
  EXPECT_EQ(
      setup_from_train_config(load_train_config("", {"model.n_layer=12", "pipeline.stages=2",
                                                     "world_size=2", "pipeline.schedule=zb-h2"}))
          .schedule,
      Schedule::ZBH2);
  const TrainSetup zb_v = setup_from_train_config(load_train_config(
      "", {"model.n_layer=12", "pipeline.stages=2", "world_size=2", "pipeline.schedule=zb-v"}));
  EXPECT_EQ(zb_v.schedule, Schedule::ZBV);
  EXPECT_EQ(zb_v.virtual_stages, 2);
  // One stage: every schedule runs the same steps.
  EXPECT_EQ(config_error({"pipeline.schedule=zb-h2"}), "");
}

TEST(PipelineConfig, EveryBadCombinationIsOneClearErrorAtConfigTime) {
  EXPECT_HAS(config_error({"pipeline.stages=5"}),
             "model.n_layer (12) is not divisible by pipeline.stages x pipeline.virtual_stages = "
             "5 x 1 = 5");
  EXPECT_HAS(config_error({"pipeline.stages=4", "pipeline.schedule=zb-v"}),
             "is not divisible by pipeline.stages x pipeline.virtual_stages = 4 x 2 = 8");
  EXPECT_HAS(config_error({"pipeline.stages=2", "pipeline.schedule=interleaved",
                           "pipeline.virtual_stages=2", "gradient_accumulation_steps=3"}),
             "pipeline.schedule=interleaved needs gradient_accumulation_steps (the micro-batches "
             "per step, 3) to be a multiple of pipeline.stages (2)");
  EXPECT_HAS(config_error({"pipeline.stages=2", "pipeline.schedule=interleaved",
                           "gradient_accumulation_steps=2"}),
             "pipeline.schedule=interleaved needs pipeline.virtual_stages >= 2 (got 1)");
  EXPECT_HAS(
      config_error({"pipeline.stages=2", "pipeline.schedule=zb-h1", "pipeline.virtual_stages=2"}),
      "pipeline.virtual_stages=2: the zb-h1 schedule runs one model chunk per stage");
  EXPECT_HAS(
      config_error({"pipeline.stages=2", "pipeline.schedule=zb-v", "pipeline.virtual_stages=3"}),
      "pipeline.schedule=zb-v runs exactly two model chunks per stage");
  EXPECT_HAS(config_error({"pipeline.virtual_stages=2"}),
             "pipeline.virtual_stages=2 needs pipeline.stages > 1");
  EXPECT_HAS(config_error({"pipeline.schedule=zb-h3"}),
             "unknown pipeline.schedule 'zb-h3'; choose one of: gpipe, 1f1b, interleaved");
  EXPECT_HAS(config_error({"pipeline.stages=2", "pipeline.memory_limit=0.5"}),
             "pipeline.memory_limit=0.5 is below one micro-batch's activations");
  // A limit the named schedule does not keep to: the generator's error, with the keys.
  EXPECT_HAS(config_error({"pipeline.stages=4", "pipeline.schedule=zb-h2",
                           "gradient_accumulation_steps=8", "pipeline.memory_limit=4"}),
             "pipeline.schedule=zb-h2 with pipeline.stages=4, gradient_accumulation_steps=8, "
             "pipeline.memory_limit=4: schedule zb-h2 needs 7 activation memory per stage");
  // The key it replaced is gone (an unknown key, not silently ignored).
  EXPECT_HAS(config_error({"parallel.pp=2"}), "parallel.pp");
}

TEST(PipelineConfig, TheRanksMustBeStagesTimesReplicas) {
  auto refusal = [](const std::vector<std::string>& overrides, int world) {
    return error_of([&] {
      std::vector<std::string> o = overrides;
      o.insert(o.begin(), "model.n_layer=12");
      check_trainer_can_honour(load_train_config("", o), world);
    });
  };
  EXPECT_EQ(refusal({"pipeline.stages=2"}, 2), "");
  EXPECT_EQ(refusal({"pipeline.stages=3", "pipeline.schedule=zb-h2"}, 3), "");
  EXPECT_HAS(refusal({"pipeline.stages=2"}, 3),
             "pipeline.stages=2: this run has 3 ranks, not a multiple of the stages");
  EXPECT_HAS(refusal({"pipeline.stages=2"}, 1),
             "pipeline.stages=2: this run has 1 rank, not a multiple of the stages");
  // ZeRO-3, offload and auto placement under pp (the policy stack on every stage's store).
  EXPECT_EQ(refusal({"pipeline.stages=2", "zero_optimization.stage=3"}, 2), "");
  EXPECT_EQ(refusal({"pipeline.stages=2", "zero_optimization.stage=3",
                     "zero_optimization.offload_optimizer.device=cpu",
                     "zero_optimization.offload_param.device=cpu"},
                    4),
            "");
  EXPECT_EQ(refusal({"pipeline.stages=2", "placement.policy=auto",
                     "placement.device_memory_limit=100000000"},
                    2),
            "");
  // One placement shares the budget between the stage's model chunks.
  EXPECT_EQ(refusal({"pipeline.stages=2", "pipeline.schedule=zb-v", "placement.policy=auto",
                     "placement.device_memory_limit=100000000"},
                    2),
            "");
  EXPECT_EQ(refusal({"pipeline.stages=2", "pipeline.schedule=zb-auto", "placement.policy=auto",
                     "placement.device_memory_limit=100000000"},
                    2),
            "");  // the plan follows the generated schedule (AutoPlacement::replan)
  // bf16 and fp16 (issue #26): under pp and tp (with SP, with dp), and pp x tp.
  EXPECT_EQ(refusal({"pipeline.stages=2", "bf16.enabled=true"}, 2), "");
  EXPECT_EQ(refusal({"pipeline.stages=2", "fp16.enabled=true"}, 2), "");
  EXPECT_EQ(refusal({"tensor_parallel.size=2", "bf16.enabled=true"}, 2), "");
  EXPECT_EQ(refusal({"tensor_parallel.size=2", "fp16.enabled=true",
                     "tensor_parallel.sequence_parallel=true", "zero_optimization.stage=3"},
                    4),
            "");
  EXPECT_EQ(refusal({"tensor_parallel.size=2", "pipeline.stages=2", "bf16.enabled=true"}, 4), "");
  // Data parallelism inside the stages: ZeRO 0-3.
  EXPECT_EQ(refusal({"pipeline.stages=2"}, 4), "");
  EXPECT_EQ(refusal({"pipeline.stages=2", "zero_optimization.stage=1"}, 4), "");
  EXPECT_EQ(refusal({"pipeline.stages=2", "zero_optimization.stage=2"}, 4), "");
  EXPECT_EQ(refusal({"pipeline.stages=2", "zero_optimization.stage=3"}, 4), "");
}

// Impossible configurations stop with one line that names the problem and the fix.
#include <gtest/gtest.h>

#include <string>

#include "error_of.h"
#include "tide/core/error.h"
#include "tide/estimate/memory_estimate.h"

using namespace tide;

namespace {

TrainSetup gpt2_xl(int world, int tp, int pp) {
  TrainSetup s;
  s.model = GPTConfig::preset("gpt2-1.5b");  // 48 layers, 25 heads, hidden 1600, seq 1024
  s.world_size = world;
  s.tp = tp;
  s.pp = pp;
  return s;
}

// The error message of estimate_memory(s), or "" if it did not throw.
std::string error_of(const TrainSetup& s) {
  return test::error_of([&] { estimate_memory(s); });
}

}  // namespace

TEST(SetupErrors, HeadsNotDivisibleByTensorParallel) {
  const std::string e = error_of(gpt2_xl(2, 2, 1));  // 25 heads over 2 ranks
  EXPECT_NE(e.find("model.n_head (25) is not divisible by tensor_parallel.size (2)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("choose a tp that divides 25"), std::string::npos) << e;
}

TEST(SetupErrors, HiddenNotDivisibleByTensorParallel) {
  const std::string e = error_of(gpt2_xl(3, 3, 1));  // hidden 1600 over 3 ranks
  EXPECT_NE(e.find("model.n_embd (1600) is not divisible by tensor_parallel.size (3)"),
            std::string::npos)
      << e;
}

TEST(SetupErrors, LayersNotDivisibleByPipelineStages) {
  const std::string e = error_of(gpt2_xl(5, 1, 5));
  EXPECT_NE(e.find("model.n_layer (48) is not divisible by pipeline.stages (5)"), std::string::npos)
      << e;
}

TEST(SetupErrors, SequenceNotDivisibleByTensorParallelUnderSequenceParallelism) {
  TrainSetup s = gpt2_xl(5, 5, 1);  // 25 heads and hidden 1600 divide by 5; seq 1024 does not
  EXPECT_EQ(error_of(s), "");
  s.sp = true;
  const std::string e = error_of(s);
  EXPECT_NE(e.find("sequence length 1024 is not divisible by tensor_parallel.size (5) under "
                   "sequence parallelism"),
            std::string::npos)
      << e;
}

TEST(SetupErrors, WorldSizeNotDivisibleByTpTimesPp) {
  const std::string e = error_of(gpt2_xl(12, 1, 8));
  EXPECT_NE(e.find("world size 12 is not divisible by tp*pp = 1*8 = 8"), std::string::npos) << e;
}

TEST(SetupErrors, OffloadOfParamsNeedsStageThree) {
  TrainSetup s = gpt2_xl(8, 1, 1);
  s.zero_stage = 2;
  s.offload = Offload::All;
  EXPECT_NE(error_of(s).find("offload_param needs zero_optimization.stage 3"), std::string::npos);
}

TEST(SetupErrors, SequenceLongerThanThePositions) {
  TrainSetup s = gpt2_xl(8, 1, 1);
  s.seq_len = 2048;  // positions: max_seq_len 1024
  EXPECT_NE(error_of(s).find("seq_len 2048 exceeds model.max_seq_len 1024"), std::string::npos);
}

TEST(SetupErrors, InterleavedNeedsMicroBatchesAMultipleOfStages) {
  TrainSetup s = gpt2_xl(4, 1, 4);
  s.schedule = Schedule::Interleaved;
  s.virtual_stages = 2;
  s.grad_accum = 6;
  EXPECT_NE(
      error_of(s).find("gradient_accumulation_steps (6) to be a multiple of pipeline.stages (4)"),
      std::string::npos);
  s.grad_accum = 8;
  EXPECT_EQ(error_of(s), "");
}

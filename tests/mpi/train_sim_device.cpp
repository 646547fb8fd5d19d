// Data parallelism on the simulated device (issues #25, #27): N ranks, each with its model on a
// sim:0 stream and in that device's memory, train the CPU data-parallel run's model bit for bit
// (losses, gradient norms, validation, the checkpoint's weights and Adam state), at ZeRO stage 0
// in f32 and in bf16 (whose fp32 gradients travel as bf16: the communication_data_type staging
// converts on the stream), stage 1 in f32, stage 2 in bf16 and stage 3 in f32, with dropout 0.1,
// accumulation and clipping. What it holds: each collective reads and writes device memory only
// after the stream has run what was queued before it (the all-reduce or reduce-scatter of the
// gradients, the parameters' all-gather after AdamW, ZeRO-3's gathers into reused buffers), and
// the stream reads what a collective wrote only after the host has waited for it
// (policy_stack.cpp's GradReduction, parallel/zero.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint_tensors.h"
#include "dp_runs.h"
#include "mpi_test.h"
#include "tide/checkpoint/sharded_checkpoint.h"
#include "tide/train/trainer.h"

using namespace tide;
using namespace tide::dp_runs;

namespace {

struct SimDpRun {
  std::vector<float> curve;  // per step: loss, gradient norm
  std::string checkpoint;
};

SimDpRun sim_dp_run(const TrainConfig& cfg, std::shared_ptr<ProcessGroup> world) {
  Trainer t(cfg, world);
  SimDpRun r;
  for (int s = 0; s < 8; ++s) {
    const StepStats st = t.train_step();
    r.curve.push_back(st.loss);
    r.curve.push_back(static_cast<float>(st.grad_norm));
  }
  r.curve.push_back(t.evaluate());
  r.checkpoint = t.save("final.ckpt");
  return r;
}

TEST(SimDeviceDataParallel, TrainsTheCpuRunBitwise) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);
  for (const auto& [precision_, stage_] : std::vector<std::pair<std::string, int>>{
           {"f32", 0}, {"bf16", 0}, {"f32", 1}, {"bf16", 2}, {"f32", 3}}) {
    // Copies: clang before 16 does not let a lambda capture a structured binding.
    const std::string precision = precision_;
    const int stage = stage_;
    auto config = [&](const std::string& device) {
      std::vector<std::string> extra = {"device=" + device, "gradient_clipping=0.5",
                                        fmt::format("zero_optimization.stage={}", stage)};
      if (precision == "bf16") extra.push_back("bf16.enabled=true");
      return dp_config(shard, fmt::format("{}/{}_z{}_{}", dir, precision, stage, device), kMicro, 2,
                       8, 0.1f, extra);
    };
    const SimDpRun cpu = sim_dp_run(config("cpu"), world);
    const SimDpRun sim = sim_dp_run(config("sim"), world);
    ASSERT_EQ(sim.curve.size(), cpu.curve.size());
    for (size_t i = 0; i < cpu.curve.size(); ++i)
      EXPECT_EQ(std::memcmp(&sim.curve[i], &cpu.curve[i], sizeof(float)), 0)
          << precision << " ZeRO-" << stage << ", rank " << world->rank() << ": entry " << i
          << " (loss, norm per step; validation last): " << sim.curve[i] << " on sim, "
          << cpu.curve[i] << " on the CPU";
    // Stage 0: rank 0's file; ZeRO: each rank's shard of the folder.
    if (world->rank() == 0 || stage > 0) {
      const std::string file =
          stage == 0 ? "" : "/" + shard_file_name(world->rank(), world->size());
      const auto a = test::checkpoint_tensors(cpu.checkpoint + file);
      const auto b = test::checkpoint_tensors(sim.checkpoint + file);
      ASSERT_EQ(a.size(), b.size());
      EXPECT_TRUE(std::any_of(a.begin(), a.end(), [](const auto& t) {
        return t.first.starts_with("adam_m.");
      })) << "the checkpoint must hold the optimizer state";
      for (const auto& [name, bytes] : a)
        EXPECT_EQ(b.at(name), bytes) << precision << " ZeRO-" << stage << ": " << name;
    }
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace

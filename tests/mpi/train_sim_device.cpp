// Data parallelism on the simulated device (issues #25, #27): N ranks, each with its model on a
// sim:0 stream and in that device's memory, train the CPU data-parallel run's model bit for bit
// (losses, gradient norms, the checkpoint's weights and Adam state), in f32 and in bf16 (whose
// fp32 gradients travel as bf16: the communication_data_type staging converts on the stream),
// dropout 0.1 and accumulation. What it holds: each chunk's all-reduce reads the gradients only
// after the stream has written them, and the stream reads the reduced ones only after the
// collective is done (policy_stack.cpp, GradReduction).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint_tensors.h"
#include "dp_runs.h"
#include "mpi_test.h"
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
  for (const std::string precision : {"f32", "bf16"}) {
    auto config = [&](const std::string& device) {
      std::vector<std::string> extra = {"device=" + device, "gradient_clipping=0.5"};
      if (precision == "bf16") extra.push_back("bf16.enabled=true");
      return dp_config(shard, dir + "/" + precision + "_" + device, kMicro, 2, 8, 0.1f, extra);
    };
    const SimDpRun cpu = sim_dp_run(config("cpu"), world);
    const SimDpRun sim = sim_dp_run(config("sim"), world);
    ASSERT_EQ(sim.curve.size(), cpu.curve.size());
    for (size_t i = 0; i < cpu.curve.size(); ++i)
      EXPECT_EQ(std::memcmp(&sim.curve[i], &cpu.curve[i], sizeof(float)), 0)
          << precision << ", rank " << world->rank() << ": entry " << i
          << " (loss, norm per step; validation last): " << sim.curve[i] << " on sim, "
          << cpu.curve[i] << " on the CPU";
    if (world->rank() == 0) {
      const auto a = test::checkpoint_tensors(cpu.checkpoint);
      const auto b = test::checkpoint_tensors(sim.checkpoint);
      ASSERT_EQ(a.size(), b.size());
      EXPECT_TRUE(a.count("adam_m.wte"));
      for (const auto& [name, bytes] : a) EXPECT_EQ(b.at(name), bytes) << precision << ": " << name;
    }
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace

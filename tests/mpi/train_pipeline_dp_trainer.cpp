// `tide train` with data parallelism inside the pipeline stages: the world as pp = 2 stages x
// dp = world/2 replicas (np 4: 2 x 2, np 8: 2 x 4; np 2 is dp = 1; odd worlds skip), dropout
// 0.1, m = 4 micro-batches per replica, so the global batch is micro x m x dp sequences.
//
//   * ZeRO 0, 1 (the optimizer state sliced over the replicas) and 2 (the gradients too; bitwise
//     ZeRO-1's training) train like the single-rank
//     Trainer on the same global batch (accum m x dp): losses (the replicas' mean) to 1e-5,
//     every stage's parameters to 1e-4; the validation loss equals the single-rank evaluate()
//     to the bit at step 0 and to 1e-5 after training. zb-auto (measured first step, the
//     replicas agreeing on replica 0's figures) and interleaved (two chunks per stage) train
//     bitwise like 1F1B under ZeRO-1.
//   * ZeRO-3, ZeRO-Offload with the delayed update and offload_param, and placement.policy=auto
//     (the policy stack on every stage's store): ZeRO-3 trains ZeRO-1's model to the bit, auto
//     placement ZeRO-0's, offload with DPU the single-rank DPU Trainer's to 1e-5; ZeRO-3 and
//     offload checkpoints resume at the same pp x dp to the bit.
//   * A checkpoint written mid-run (ZeRO-1/2: every (stage, replica) writes its slices) resumed
//     at the same pp x dp continues to the bit (losses and parameters); resumed on one rank
//     (pp = 1, accum m x dp) it continues to 1e-5.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>

#include "dp_runs.h"
#include "mpi_test.h"
#include "tide/checkpoint/sharded_checkpoint.h"

using namespace tide;
using namespace tide::dp_runs;

namespace {

constexpr int kLayers = 4, kPP = 2, kM = 4, kRunSteps = 6;

TrainConfig config(const std::string& shard, const std::string& dir, int stages, int accum,
                   int zero, const std::string& schedule, std::vector<std::string> extra = {}) {
  std::vector<std::string> o = {"data.train=" + shard,
                                "data.val=" + shard,
                                "out_dir=" + dir,
                                "model.vocab_size=" + std::to_string(kVocab),
                                fmt::format("model.n_layer={}", kLayers),
                                "model.n_head=2",
                                "model.n_embd=16",
                                "seq_len=" + std::to_string(kSeqLen),
                                "train_micro_batch_size_per_gpu=" + std::to_string(kMicro),
                                "gradient_accumulation_steps=" + std::to_string(accum),
                                "train_steps=" + std::to_string(kRunSteps),
                                "model.dropout=0.1",
                                "eval.sequences=5",
                                "data.shuffle=true",
                                "optimizer.params.lr=3e-3",
                                "threads=1",
                                "log.progress=false",
                                fmt::format("zero_optimization.stage={}", zero),
                                "pipeline.stages=" + std::to_string(stages),
                                "pipeline.schedule=" + schedule};
  o.insert(o.end(), extra.begin(), extra.end());
  return load_train_config("", o);
}

struct TrainerRun {
  std::vector<float> losses;
  float val0 = 0, val_end = 0;
  std::map<std::string, std::vector<float>> params;  // this rank's tensors by name
};

// `params`: record this rank's parameters (not under ZeRO-3, whose stores hold slices).
TrainerRun train_run(Trainer& t, int64_t steps, bool params = true) {
  TrainerRun r;
  r.val0 = t.evaluate();
  for (int64_t s = 0; s < steps; ++s) r.losses.push_back(t.train_step().loss);
  r.val_end = t.evaluate();
  if (!params) return r;
  std::vector<GPT*> models;
  for (const auto& c : t.runner().chunks()) models.push_back(c.get());
  for (GPT* m : models) {
    const ChunkLayout& lay = m->store().layout();
    for (int id = 0; id < lay.num_tensors(); ++id) {
      const Tensor x = m->store().tensor(ChunkKind::PARAM, id);
      r.params[lay.slot(id).name].assign(x.f32(), x.f32() + x.numel());
    }
  }
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

}  // namespace

TEST(PipelineDataParallelTrainer, MatchesTheSingleRankTrainerAndResumesBitwise) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  if (world->size() % kPP != 0) GTEST_SKIP() << "pp = 2 needs an even world";
  const int dp = world->size() / kPP;
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);

  TrainerRun base;  // every rank runs the single-rank Trainer on the global batch (tiny model)
  {
    Trainer t(config(shard, fmt::format("{}/base{}", dir, world->rank()), 1, kM * dp, 0, "1f1b"));
    base = train_run(t, kRunSteps);
  }
  EXPECT_LT(base.losses.back(), base.losses.front() - 0.05f) << "training must move";
  std::map<int, TrainerRun> runs;  // by ZeRO stage
  for (int zero : {0, 1, 2}) {
    Trainer t(config(shard, fmt::format("{}/z{}", dir, zero), kPP, kM, zero, "1f1b"), world);
    const TrainerRun r = runs[zero] = train_run(t, kRunSteps);
    EXPECT_EQ(r.val0, base.val0) << "ZeRO-" << zero << ": validation at step 0 not bitwise";
    EXPECT_NEAR(r.val_end, base.val_end, 1e-5) << "ZeRO-" << zero;
    for (int s = 0; s < kRunSteps; ++s)
      EXPECT_NEAR(r.losses[s], base.losses[s], 1e-5) << "ZeRO-" << zero << ", step " << s + 1;
    for (const auto& [tensor, v] : r.params) {
      const std::vector<float>& want = base.params.at(tensor == "lm_head.weight" ? "wte" : tensor);
      ASSERT_EQ(v.size(), want.size()) << tensor;
      double diff = 0, norm = 0;
      for (size_t i = 0; i < v.size(); ++i) {
        diff += (double(v[i]) - want[i]) * (double(v[i]) - want[i]);
        norm += double(want[i]) * want[i];
      }
      EXPECT_LE(std::sqrt(diff), 1e-4 * std::max(1.0, std::sqrt(norm)))
          << "ZeRO-" << zero << ", rank " << world->rank() << ", " << tensor;
    }
  }
  // ZeRO-2 shares ZeRO-1's gradient path: the same bits.
  EXPECT_TRUE(same_bits(runs[2].losses, runs[1].losses)) << "ZeRO-2 differs from ZeRO-1";
  EXPECT_EQ(runs[2].val_end, runs[1].val_end);
  for (const auto& [tensor, v] : runs[2].params)
    EXPECT_TRUE(same_bits(v, runs[1].params.at(tensor))) << "ZeRO-2, " << tensor;
  {  // zb-auto from the measured first step: bitwise like 1F1B
    Trainer t(config(shard, dir + "/auto", kPP, kM, 1, "zb-auto"), world);
    const TrainerRun r = train_run(t, kRunSteps);
    EXPECT_EQ(t.engine().schedule().name, "zb-auto");
    EXPECT_TRUE(same_bits(r.losses, runs[1].losses)) << "zb-auto differs from 1f1b";
    for (const auto& [tensor, v] : r.params)
      EXPECT_TRUE(same_bits(v, runs[1].params.at(tensor))) << "zb-auto, " << tensor;
  }

  {  // two model chunks per stage (interleaved, v = 2) under ZeRO-1: bitwise like 1F1B
    Trainer t(
        config(shard, dir + "/inter", kPP, kM, 1, "interleaved", {"pipeline.virtual_stages=2"}),
        world);
    const TrainerRun r = train_run(t, kRunSteps);
    EXPECT_TRUE(same_bits(r.losses, runs[1].losses)) << "interleaved differs from 1f1b";
    EXPECT_EQ(r.val_end, runs[1].val_end);
  }

  // Checkpoints at step 3, resumed at the same pp x dp: bitwise.
  for (int zero : {0, 1, 2}) {
    const std::string out = fmt::format("{}/mid{}", dir, zero);
    const std::string ck = out + "/model_step3.ckpt";
    {
      Trainer t(config(shard, out, kPP, kM, zero, "1f1b"), world);
      for (int s = 0; s < kRunSteps / 2; ++s) t.train_step();
      EXPECT_EQ(t.save("model_step3.ckpt"), ck);
    }
    ASSERT_TRUE(is_sharded_checkpoint(ck));
    EXPECT_EQ(read_sharded_checkpoint_info(ck).world_size, zero >= 1 ? kPP * dp : kPP);
    Trainer t(config(shard, out, kPP, kM, zero, "1f1b", {"checkpoint.resume=" + ck}), world);
    ASSERT_EQ(t.step(), kRunSteps / 2);
    const TrainerRun r = train_run(t, kRunSteps / 2);
    const TrainerRun& full = runs[zero];
    EXPECT_TRUE(same_bits(
        r.losses, std::vector<float>(full.losses.begin() + kRunSteps / 2, full.losses.end())))
        << "ZeRO-" << zero << ": resume at pp x dp is not bitwise";
    for (const auto& [tensor, v] : r.params)
      EXPECT_TRUE(same_bits(v, full.params.at(tensor))) << "ZeRO-" << zero << " resumed " << tensor;
    if (zero == 1) {  // the ZeRO-1 pieces read by a one-rank run (pp = 1, the global batch)
      Trainer one(config(shard, fmt::format("{}/one{}", dir, world->rank()), 1, kM * dp, 0, "1f1b",
                         {"checkpoint.resume=" + ck}));
      const TrainerRun o = train_run(one, kRunSteps / 2);
      for (int s = 0; s < kRunSteps / 2; ++s)
        EXPECT_NEAR(o.losses[s], full.losses[kRunSteps / 2 + s], 1e-5) << "pp 1, step " << s + 4;
    }
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

// The policy stack under pp through `tide train`'s keys.
TEST(PipelineDataParallelTrainer, ZeroThreeOffloadAndAutoPlacementTrainAndResume) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  if (world->size() % kPP != 0) GTEST_SKIP() << "pp = 2 needs an even world";
  const int dp = world->size() / kPP;
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);
  const std::vector<std::string> dpu = {"zero_optimization.offload_optimizer.device=cpu",
                                        "zero_optimization.offload_optimizer.delayed_update=true",
                                        "zero_optimization.offload_optimizer.dpu_warmup_steps=2"};
  std::vector<std::string> dpu_param = dpu;
  dpu_param.push_back("zero_optimization.offload_param.device=cpu");
  const std::vector<std::string> placed = {"placement.policy=auto",
                                           "placement.device_memory_limit=67108864"};
  auto run = [&](const std::string& name, int zero, const std::vector<std::string>& extra,
                 const std::string& schedule = "1f1b") {
    Trainer t(config(shard, dir + "/" + name, kPP, kM, zero, schedule, extra), world);
    return train_run(t, kRunSteps, /*params=*/zero < 3);
  };
  const TrainerRun z0 = run("z0", 0, {}), z1 = run("z1", 1, {});
  const TrainerRun z3 = run("z3", 3, {});
  EXPECT_TRUE(same_bits(z3.losses, z1.losses)) << "ZeRO-3 differs from ZeRO-1";
  EXPECT_EQ(z3.val_end, z1.val_end);
  // zb-auto switches schedules after its measured first step: ZeRO-3 prefetches along the new
  // schedule's accesses from then on.
  const TrainerRun z3_auto = run("z3_auto", 3, {}, "zb-auto");
  EXPECT_TRUE(same_bits(z3_auto.losses, z1.losses)) << "ZeRO-3 under zb-auto differs";
  const TrainerRun a = run("auto", 0, placed);
  EXPECT_TRUE(same_bits(a.losses, z0.losses)) << "auto placement differs from policy=device";
  for (const auto& [tensor, v] : a.params)
    EXPECT_TRUE(same_bits(v, z0.params.at(tensor))) << "auto placement, " << tensor;
  TrainerRun base;  // the single-rank Trainer with the same delayed update
  {
    Trainer t(
        config(shard, fmt::format("{}/base{}", dir, world->rank()), 1, kM * dp, 1, "1f1b", dpu));
    base = train_run(t, kRunSteps);
  }
  const TrainerRun off = run("dpu", 2, dpu);
  for (int s = 0; s < kRunSteps; ++s)
    EXPECT_NEAR(off.losses[s], base.losses[s], 1e-5) << "offload with DPU, step " << s + 1;
  EXPECT_NEAR(off.val_end, base.val_end, 1e-5);

  // Checkpoints at step 3, resumed at the same pp x dp: the run that wrote the checkpoint and
  // went on, to the bit. (Saving lands DPU's update in flight, so a run that never saves
  // differs: the resumed run continues the saved one.)
  struct Case {
    std::string name;
    int zero;
    std::vector<std::string> extra;
  };
  for (const Case& c : {Case{"z3", 3, {}}, Case{"dpu", 2, dpu}, Case{"dpu_param", 3, dpu_param}}) {
    const std::string out = dir + "/mid_" + c.name, ck = out + "/model_step3.ckpt";
    TrainerRun saved;
    {
      Trainer t(config(shard, out, kPP, kM, c.zero, "1f1b", c.extra), world);
      for (int s = 0; s < kRunSteps / 2; ++s) t.train_step();
      t.save("model_step3.ckpt");
      saved = train_run(t, kRunSteps / 2, /*params=*/false);
    }
    std::vector<std::string> extra = c.extra;
    extra.push_back("checkpoint.resume=" + ck);
    Trainer t(config(shard, out, kPP, kM, c.zero, "1f1b", extra), world);
    const TrainerRun r = train_run(t, kRunSteps / 2, /*params=*/false);
    EXPECT_TRUE(same_bits(r.losses, saved.losses)) << c.name << ": resume at pp x dp not bitwise";
    EXPECT_EQ(r.val_end, saved.val_end) << c.name;
  }
  // ZeRO-3's checkpoint holds the model of the run that never saved (no update in flight).
  {
    Trainer t(config(shard, dir + "/mid_z3", kPP, kM, 3, "1f1b",
                     {"checkpoint.resume=" + dir + "/mid_z3/model_step3.ckpt"}),
              world);
    const TrainerRun r = train_run(t, kRunSteps / 2, /*params=*/false);
    EXPECT_TRUE(same_bits(r.losses,
                          std::vector<float>(z3.losses.begin() + kRunSteps / 2, z3.losses.end())));
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

// `tide train` with pipeline.stages = p = world size (the Trainer, its data loader, validation
// and checkpoints; p = 2, 3, 4 where 12 layers divide), dropout 0.1, m = 2p micro-batches:
//
//   * 1F1B, ZB-H1 and ZB-V train like the single-rank Trainer on the same global batch (accum
//     m): losses to 1e-5, every stage's final parameters to 1e-4 (not bitwise: the tied
//     embedding's gradient is summed from two copies; see train_pipeline.cpp), and bitwise like
//     each other. The validation loss equals the single-rank evaluate() to the bit at step 0
//     (the same weights, the same ops) and to 1e-5 after training.
//   * Interleaved (v = 2) too, where 12 layers divide over 2p virtual stages.
//   * init_from a single file and from a pipeline checkpoint: the validation loss of those
//     weights, to the bit.
//   * A checkpoint written mid-run by every stage, resumed under the same pp, continues to the
//     bit (losses and parameters); resumed on one rank (pp = 1: resharded by tensor name), it
//     continues with the pipeline run's losses to 1e-5, and at p = 4 resumed as 2 stages too.
//   * zb-auto with pipeline.memory_limit = p + 1 through the Trainer (built from the measured
//     first step: its losses equal 1F1B's bitwise like every schedule's).
//   * zb-auto through Trainer::run: the engine starts on 1F1B, switches to the generated
//     schedule after the measured first step, and metrics.jsonl holds one "pipeline_measured"
//     record with every stage's positive T_F/T_B/T_W and the simulated bubble; under a memory
//     limit below p (p >= 3) the warm-up step keeps to it (measured peak of its arenas).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "dp_runs.h"
#include "mpi_test.h"
#include "tide/checkpoint/sharded_checkpoint.h"

using namespace tide;
using namespace tide::dp_runs;

namespace {

constexpr int kLayers = 12, kRunSteps = 12;

TrainConfig pp_config(const std::string& shard, const std::string& dir, int stages, int accum,
                      const std::string& schedule, std::vector<std::string> extra = {}) {
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
                                "eval.sequences=7",
                                "data.shuffle=true",
                                "optimizer.params.lr=3e-3",
                                "threads=1",
                                "log.progress=false",
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

void record(Trainer& t, TrainerRun& r) {
  std::vector<GPT*> models;
  for (const auto& c : t.runner().chunks()) models.push_back(c.get());
  for (GPT* m : models) {
    const ChunkLayout& lay = m->store().layout();
    for (int id = 0; id < lay.num_tensors(); ++id) {
      const Tensor x = m->store().tensor(ChunkKind::PARAM, id);
      r.params[lay.slot(id).name].assign(x.f32(), x.f32() + x.numel());
    }
  }
}

TrainerRun train_run(Trainer& t, int64_t steps) {
  TrainerRun r;
  r.val0 = t.evaluate();
  for (int64_t s = 0; s < steps; ++s) r.losses.push_back(t.train_step().loss);
  r.val_end = t.evaluate();
  record(t, r);
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

}  // namespace

TEST(PipelineTrainer, SchedulesMatchTheSingleRankTrainerAndResumeBitwise) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  const int p = world->size(), m = 2 * p;
  if (kLayers % p != 0) GTEST_SKIP() << kLayers << " layers do not divide over " << p << " stages";
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);

  // The single-rank Trainer on the same global batch (every rank runs it: a tiny model).
  TrainerRun base;
  const std::string base_dir = fmt::format("{}/base{}", dir, world->rank());
  {
    Trainer t(pp_config(shard, base_dir, 1, m, "1f1b"));
    base = train_run(t, kRunSteps);
    t.save();  // a single file: for init_from below
  }
  std::vector<std::string> schedules = {"1f1b", "zb-h1", "zb-auto"};
  if (kLayers % (2 * p) == 0) {
    schedules.push_back("zb-v");
    schedules.push_back("interleaved");
  }
  std::vector<TrainerRun> runs;
  for (const std::string& name : schedules) {
    std::vector<std::string> extra;
    if (name == "interleaved") extra.push_back("pipeline.virtual_stages=2");
    if (name == "zb-auto") extra.push_back(fmt::format("pipeline.memory_limit={}", p + 1));
    Trainer t(pp_config(shard, dir + "/" + name, p, m, name, extra), world);
    runs.push_back(train_run(t, kRunSteps));
    const TrainerRun& r = runs.back();
    EXPECT_EQ(r.val0, base.val0) << name << ": validation loss at step 0 not bitwise";
    EXPECT_NEAR(r.val_end, base.val_end, 1e-5) << name;
    for (int s = 0; s < kRunSteps; ++s)
      EXPECT_NEAR(r.losses[s], base.losses[s], 1e-5) << name << ", step " << s + 1;
    for (const auto& [tensor, v] : r.params) {
      const std::vector<float>& want = base.params.at(tensor == "lm_head.weight" ? "wte" : tensor);
      ASSERT_EQ(v.size(), want.size()) << tensor;
      double diff = 0, norm = 0;
      for (size_t i = 0; i < v.size(); ++i) {
        diff += (double(v[i]) - want[i]) * (double(v[i]) - want[i]);
        norm += double(want[i]) * want[i];
      }
      EXPECT_LE(std::sqrt(diff), 1e-4 * std::max(1.0, std::sqrt(norm)))
          << name << ", stage " << world->rank() << ", " << tensor;
    }
    EXPECT_TRUE(same_bits(r.losses, runs[0].losses)) << name << " differs from 1f1b";
    // (ZB-V places other layers on this rank: compare the tensors both runs hold here.)
    for (const auto& [tensor, v] : r.params)
      if (runs[0].params.count(tensor))
        EXPECT_TRUE(same_bits(v, runs[0].params.at(tensor))) << name << ", " << tensor;
  }
  EXPECT_LT(base.losses.back(), base.losses.front() - 0.1f);

  // Checkpoint at step 6 (every stage writes its shard), resumed under the same pp.
  const std::string ck = dir + "/mid/model_step6.ckpt";
  TrainerRun resumed_same, resumed_one;
  {
    Trainer t(pp_config(shard, dir + "/mid", p, m, "zb-h1"), world);
    for (int s = 0; s < kRunSteps / 2; ++s) t.train_step();
    EXPECT_EQ(t.save("model_step6.ckpt"), ck);
  }
  ASSERT_TRUE(is_sharded_checkpoint(ck));
  EXPECT_EQ(read_sharded_checkpoint_info(ck).world_size, p);
  {
    Trainer t(pp_config(shard, dir + "/mid", p, m, "zb-h1", {"checkpoint.resume=" + ck}), world);
    ASSERT_EQ(t.step(), kRunSteps / 2);
    resumed_same = train_run(t, kRunSteps / 2);
  }
  const TrainerRun& full = runs[1];  // zb-h1, 12 steps uninterrupted
  EXPECT_TRUE(same_bits(resumed_same.losses,
                        std::vector<float>(full.losses.begin() + kRunSteps / 2, full.losses.end())))
      << "resume under the same pp is not bitwise";
  for (const auto& [tensor, v] : resumed_same.params)
    EXPECT_TRUE(same_bits(v, full.params.at(tensor))) << "resumed " << tensor;
  // Resumed on one rank (pp = 1): the same run, to float tolerance.
  {
    Trainer t(pp_config(shard, dir + "/one", 1, m, "1f1b", {"checkpoint.resume=" + ck}));
    resumed_one = train_run(t, kRunSteps / 2);
  }
  for (int s = 0; s < kRunSteps / 2; ++s)
    EXPECT_NEAR(resumed_one.losses[s], full.losses[kRunSteps / 2 + s], 1e-5) << "step " << s + 7;
  // Resharded to another pp: at p = 4, each half of the ranks resumes the 4-stage checkpoint as
  // 2 stages (each stage loads its layers from the shards that hold them).
  if (p == 4) {
    std::shared_ptr<ProcessGroup> half = world->split(world->rank() / 2, world->rank());
    Trainer t(pp_config(shard, fmt::format("{}/half{}", dir, world->rank() / 2), 2, m, "1f1b",
                        {"checkpoint.resume=" + ck}),
              half);
    const TrainerRun r = train_run(t, kRunSteps / 2);
    for (int s = 0; s < kRunSteps / 2; ++s)
      EXPECT_NEAR(r.losses[s], full.losses[kRunSteps / 2 + s], 1e-5) << "pp 4 -> 2, step " << s + 7;
  }
  // init_from under pp: the stages take their tensors (the last stage's lm_head from wte) from a
  // single file (the single-rank run's end) and from the pipeline's own checkpoint; the
  // validation loss is then the one of those weights, to the bit.
  {
    Trainer t(
        pp_config(shard, dir + "/init", p, m, "1f1b", {"init_from=" + dir + "/base0/model.ckpt"}),
        world);
    EXPECT_EQ(t.evaluate(), base.val_end) << "init_from a single file";
  }
  {
    Trainer t(pp_config(shard, dir + "/init", p, m, "zb-h1", {"init_from=" + ck}), world);
    EXPECT_EQ(t.evaluate(), resumed_same.val0) << "init_from a pipeline checkpoint";
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

TEST(PipelineTrainer, ZbAutoIsBuiltFromTheMeasuredFirstStep) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  const int p = world->size(), m = 2 * p;
  if (kLayers % p != 0) GTEST_SKIP() << kLayers << " layers do not divide over " << p << " stages";
  const std::string dir = shared_temp_dir(*world);
  const std::string shard = write_shared_shard(*world, dir);
  {
    Trainer t(pp_config(shard, dir + "/auto", p, m, "zb-auto", {"train_steps=3", "log.interval=1"}),
              world);
    EXPECT_EQ(t.engine().schedule().name, "1f1b") << "the warm-up step runs 1F1B";
    t.run();
    EXPECT_EQ(t.engine().schedule().name, "zb-auto");
  }
  if (world->rank() == 0) {
    std::ifstream f(dir + "/auto/metrics.jsonl");
    std::string line;
    int records = 0;
    while (std::getline(f, line)) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (!j.contains("pipeline_measured")) continue;
      ++records;
      const nlohmann::json& pm = j["pipeline_measured"];
      EXPECT_EQ(j["step"].get<int>(), 1);
      EXPECT_EQ(pm["schedule"].get<std::string>(), "zb-auto");
      for (const char* key : {"t_f", "t_b", "t_w"}) {
        ASSERT_EQ(pm[key].size(), static_cast<size_t>(p)) << key;
        for (const auto& v : pm[key]) EXPECT_GT(v.get<double>(), 0) << key;
      }
      EXPECT_GE(pm["t_comm"].get<double>(), 0);
      EXPECT_GT(pm["simulated_makespan_s"].get<double>(), 0);
      const double rate = pm["simulated_bubble_rate"].get<double>();
      EXPECT_TRUE(rate >= 0 && rate < 1) << rate;
    }
    EXPECT_EQ(records, 1) << "one pipeline_measured record in metrics.jsonl";
  }
  if (p >= 3) {
    // A memory limit below 1F1B's peak (p M_B): the warm-up step keeps to it too (it runs the
    // limit's zb-auto from unit costs), measured from the engine's arenas.
    Trainer t(pp_config(shard, dir + "/tight", p, m, "zb-auto",
                        {fmt::format("pipeline.memory_limit={}", p - 1)}),
              world);
    t.train_step();
    const PipelineEngine::ActivationMemory& mem = t.engine().activation_memory();
    ASSERT_GT(mem.micro_batch_bytes, 0u);
    EXPECT_LE(mem.peak_bytes, size_t(p - 1) * mem.micro_batch_bytes)
        << "the warm-up step held more micro-batches than pipeline.memory_limit=" << p - 1;
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

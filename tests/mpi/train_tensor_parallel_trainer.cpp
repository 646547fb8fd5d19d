// `tide train` with tensor_parallel.size = t (the Trainer, as the command builds it): the world
// as a t x dp mesh, dropout 0.1, 20 steps, against the single-rank Trainer on the same global
// batch (micro x accum x dp sequences): losses and gradient norms to 1e-5 relative, the
// validation loss to 1e-5, and the final parameters read back from the checkpoint the run
// writes (Trainer::save: tp shards and ZeRO slices gathered into one whole-model file) to 1e-4
// (dp_runs::expect_equivalent). Per world size:
//
//   np2: t = 2 x {SP off, on} x policy {none, selective, full}, and P_a, P_a + CPU
//        checkpointing (full policy); a checkpoint at step 10 resumed at t = 2 continues to the
//        same losses and parameters bitwise.
//   np3: t = 3, SP, selective.
//   np4: t x dp = 2 x 2 with accumulation 2 at ZeRO stages 0-3 (each with another policy / SP /
//        P_a), resumed bitwise from ZeRO-2 and ZeRO-3 checkpoints; t = 4 with SP and with P_a +
//        CPU.
//   np8: t x dp = 2 x 4, ZeRO-3, SP, selective.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "dp_runs.h"
#include "error_of.h"
#include "mpi_test.h"
#include "tide/checkpoint/checkpoint.h"
#include "tide/checkpoint/sharded_checkpoint.h"

using namespace tide;
using namespace tide::dp_runs;

namespace {

constexpr int kT = 24, kV = 64, kB = 2, kRunSteps = 20;

// Rank 0 writes 64 sequences of kT+1 tokens (next = 5 prev + 3 mod V, 25% random tokens).
std::string write_shard(ProcessGroup& world, const std::string& dir) {
  const std::string path = dir + "/train.bin";
  if (world.rank() == 0) {
    std::vector<uint16_t> tokens(64 * kT + 1);
    const PhiloxStream rng{11, 1};
    uint32_t prev = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
      prev = rng.uint(2 * i) % 4 == 0 ? rng.uint(2 * i + 1) % kV : (5 * prev + 3) % kV;
      tokens[i] = static_cast<uint16_t>(prev);
    }
    write_token_shard(path, std::span<const uint16_t>(tokens));
  }
  world.barrier();
  return path;
}

// L = 2, 12 heads of 4 (C = 48: t = 2, 3, 4 divide the heads; T = 24 divides too).
TrainConfig config(const std::string& shard, const std::string& out, int accum,
                   std::vector<std::string> extra, int64_t steps = kRunSteps) {
  std::vector<std::string> o = {"data.train=" + shard,
                                "data.val=" + shard,
                                "out_dir=" + out,
                                "model.vocab_size=" + std::to_string(kV),
                                "model.n_layer=2",
                                "model.n_head=12",
                                "model.n_embd=48",
                                "seq_len=" + std::to_string(kT),
                                "train_micro_batch_size_per_gpu=" + std::to_string(kB),
                                "gradient_accumulation_steps=" + std::to_string(accum),
                                "train_steps=" + std::to_string(steps),
                                "model.dropout=0.1",
                                "eval.sequences=5",
                                "data.shuffle=true",
                                "optimizer.params.lr=3e-3",
                                "threads=1",
                                "log.progress=false"};
  o.insert(o.end(), extra.begin(), extra.end());
  return load_train_config("", o);
}

struct Case {
  int tp, zero;
  std::vector<std::string> keys;
};

std::string describe(const Case& c, int dp) {
  std::string s = fmt::format("tp {} x dp {}, ZeRO-{}", c.tp, dp, c.zero);
  for (const std::string& k : c.keys) s += ", " + k;
  return s;
}

std::vector<std::string> keys_of(const Case& c) {
  std::vector<std::string> k = {fmt::format("tensor_parallel.size={}", c.tp),
                                fmt::format("zero_optimization.stage={}", c.zero)};
  k.insert(k.end(), c.keys.begin(), c.keys.end());
  return k;
}

const std::string kSP = "tensor_parallel.sequence_parallel=true";
const std::string kPA = "activation_checkpointing.partition_activations=true";
const std::string kCPU = "activation_checkpointing.cpu_checkpointing=true";
std::string policy(const char* p) {
  return fmt::format("activation_checkpointing.policy={}", p);
}

}  // namespace

TEST(TensorParallelTrainer, MatchesTheSingleRankTrainerAndResumes) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  const int n = world->size();
  std::vector<Case> cases;
  int accum = 1;
  if (n == 2) {
    for (bool sp : {false, true})
      for (const char* p : {"none", "selective", "full"}) {
        Case c{2, 0, {policy(p)}};
        if (sp) c.keys.push_back(kSP);
        cases.push_back(c);
      }
    cases.push_back({2, 0, {policy("full"), kPA}});
    cases.push_back({2, 0, {policy("full"), kPA, kCPU}});
  } else if (n == 3) {
    cases.push_back({3, 0, {policy("selective"), kSP}});
  } else if (n == 4) {
    accum = 2;  // tp x dp = 2 x 2 with accumulation 2; tp = 4 too (dp 1, same accumulation)
    cases.push_back({2, 0, {policy("none")}});
    cases.push_back({2, 1, {policy("selective"), kSP}});
    cases.push_back({2, 2, {policy("full"), kPA}});
    cases.push_back({2, 3, {policy("full"), kSP}});
    cases.push_back({4, 0, {policy("selective"), kSP}});
    cases.push_back({4, 1, {policy("full"), kPA, kCPU}});
  } else if (n == 8) {
    cases.push_back({2, 3, {policy("selective"), kSP}});
  } else {
    GTEST_SKIP() << "np 2, 3, 4 and 8";
  }
  const std::string dir = dp_runs::shared_temp_dir(*world);
  const std::string shard = write_shard(*world, dir);

  // The single-rank Trainer on each global batch size that occurs (every rank runs it).
  std::map<int, CheckpointedRun> base;  // by dp
  for (const Case& c : cases) {
    const int dp = n / c.tp;
    if (base.contains(dp)) continue;
    Trainer t(config(shard, fmt::format("{}/base{}_{}", dir, dp, world->rank()), accum * dp, {}));
    base[dp] = train_and_save(t, kRunSteps, "model.ckpt");
    EXPECT_LT(base[dp].r.losses.back(), base[dp].r.losses.front() - 0.05f) << "training must move";
  }
  std::vector<CheckpointedRun> runs;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const int dp = n / c.tp;
    const std::string what = describe(c, dp);
    Trainer t(config(shard, fmt::format("{}/run{}", dir, i), accum, keys_of(c)), world);
    EXPECT_EQ(t.model().tp(), c.tp);
    EXPECT_EQ(t.model().sequence_parallel(),
              std::find(c.keys.begin(), c.keys.end(), kSP) != c.keys.end())
        << what;
    EXPECT_EQ(t.model().partition_activations(),
              std::find(c.keys.begin(), c.keys.end(), kPA) != c.keys.end())
        << what;
    runs.push_back(train_and_save(t, kRunSteps, "model.ckpt"));
    const CheckpointedRun& r = runs.back();
    expect_equivalent(r.r, base.at(dp).r, what.c_str());
    EXPECT_NEAR(r.val, base.at(dp).val, 1e-5 * base.at(dp).val) << what << ": validation loss";
  }

  // A mid-run checkpoint resumed at the same t x dp: the same losses and parameters, bitwise.
  // np2: tp 2 with SP (selective); np4: tp 2 x dp 2 under ZeRO-2 and ZeRO-3 (the slices gathered
  // into the file, each rank's read back: Adam moments at ZeRO-2, parameters too at ZeRO-3).
  std::vector<size_t> resumed;
  if (n == 2) resumed = {4};
  if (n == 4) resumed = {2, 3};
  for (size_t i : resumed) {
    const Case& c = cases[i];
    const int dp = n / c.tp;
    const std::string out = fmt::format("{}/mid{}", dir, i), what = describe(c, dp);
    {
      Trainer t(config(shard, out, accum, keys_of(c)), world);
      train_and_save(t, kRunSteps / 2, "model_step10.ckpt");
    }
    const std::string ck = out + "/model_step10.ckpt";
    std::vector<std::string> keys = keys_of(c);
    keys.push_back("checkpoint.resume=" + ck);
    Trainer t(config(shard, out, accum, keys), world);
    ASSERT_EQ(t.step(), kRunSteps / 2);
    const CheckpointedRun r = train_and_save(t, kRunSteps / 2, "model.ckpt");
    const CheckpointedRun& full = runs[i];
    for (int s = 0; s < kRunSteps / 2; ++s)
      EXPECT_EQ(r.r.losses[s], full.r.losses[kRunSteps / 2 + s])
          << what << ", resumed step " << kRunSteps / 2 + s + 1;
    for (size_t id = 0; id < r.r.params.size(); ++id)
      EXPECT_EQ(r.r.params[id], full.r.params[id]) << what << ", resumed: " << r.r.names[id];
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

// What a tensor-parallel run reads: a single-file checkpoint starts it (init_from: the same
// validation loss as the run that wrote it), and so does a sharded directory (a ZeRO-1 run's), for
// checkpoint.resume and init_from alike.
TEST(TensorParallelTrainer, ReadsSingleFilesAndShardedDirectories) {
  std::shared_ptr<ProcessGroup> world = mpi_test::world_ptr();
  if (world->size() != 2) GTEST_SKIP() << "tp 2 on 2 ranks";
  const std::string dir = dp_runs::shared_temp_dir(*world);
  const std::string shard = write_shard(*world, dir);
  const std::vector<std::string> tp2 = {"tensor_parallel.size=2"};
  std::string sharded, file;
  float val = 0, z_val = 0;
  {  // tp 1 x dp 2 at ZeRO-1: a sharded directory; tp 2: a whole-model file
    Trainer z(config(shard, dir + "/z1", 1, {"zero_optimization.stage=1"}, 2), world);
    z.train_step();
    sharded = z.save();
    z_val = z.evaluate();
    Trainer t(config(shard, dir + "/tp", 1, tp2, 2), world);
    t.train_step();
    file = t.save();
    val = t.evaluate();
  }
  ASSERT_TRUE(is_sharded_checkpoint(sharded));
  ASSERT_FALSE(is_sharded_checkpoint(file));
  {
    std::vector<std::string> keys = tp2;
    keys.push_back("init_from=" + file);
    Trainer t(config(shard, dir + "/init", 1, keys, 2), world);
    EXPECT_NEAR(t.evaluate(), val, 1e-6 * val) << "init_from a tensor-parallel file";
  }
  // The sharded directory, read by tensor name into the tp shards (the same global batch:
  // accumulation 2 at dp 1).
  for (const char* key : {"checkpoint.resume", "init_from"}) {
    std::vector<std::string> keys = tp2;
    keys.push_back(fmt::format("{}={}", key, sharded));
    Trainer t(config(shard, dir + "/" + key, 2, keys, 2), world);
    EXPECT_EQ(t.step(), key == std::string("init_from") ? 0 : 1) << key;
    EXPECT_NEAR(t.evaluate(), z_val, 1e-5 * z_val) << key << " a ZeRO-1 sharded directory";
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}

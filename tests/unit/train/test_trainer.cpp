// The trainer end to end: against the JAX reference's AdamW run, bitwise reproducibility,
// checkpoints, and a clear error for every kind of bad input.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "../model/fixture.h"  // the JAX reference fixture, shared with the model tests
#include "error_of.h"
#include "test_files.h"
#include "tide/checkpoint/checkpoint.h"
#include "tide/data/shard.h"
#include "tide/train/trainer.h"

using namespace tide;
using tide::test::error_of;
using tide::test::temp_dir;
namespace fs = std::filesystem;

namespace {

// A shard of `n` tokens below `vocab`: a cycle of 13 with every fifth token random, so there
// is something to learn.
std::string write_shard(const std::string& dir, const std::string& name, int n, int vocab) {
  std::vector<uint16_t> tokens(n);
  PhiloxStream rng{17, 3};
  for (int i = 0; i < n; ++i)
    tokens[i] = static_cast<uint16_t>(i % 5 == 0 ? rng.uint(i) % vocab : (i % 13) * 3 % vocab);
  const std::string path = dir + "/" + name;
  write_token_shard(path, std::span<const uint16_t>(tokens));
  return path;
}

// A small trainable config over synthetic shards in `dir`.
std::vector<std::string> small_run(const std::string& dir) {
  return {"data.train=" + write_shard(dir, "train.bin", 4000, 50),
          "data.val=" + write_shard(dir, "val.bin", 1000, 50),
          "model.vocab_size=50",
          "model.n_layer=2",
          "model.n_head=2",
          "model.n_embd=16",
          "seq_len=8",
          "train_micro_batch_size_per_gpu=4",
          "train_steps=6",
          "out_dir=" + dir,
          "optimizer.params.lr=1e-2",
          "log.progress=false",
          "eval.sequences=8"};
}

}  // namespace

TEST(Trainer, AdamWRunMatchesJaxReference) {
  test::Fixture fx;
  const std::string dir = temp_dir("jax");
  auto overrides = small_run(dir);
  const auto& a = fx.j["adamw"];
  const std::vector<std::string> more = {
      fmt::format("model.vocab_size={}", fx.config.vocab_size),
      fmt::format("model.n_layer={}", fx.config.n_layer),
      fmt::format("model.n_head={}", fx.config.n_head),
      fmt::format("model.n_embd={}", fx.config.n_embd),
      fmt::format("model.max_seq_len={}", fx.config.max_seq_len),
      fmt::format("seq_len={}", fx.T),
      fmt::format("train_micro_batch_size_per_gpu={}", fx.B),
      "train_steps=10",
      fmt::format("optimizer.params.lr={}", a["lr"].get<double>()),
      fmt::format("optimizer.params.betas=[{},{}]", a["beta1"].get<double>(),
                  a["beta2"].get<double>()),
      fmt::format("optimizer.params.eps={}", a["eps"].get<double>()),
      fmt::format("optimizer.params.weight_decay={}", a["weight_decay"].get<double>()),
      fmt::format("gradient_clipping={}", a["grad_clip"].get<double>()),
      "scheduler.type=none"};  // a constant lr, as the reference (DeepSpeed: no scheduler)
  overrides.insert(overrides.end(), more.begin(), more.end());
  Trainer trainer(load_train_config("", overrides));
  // Load the reference's initial weights and feed its batches.
  const auto params = fx.tensors("params");
  const ChunkLayout& lay = trainer.model().store().layout();
  for (int id = 0; id < lay.num_tensors(); ++id) {
    const auto& v = params.at(lay.slot(id).name);
    std::memcpy(trainer.model().store().tensor(ChunkKind::PARAM, id).data, v.data(), v.size() * 4);
  }
  trainer.batch_source = [&](int64_t step, int, int32_t* in, int32_t* tgt) {
    fx.batch(static_cast<int>(step), in, tgt);
  };
  for (int s = 0; s < 10; ++s) {
    const StepStats st = trainer.train_step();
    const double ref = fx.j["losses"][s].get<double>();
    EXPECT_NEAR(st.loss, ref, 1e-4 * std::abs(ref)) << "step " << s;
    const double ref_norm = fx.j["grad_norms"][s].get<double>();
    EXPECT_NEAR(st.grad_norm, ref_norm, 1e-4 * ref_norm) << "step " << s;
  }
  // Final parameters: Adam's m/(sqrt(v)+eps) magnifies float rounding differences for entries
  // whose gradients are near zero, so the whole-tensor tolerance is looser than for losses.
  // The key part [C, 2C) of each attn.c_attn.bias is left out: adding b_k to every key adds
  // q . b_k to a whole row of attention scores, which softmax ignores, so its gradient is zero
  // in exact arithmetic and f32 rounding noise (~1e-8) in both implementations; Adam turns
  // that noise into steps of up to lr, different in each (tide and JAX move it by ~1e-2).
  const auto final_params = fx.tensors("final_params");
  const int C = fx.config.n_embd;
  for (int id = 0; id < lay.num_tensors(); ++id) {
    const std::string& name = lay.slot(id).name;
    const float* p = trainer.model().store().tensor(ChunkKind::PARAM, id).f32();
    std::vector<float> got(p, p + lay.slot(id).numel), ref = final_params.at(name);
    if (name.ends_with("attn.c_attn.bias")) {
      got.erase(got.begin() + C, got.begin() + 2 * C);
      ref.erase(ref.begin() + C, ref.begin() + 2 * C);
    }
    EXPECT_LE(test::rel_error(got.data(), ref), 5e-4) << name;
  }
}

TEST(Trainer, SameSeedGivesBitwiseIdenticalLossCurve) {
  const std::string dir = temp_dir("repro");
  auto overrides = small_run(dir);
  overrides.push_back("model.dropout=0.1");
  std::vector<std::vector<float>> curves(2);
  for (auto& curve : curves) {
    Trainer t(load_train_config("", overrides));
    for (int s = 0; s < 6; ++s) curve.push_back(t.train_step().loss);
    curve.push_back(t.evaluate());
  }
  EXPECT_EQ(std::memcmp(curves[0].data(), curves[1].data(), curves[0].size() * 4), 0);
  EXPECT_LT(curves[0][5], curves[0][0]);  // it learns
}

// On one rank the ZeRO stages have nothing to partition: the slice is the whole chunk, and
// stages 1-3 train exactly like stage 0 (losses, gradient norms and validation, bitwise).
TEST(Trainer, ZeroStagesOnOneRankEqualStageZeroBitwise) {
  const std::string dir = temp_dir("zero_one_rank");
  std::vector<std::vector<float>> curves;
  for (int stage : {0, 1, 2, 3}) {
    auto overrides = small_run(dir);
    overrides.push_back("model.dropout=0.1");
    overrides.push_back("gradient_accumulation_steps=2");
    overrides.push_back(fmt::format("zero_optimization.stage={}", stage));
    Trainer t(load_train_config("", overrides));
    std::vector<float> curve;
    for (int s = 0; s < 6; ++s) {
      const StepStats st = t.train_step();
      curve.push_back(st.loss);
      curve.push_back(static_cast<float>(st.grad_norm));
    }
    curve.push_back(t.evaluate());
    curves.push_back(curve);
  }
  for (int stage = 1; stage <= 3; ++stage)
    EXPECT_EQ(std::memcmp(curves[stage].data(), curves[0].data(), curves[0].size() * 4), 0)
        << "stage " << stage;
}

// DeepSpeed's optimizer spellings reach the optimizer (config.md, "Coming from DeepSpeed"):
// "Adam" is AdamW, bit for bit; "Adam" with adam_w_mode false is classic Adam with L2, which
// differs from AdamW by the weight decay alone (equal without it), and the offloaded CPU Adam
// gets the mode too.
TEST(Trainer, DeepSpeedAdamSpellingsReachTheOptimizer) {
  const std::string dir = temp_dir("adam_modes");
  auto run = [&](std::vector<std::string> extra) {
    auto overrides = small_run(dir);
    overrides.push_back("out_dir_overwrite=true");
    overrides.insert(overrides.end(), extra.begin(), extra.end());
    Trainer t(load_train_config("", overrides));
    std::vector<float> curve;
    for (int s = 0; s < 4; ++s) curve.push_back(t.train_step().loss);
    curve.push_back(t.evaluate());
    return curve;
  };
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
  };
  const std::string wd = "optimizer.params.weight_decay=0.5";
  const auto adamw = run({"optimizer.type=AdamW", wd});
  EXPECT_TRUE(same(run({"optimizer.type=Adam", wd}), adamw));
  const auto l2 = run({"optimizer.type=Adam", "optimizer.params.adam_w_mode=false", wd});
  EXPECT_FALSE(same(l2, adamw)) << "adam_w_mode=false did not reach the optimizer";
  EXPECT_TRUE(same(run({"optimizer.type=Adam", "optimizer.params.adam_w_mode=false",
                        "optimizer.params.weight_decay=0"}),
                   run({"optimizer.type=AdamW", "optimizer.params.weight_decay=0"})));
  // ZeRO-Offload's CPU Adam (one rank: the same update on the host).
  EXPECT_TRUE(
      same(run({"optimizer.type=Adam", "optimizer.params.adam_w_mode=false", wd,
                "zero_optimization.stage=1", "zero_optimization.offload_optimizer.device=cpu"}),
           l2));
}

TEST(Trainer, CheckpointRoundTripAndCorruption) {
  const std::string dir = temp_dir("ckpt");
  Trainer t(load_train_config("", small_run(dir)));
  t.train_step();
  const std::string path = t.save();
  const CheckpointInfo info = read_checkpoint_info(path);
  EXPECT_EQ(info.step, 1);
  GPT copy(info.config, ActivationPolicy::SAVE_ALL, 0, false);
  load_checkpoint(path, copy);
  for (int id = 0; id < copy.store().layout().num_tensors(); ++id) {
    const Tensor a = copy.store().tensor(ChunkKind::PARAM, id);
    const Tensor b = t.model().store().tensor(ChunkKind::PARAM, id);
    ASSERT_EQ(std::memcmp(a.data, b.data, a.nbytes()), 0);
  }
  // Flip one byte of the data: the checksum catches it.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-100, std::ios::end);
    f.put('\x7f');
  }
  EXPECT_NE(error_of([&] { load_checkpoint(path, copy); }).find("checksum"), std::string::npos);
  fs::resize_file(path, fs::file_size(path) / 2);
  EXPECT_NE(error_of([&] { load_checkpoint(path, copy); }).find("truncated"), std::string::npos);
  std::ofstream(dir + "/junk.ckpt") << "hello";
  EXPECT_NE(error_of([&] { read_checkpoint_info(dir + "/junk.ckpt"); }).find("is truncated"),
            std::string::npos);
}

TEST(TrainConfig, BadInputGivesOneClearError) {
  const std::string dir = temp_dir("bad");
  auto base = small_run(dir);
  auto with = [&](std::vector<std::string> extra) {
    auto o = base;
    o.insert(o.end(), extra.begin(), extra.end());
    return error_of([&] { Trainer t(load_train_config("", o)); });
  };
  // Unknown or mistyped key: names it and suggests the right one.
  EXPECT_NE(with({"optimizer.params.lrr=0.1"}).find("did you mean 'optimizer.params.lr'"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_train_config(nlohmann::json::parse(R"({"trian_steps": 3})"));
            }).find("did you mean 'train_steps'"),
            std::string::npos);
  // Wrong value type.
  EXPECT_NE(with({"train_steps=\"ten\""}).find("'train_steps' must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_train_config(nlohmann::json::parse(R"({"bf16": true})"));
            }).find("'bf16' must be an object"),
            std::string::npos);
  // Sequence length above max_seq_len.
  EXPECT_NE(with({"model.max_seq_len=4"}).find("seq_len 8 exceeds model.max_seq_len 4"),
            std::string::npos);
  // Missing data path.
  EXPECT_NE(with({"data.train=" + dir + "/nope.bin"}).find("nope.bin"), std::string::npos);
  EXPECT_NE(with({"data.dir=" + dir + "/missing"}).find("does not exist"), std::string::npos);
  // Token id >= vocab_size.
  EXPECT_NE(with({"model.vocab_size=20"}).find("vocab_size"), std::string::npos);
  // A token file with a wrong magic, and a truncated one.
  std::ofstream(dir + "/bad_magic.bin", std::ios::binary) << std::string(2048, 'x');
  EXPECT_NE(with({"data.train=" + dir + "/bad_magic.bin"}).find("magic"), std::string::npos);
  const std::string good = write_shard(dir, "cut.bin", 500, 50);
  fs::resize_file(good, fs::file_size(good) - 100);
  EXPECT_NE(with({"data.train=" + good}).find("truncated"), std::string::npos);
  // A config file that is not JSON, and one that does not exist.
  std::ofstream(dir + "/bad.json") << "{ not json";
  EXPECT_NE(error_of([&] { load_train_config(dir + "/bad.json", {}); }).find("not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_of([&] { load_train_config(dir + "/none.json", {}); }).find("cannot open"),
            std::string::npos);
  EXPECT_NE(error_of([&] { load_train_config("", {"lr"}); }).find("key=value"), std::string::npos);
}

TEST(TrainConfig, ReferenceDocIsCurrent) {
  // docs/config.md ends with the output of `tide train --list-keys`; regenerate it when a key
  // changes (see the top of that file).
  std::ifstream f(std::string(TIDE_SOURCE_DIR) + "/docs/config.md");
  const std::string doc((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(doc.find(config_reference_markdown()), std::string::npos)
      << "docs/config.md is out of date: append the output of `tide train --list-keys`";
}

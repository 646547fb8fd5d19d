// Resume: 40 steps straight and 20 steps + a resume from the step-20 checkpoint + 20 more give
// bitwise the same losses and the same final checkpoint (weights and Adam state). Dropout and
// shuffling are on and accumulation is used, so the data position, the step (dropout keys and
// the LR schedule) and the optimizer state all have to come back exactly.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "checkpoint_tensors.h"
#include "error_of.h"
#include "tide/checkpoint/auto_resume.h"
#include "tide/core/rng.h"
#include "tide/data/shard.h"
#include "tide/train/trainer.h"

using namespace tide;
namespace fs = std::filesystem;

namespace {

std::string make_dir() {
  char tmpl[] = "/tmp/tide_resume_XXXXXX";
  TIDE_CHECK(::mkdtemp(tmpl) != nullptr, "cannot create a temporary directory");
  return tmpl;
}

std::string write_data(const std::string& dir) {
  std::vector<uint16_t> tokens(3001);
  const PhiloxStream rng{5, 6};
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(rng.uint(i) % 40);
  const std::string path = dir + "/train.bin";
  write_token_shard(path, std::span<const uint16_t>(tokens));
  return path;
}

// The run's data, shape and batch.
std::vector<std::string> base(const std::string& data, const std::string& out) {
  return {"data.train=" + data,
          "out_dir=" + out,
          "model.vocab_size=40",
          "model.n_layer=2",
          "model.n_head=2",
          "model.n_embd=16",
          "seq_len=8",
          "train_micro_batch_size_per_gpu=3",
          "gradient_accumulation_steps=2",
          "threads=1",
          "log.progress=false"};
}

TrainConfig config(const std::string& data, const std::string& out, const std::string& resume,
                   const std::vector<std::string>& extra = {}) {
  std::vector<std::string> o = base(data, out);
  o.insert(o.end(), {"model.dropout=0.1", "train_steps=40", "scheduler.params.warmup_num_steps=5",
                     "optimizer.params.lr=1e-2", "checkpoint.resume=" + resume});
  o.insert(o.end(), extra.begin(), extra.end());
  return load_train_config("", o);
}

std::vector<float> steps(Trainer& t, int64_t until) {
  std::vector<float> losses;
  while (t.step() < until) losses.push_back(t.train_step().loss);
  return losses;
}

}  // namespace

TEST(Resume, TwentyPlusTwentyStepsEqualFortyBitwise) {
  const std::string dir = make_dir(), data = write_data(dir);
  Trainer straight(config(data, dir + "/a", ""));
  const std::vector<float> want = steps(straight, 40);
  const std::string want_ckpt = straight.save("final.ckpt");

  std::vector<float> got;
  std::string mid;
  {
    Trainer first(config(data, dir + "/b", ""));
    got = steps(first, 20);
    mid = first.save("model_step20.ckpt");
  }
  Trainer resumed(config(data, dir + "/b", mid));
  EXPECT_EQ(resumed.step(), 20);
  const std::vector<float> rest = steps(resumed, 40);
  got.insert(got.end(), rest.begin(), rest.end());
  const std::string got_ckpt = resumed.save("final.ckpt");

  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
  for (size_t s = 0; s < want.size(); ++s) EXPECT_EQ(got[s], want[s]) << "step " << s + 1;
  const auto a = test::checkpoint_tensors(want_ckpt), b = test::checkpoint_tensors(got_ckpt);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_TRUE(a.count("adam_v.wte")) << "the checkpoint must hold the optimizer state";
  for (const auto& [name, bytes] : a) EXPECT_EQ(b.at(name), bytes) << name;
  fs::remove_all(dir);
}

TEST(Resume, RefusesWhatCannotContinueTheRun) {
  const std::string dir = make_dir(), data = write_data(dir);
  std::string ckpt;
  {
    Trainer t(config(data, dir, ""));
    steps(t, 2);
    ckpt = t.save("step2.ckpt");
  }
  auto error_of = [&](std::vector<std::string> extra) {
    try {
      Trainer t(config(data, dir, ckpt, extra));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of({"seed=7"}).find("seed"), std::string::npos);
  EXPECT_NE(error_of({"gradient_accumulation_steps=1"}).find("global batch"), std::string::npos);
  EXPECT_NE(error_of({"model.n_embd=32"}).find("shape"), std::string::npos)
      << error_of({"model.n_embd=32"});
  EXPECT_EQ(error_of({}), "no error");
  fs::remove_all(dir);
}

// checkpoint.resume=auto takes the newest checkpoint that verifies: a damaged newer one is
// skipped with its reason, a save's leftover "<name>.partial" is never a candidate, and an
// out_dir without checkpoints starts the run at step 0.
TEST(Resume, AutoTakesTheNewestCompleteCheckpoint) {
  const std::string dir = make_dir(), data = write_data(dir), out = dir + "/run";
  {
    Trainer fresh(config(data, out, "auto"));
    EXPECT_EQ(fresh.step(), 0);
    EXPECT_EQ(find_auto_resume(out).path, "");
    steps(fresh, 5);
    fresh.save("model_step5.ckpt");
    steps(fresh, 10);
    fresh.save("model_step10.ckpt");
    steps(fresh, 12);
    fresh.save("model_step12.ckpt");
  }
  // A newer file whose data a disk error changed (its header still reads) and an uncommitted
  // save.
  {
    std::fstream f(out + "/model_step12.ckpt", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-16, std::ios::end);
    f.write("damaged damaged!", 16);
  }
  fs::create_directories(out + "/model_step15.ckpt.partial");
  fs::copy_file(out + "/model_step10.ckpt", out + "/model_step15.ckpt.partial/shard.safetensors");
  const AutoResume found = find_auto_resume(out);
  EXPECT_EQ(found.path, out + "/model_step10.ckpt");
  EXPECT_EQ(found.step, 10);
  ASSERT_EQ(found.skipped.size(), 1u);
  EXPECT_NE(found.skipped[0].find("model_step12.ckpt"), std::string::npos) << found.skipped[0];
  Trainer resumed(config(data, out, "auto"));
  EXPECT_EQ(resumed.step(), 10);
  EXPECT_EQ(resumed.config().resume, out + "/model_step10.ckpt");
  fs::remove_all(dir);
}

// A resume keeps the checkpoint's learning-rate schedule: raising train_steps (which sets the
// cosine's length) is refused, naming the keys that changed and both learning rates, unless
// checkpoint.new_lr_schedule takes the new one on purpose; a longer run that keeps the
// schedule (total_num_steps given) resumes.
TEST(Resume, AChangedLrScheduleIsRefusedUnlessAskedFor) {
  const std::string dir = make_dir(), data = write_data(dir), out = dir + "/run";
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> o = base(data, out);
    o.insert(o.end(), extra.begin(), extra.end());
    return load_train_config("", o);
  };

  {
    Trainer t(with({"train_steps=20"}));
    steps(t, 10);
    t.save("model_step10.ckpt");
  }
  const std::string ckpt = "checkpoint.resume=" + out + "/model_step10.ckpt";
  const std::string e = tide::test::error_of([&] { Trainer t(with({"train_steps=30", ckpt})); });
  EXPECT_NE(e.find("another learning-rate schedule"), std::string::npos) << e;
  EXPECT_NE(e.find("scheduler.params.total_num_steps 20 -> 30"), std::string::npos) << e;
  EXPECT_NE(e.find("checkpoint.new_lr_schedule=true"), std::string::npos) << e;
  Trainer asked(with({"train_steps=30", ckpt, "checkpoint.new_lr_schedule=true"}));
  EXPECT_EQ(asked.step(), 10);
  Trainer kept(with({"train_steps=30", "scheduler.params.total_num_steps=20",
                     "scheduler.params.warmup_num_steps=2", ckpt}));
  EXPECT_EQ(kept.step(), 10);
  fs::remove_all(dir);
}

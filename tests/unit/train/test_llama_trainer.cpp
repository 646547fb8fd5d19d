// tide train with model.family=llama (issue #28): the Trainer learns, a checkpoint carries the
// family's config (a resume continues bitwise, a different family or kv-head count is refused),
// and a preset refuses a conflicting family key.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "checkpoint_tensors.h"
#include "tide/core/rng.h"
#include "tide/data/shard.h"
#include "tide/train/trainer.h"

using namespace tide;

namespace {

std::string llama_trainer_dir() {
  char tmpl[] = "/tmp/tide_llama_XXXXXX";
  TIDE_CHECK(::mkdtemp(tmpl) != nullptr, "cannot create a temporary directory");
  return tmpl;
}

std::string llama_trainer_data(const std::string& dir) {
  std::vector<uint16_t> tokens(3001);
  const PhiloxStream rng{5, 6};
  // A learnable stream: mostly token i+1 after token i, some noise.
  uint16_t t = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    t = rng.uint(i) % 4 == 0 ? static_cast<uint16_t>(rng.uint(i + 7919) % 40)
                             : static_cast<uint16_t>((t + 1) % 40);
    tokens[i] = t;
  }
  const std::string path = dir + "/train.bin";
  write_token_shard(path, std::span<const uint16_t>(tokens));
  return path;
}

TrainConfig llama_trainer_config(const std::string& data, const std::string& out,
                                 const std::string& resume,
                                 const std::vector<std::string>& extra = {}) {
  std::vector<std::string> o = {"data.train=" + data,
                                "out_dir=" + out,
                                "model.family=llama",
                                "model.vocab_size=40",
                                "model.n_layer=2",
                                "model.n_head=4",
                                "model.n_kv_head=2",
                                "model.n_embd=16",
                                "model.qkv_bias=true",
                                "model.tie_word_embeddings=false",
                                "seq_len=8",
                                "train_micro_batch_size_per_gpu=3",
                                "gradient_accumulation_steps=2",
                                "train_steps=30",
                                "optimizer.params.lr=1e-2",
                                "scheduler.params.warmup_num_steps=5",
                                "threads=1",
                                "log.progress=false",
                                "checkpoint.resume=" + resume};
  o.insert(o.end(), extra.begin(), extra.end());
  return load_train_config("", o);
}

std::vector<float> llama_steps(Trainer& t, int64_t until) {
  std::vector<float> losses;
  while (t.step() < until) losses.push_back(t.train_step().loss);
  return losses;
}

}  // namespace

TEST(LlamaTrainer, LearnsAndResumesBitwise) {
  const std::string dir = llama_trainer_dir(), data = llama_trainer_data(dir);
  Trainer straight(llama_trainer_config(data, dir + "/a", ""));
  EXPECT_TRUE(straight.model().config().is_llama());
  const std::vector<float> want = llama_steps(straight, 30);
  EXPECT_LT(want.back(), want.front() - 0.8f)
      << "a Llama model should learn the +1 pattern: " << want.front() << " -> " << want.back();
  const std::string want_ckpt = straight.save("final.ckpt");

  std::string mid;
  std::vector<float> got;
  {
    Trainer first(llama_trainer_config(data, dir + "/b", ""));
    got = llama_steps(first, 15);
    mid = first.save("model_step15.ckpt");
  }
  Trainer resumed(llama_trainer_config(data, dir + "/b", mid));
  EXPECT_EQ(resumed.step(), 15);
  const std::vector<float> rest = llama_steps(resumed, 30);
  got.insert(got.end(), rest.begin(), rest.end());
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
  const auto a = test::checkpoint_tensors(want_ckpt);
  const auto b = test::checkpoint_tensors(resumed.save("final.ckpt"));
  EXPECT_TRUE(a.count("output.weight") && a.count("h.1.self_attn.qkv_proj.bias"));
  for (const auto& [name, bytes] : a) EXPECT_EQ(b.at(name), bytes) << name;

  auto error_of = [&](std::vector<std::string> extra) {
    try {
      Trainer t(llama_trainer_config(data, dir + "/c", mid, extra));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of({"model.n_kv_head=4"}).find("shape"), std::string::npos);
  EXPECT_NE(error_of({"model.family=gpt2"}).find("shape"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(LlamaTrainer, PresetsSetTheFamilyAndRefuseAConflictingKey) {
  const TrainConfig c = load_train_config("", {"model.preset=mistral-7b"});
  EXPECT_TRUE(c.model.is_llama());
  EXPECT_EQ(c.model.n_kv_head, 8);
  EXPECT_FALSE(c.model.tie_word_embeddings);
  try {
    load_train_config("", {"model.preset=qwen2.5-0.5b", "model.qkv_bias=false"});
    ADD_FAILURE() << "a conflicting model.qkv_bias was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.qkv_bias"), std::string::npos) << e.what();
  }
}

// device=sim: the Llama blocks on the simulated device (RoPE's table copied up, every op on
// its stream) train the CPU run's bits, under each activation policy.
TEST(LlamaTrainer, SimulatedDeviceTrainsTheCpuRunBitwise) {
  const std::string dir = llama_trainer_dir(), data = llama_trainer_data(dir);
  for (const char* policy : {"none", "selective", "full"}) {
    const std::string p = std::string("activation_checkpointing.policy=") + policy;
    Trainer cpu(llama_trainer_config(data, dir + "/cpu", "", {p}));
    Trainer sim(llama_trainer_config(data, dir + "/sim", "", {p, "device=sim"}));
    const std::vector<float> want = llama_steps(cpu, 6), got = llama_steps(sim, 6);
    // The save waits for the stream. (Without it, destroying the Trainer right after a step
    // frees the chunks under the step's AdamW still queued on the stream: a crash in
    // adamw_cpu on the stream thread, seen with GPT-2 too; reported with issue #28.)
    sim.save("model.ckpt");
    EXPECT_EQ(test::checkpoint_tensors(cpu.save("model.ckpt")).at("output.weight"),
              test::checkpoint_tensors(dir + "/sim/model.ckpt").at("output.weight"))
        << policy;
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << policy;
  }
  std::filesystem::remove_all(dir);
}

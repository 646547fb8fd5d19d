// init_from sets the model (issue #28), as from_pretrained does: a config that gives no model.*
// key takes the family and shape of a Hugging Face folder (GPT-2, Llama, Qwen2) or of a tide
// checkpoint, loads its weights and trains bitwise as the run that restates every key; a key the
// config gives must agree (one error naming it and both values, before anything is written);
// config.json records the taken shape, so that it reads back without init_from.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "error_of.h"
#include "test_files.h"
#include "tide/checkpoint/checkpoint.h"
#include "tide/checkpoint/hf_import.h"
#include "tide/checkpoint/init_from.h"
#include "tide/train/trainer.h"

using namespace tide;
using tide::test::error_of;
using tide::test::temp_dir;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string shape_fixture(const std::string& name) {
  return std::string(TIDE_SOURCE_DIR) + "/tests/fixtures/" + name;
}

// The model.* overrides that spell out `m` (what a config needed before init_from set them).
std::vector<std::string> shape_model_keys(const GPTConfig& m) {
  return {fmt::format("model.family={}", model_family_name(m.family)),
          fmt::format("model.n_layer={}", m.n_layer),
          fmt::format("model.n_head={}", m.n_head),
          fmt::format("model.n_kv_head={}", m.n_kv_head),
          fmt::format("model.n_embd={}", m.n_embd),
          fmt::format("model.intermediate_size={}", m.intermediate_size),
          fmt::format("model.vocab_size={}", m.vocab_size),
          fmt::format("model.max_seq_len={}", m.max_seq_len),
          fmt::format("model.rope_theta={}", m.rope_theta),
          fmt::format("model.rope_scaling.type={}",
                      m.rope_scaling == RopeScaling::llama3 ? "llama3" : "none"),
          fmt::format("model.rope_scaling.factor={}", m.rope_factor),
          fmt::format("model.rope_scaling.low_freq_factor={}", m.rope_low_freq_factor),
          fmt::format("model.rope_scaling.high_freq_factor={}", m.rope_high_freq_factor),
          fmt::format("model.rope_scaling.original_max_position_embeddings={}",
                      m.rope_original_max_position_embeddings),
          fmt::format("model.rms_norm_eps={}", m.rms_norm_eps),
          fmt::format("model.tie_word_embeddings={}", m.tie_word_embeddings),
          fmt::format("model.qkv_bias={}", m.qkv_bias)};
}

// A short run on tokens below 40 (every fixture's vocabulary is larger) from `init`.
TrainConfig shape_run_config(const std::string& dir, const std::string& out,
                             const std::string& init, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> o = {
      "data.train=" + test::write_pattern_shard(dir, "train.bin", 2000, 40),
      "out_dir=" + dir + "/" + out,
      "init_from=" + init,
      "seq_len=8",
      "train_micro_batch_size_per_gpu=2",
      "train_steps=4",
      "optimizer.params.lr=1e-2",
      "scheduler.params.warmup_num_steps=2",
      "threads=1",
      "log.progress=false"};
  o.insert(o.end(), extra.begin(), extra.end());
  return load_train_config("", o);
}

std::vector<float> shape_losses(Trainer& t) {
  std::vector<float> l;
  while (t.step() < t.config().train_steps) l.push_back(t.train_step().loss);
  return l;
}

// Every parameter of `t`'s model (one rank, ZeRO 0: all of it) equals checkpoint `path`'s.
void expect_shape_parameters_of(Trainer& t, const std::string& path) {
  GPT want(t.model().config(), ActivationPolicy::SAVE_ALL, 0, /*with_optimizer=*/false);
  load_checkpoint(path, want);
  const ChunkStore& s = t.model().store();
  for (int id = 0; id < s.layout().num_tensors(); ++id) {
    const Tensor a = s.tensor(ChunkKind::PARAM, id);
    const Tensor b = want.store().tensor(ChunkKind::PARAM, id);
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes()), 0) << s.layout().slot(id).name;
  }
}

}  // namespace

TEST(InitFromShape, ConfigTakesTheModelOfAHuggingFaceFolder) {
  for (const char* name : {"hf_gpt2_tiny", "hf_llama_tiny", "hf_qwen2_tiny"}) {
    SCOPED_TRACE(name);
    const std::string fx = shape_fixture(name);
    const TrainConfig c = load_train_config("", {"init_from=" + fx, "seq_len=8"});
    GPTConfig want = hf_folder_model(fx);
    want.dropout = 0.0f;  // a training setting: the config's, not config.json's resid_pdrop
    EXPECT_EQ(c.model, want) << c.model.str() << " vs " << want.str();
    // config.json records the taken keys: read back without init_from, the same model.
    const json j = config_to_json(c);
    EXPECT_EQ(j["model"]["n_embd"], want.n_embd);
    EXPECT_EQ(j["model"]["family"], model_family_name(want.family));
    EXPECT_EQ(parse_train_config(j), c);
    json without = j;
    without.erase("init_from");
    EXPECT_EQ(parse_train_config(without).model, want);
  }
  // A tide checkpoint's stored shape, read from its header.
  const std::string d = temp_dir("ckpt");
  import_hf_gpt2(shape_fixture("hf_llama_tiny"), d + "/model.ckpt");
  EXPECT_EQ(load_train_config("", {"init_from=" + d + "/model.ckpt"}).model,
            init_from_model(shape_fixture("hf_llama_tiny")));
}

TEST(InitFromShape, AKeyTheConfigGivesMustAgree) {
  const std::string gpt2 = shape_fixture("hf_gpt2_tiny"), llama = shape_fixture("hf_llama_tiny");
  // Agreeing keys, "derive it" zeros and a training key (dropout) are accepted.
  const TrainConfig ok =
      load_train_config("", {"init_from=" + gpt2, "model.family=gpt2", "model.n_embd=24",
                             "model.vocab_size=0", "model.dropout=0.2", "seq_len=8"});
  EXPECT_EQ(ok.model.n_embd, 24);
  EXPECT_EQ(ok.model.vocab_size, 64);
  EXPECT_FLOAT_EQ(ok.model.dropout, 0.2f);
  EXPECT_NO_THROW(load_train_config("", {"init_from=" + llama, "model.n_kv_head=2",
                                         "model.rope_scaling.type=llama3", "seq_len=8"}));
  // One error naming every conflicting key with both values and the fix.
  std::string e = error_of([&] {
    load_train_config("", {"init_from=" + gpt2, "model.n_embd=16", "model.n_layer=2"});
  });
  EXPECT_NE(e.find("model.n_embd=16 (init_from's: 24)"), std::string::npos) << e;
  EXPECT_EQ(e.find("model.n_layer"), std::string::npos) << "n_layer agrees: " << e;
  EXPECT_NE(e.find("remove these model.* keys from the config"), std::string::npos) << e;
  e = error_of([&] {
    load_train_config("", {"init_from=" + llama, "model.family=gpt2", "model.qkv_bias=true"});
  });
  EXPECT_NE(e.find("model.family=gpt2 (init_from's: llama)"), std::string::npos) << e;
  EXPECT_NE(e.find("model.qkv_bias=true (init_from's: false)"), std::string::npos) << e;
  // A preset gives every key.
  e = error_of([&] { load_train_config("", {"init_from=" + gpt2, "model.preset=gpt2-124m"}); });
  EXPECT_NE(e.find("model.n_layer=12 from model.preset (init_from's: 2)"), std::string::npos) << e;
  EXPECT_NE(e.find("remove model.preset"), std::string::npos) << e;
  // seq_len longer than the source's positions: the fix is seq_len, not model.max_seq_len.
  e = error_of([&] { load_train_config("", {"init_from=" + gpt2, "seq_len=64"}); });
  EXPECT_NE(e.find("seq_len 64 exceeds the 32 positions of init_from's model"), std::string::npos)
      << e;
  // A run's out_dir (tide's config.json beside model.ckpt): its checkpoint is meant.
  const std::string run = temp_dir("run");
  std::ofstream(run + "/config.json") << "{}";
  std::ofstream(run + "/model.ckpt") << "x";
  e = error_of([&] { load_train_config("", {"init_from=" + run}); });
  EXPECT_NE(e.find("is a tide run's directory, not a Hugging Face model folder; name one of its "
                   "checkpoints, e.g. " +
                   run + "/model.ckpt"),
            std::string::npos)
      << e;
  // A folder that is neither a checkpoint nor a Hugging Face model.
  const std::string empty = temp_dir("empty");
  e = error_of([&] { load_train_config("", {"init_from=" + empty}); });
  EXPECT_NE(e.find("nor a Hugging Face model folder"), std::string::npos) << e;
}

TEST(InitFromShape, AHuggingFaceFolderTrainsAsItsImportWithEveryKey) {
  for (const char* name : {"hf_gpt2_tiny", "hf_llama_tiny", "hf_qwen2_tiny"}) {
    SCOPED_TRACE(name);
    const std::string fx = shape_fixture(name), d = temp_dir(name);
    import_hf_gpt2(fx, d + "/import.ckpt");
    // The way before: the imported file and every model.* key restated.
    Trainer spelled(
        shape_run_config(d, "spelled", d + "/import.ckpt", shape_model_keys(hf_folder_model(fx))));
    expect_shape_parameters_of(spelled, d + "/import.ckpt");
    const std::vector<float> want = shape_losses(spelled);
    // The folder itself, no model.* key.
    Trainer taken(shape_run_config(d, "taken", fx));
    EXPECT_EQ(taken.model().config(), spelled.model().config());
    expect_shape_parameters_of(taken, d + "/import.ckpt");
    const std::vector<float> got = shape_losses(taken);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
  }
}

TEST(InitFromShape, ATideCheckpointTrainsAsWithEveryKey) {
  const std::string d = temp_dir("ckpt");
  // A Llama checkpoint of a shape no default has (untied, qkv bias, GQA, llama3 rope).
  const std::vector<std::string> shape = {
      "model.family=llama",       "model.n_layer=2",
      "model.n_head=4",           "model.n_kv_head=2",
      "model.n_embd=16",          "model.intermediate_size=24",
      "model.vocab_size=40",      "model.max_seq_len=16",
      "model.qkv_bias=true",      "model.tie_word_embeddings=false",
      "model.rope_theta=500000",  "model.rope_scaling.type=llama3",
      "model.rms_norm_eps=1e-06", "model.rope_scaling.original_max_position_embeddings=8"};
  std::string base;
  {
    Trainer t(shape_run_config(d, "base", "", shape));
    shape_losses(t);
    base = t.save();
  }
  Trainer spelled(shape_run_config(d, "spelled", base, shape));
  const std::vector<float> want = shape_losses(spelled);
  Trainer taken(shape_run_config(d, "taken", base));
  EXPECT_EQ(taken.model().config(), read_checkpoint_info(base).config);
  expect_shape_parameters_of(taken, base);
  const std::vector<float> got = shape_losses(taken);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
}

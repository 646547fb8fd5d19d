// config.json from the one schema (config/config.h): every schema key is written (DeepSpeed's
// ignored keys only when given), and reading
// the written config back gives the same config, for the embedded default config, a DeepSpeed
// style file and a trainer's run directory.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "error_of.h"
#include "tide/data/shard.h"
#include "tide/train/trainer.h"

using namespace tide;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// The value at a dotted path of nested JSON, or null.
json at_path(const json& j, const std::string& path) {
  const json* node = &j;
  size_t start = 0;
  for (size_t dot = 0; dot != std::string::npos; start = dot + 1) {
    dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    if (!node->is_object() || !node->contains(part)) return nullptr;
    node = &(*node)[part];
  }
  return *node;
}

void expect_every_key_and_round_trip(const TrainConfig& c, const json& written) {
  // Every key, except DeepSpeed's keys that cannot change a run (written only when the config
  // gave them) and the refused ones (never).
  for (const ConfigKey& k : config_schema()) {
    const bool given =
        std::find(c.ignored_keys.begin(), c.ignored_keys.end(), k.path) != c.ignored_keys.end();
    if (k.use == KeyUse::REFUSED || (k.use == KeyUse::IGNORED && !given)) {
      EXPECT_TRUE(at_path(written, k.path).is_null()) << k.path << " should not be written";
      continue;
    }
    if (k.use == KeyUse::IGNORED && c.values[k.path].is_null()) continue;  // given as null
    EXPECT_FALSE(at_path(written, k.path).is_null()) << k.path << " is missing from config.json";
  }
  const TrainConfig back = parse_train_config(written);
  EXPECT_TRUE(back == c) << "config.json read back differs:\n"
                         << config_to_json(back).dump() << "\nvs\n"
                         << config_to_json(c).dump();
}

}  // namespace

TEST(ConfigJson, EveryKeyWrittenAndReadBackEqual) {
  expect_every_key_and_round_trip(load_train_config("", {}),
                                  config_to_json(load_train_config("", {})));
  const std::vector<std::vector<std::string>> variants = {
      {"model.preset=gpt2-124m", "seq_len=64"},
      {"scheduler.type=WarmupLR", "optimizer.params.lr=3e-4", "steps_per_print=7"},
      {"scheduler.type=WarmupDecayLR", "scheduler.params.warmup_type=log", "gradient_clipping=1"},
      {"scheduler.type=none", "optimizer.params.betas=[0.8,0.9]",
       "activation_checkpointing.policy=full"},
      // DeepSpeed's spellings: ignored keys, Adam with L2, 2e8.
      {"wall_clock_breakdown=true", "zero_optimization.reduce_scatter=false", "optimizer.type=Adam",
       "optimizer.params.adam_w_mode=false", "zero_optimization.allgather_bucket_size=2e8"},
  };
  for (const auto& v : variants) {
    const TrainConfig c = load_train_config("", v);
    expect_every_key_and_round_trip(c, config_to_json(c));
  }
  // A DeepSpeed-style file: DeepSpeed's defaults, resolved (WarmupDecayLR's peak is 0.001 in
  // DeepSpeed whatever the optimizer's lr; total_num_steps 0 is train_steps).
  const TrainConfig ds = parse_train_config(json::parse(R"({
    "train_steps": 300, "optimizer": {"params": {"lr": 0.003}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 20}}})"));
  const json w = config_to_json(ds);
  EXPECT_EQ(at_path(w, "scheduler.params.warmup_max_lr"), 0.001);
  EXPECT_EQ(at_path(w, "scheduler.params.total_num_steps"), 300);
  EXPECT_EQ(at_path(w, "scheduler.params.warmup_type"), "log");
  expect_every_key_and_round_trip(ds, w);
}

TEST(ConfigJson, DefaultConfigSetsTheDefaultRunsSchedule) {
  // No config file: the embedded default config's schedule; a file: DeepSpeed's defaults.
  const LrSchedule run = load_train_config("", {}).lr_schedule;
  EXPECT_EQ(run.warmup_num_steps, 15);  // -1: 10% of the 150 steps
  EXPECT_EQ(load_train_config("", {"train_steps=50"}).lr_schedule.warmup_num_steps, 5);
  EXPECT_EQ(load_train_config("", {"train_steps=5"}).lr_schedule.warmup_num_steps, 1);
  EXPECT_EQ(run.warmup_type, WarmupType::LINEAR);
  EXPECT_DOUBLE_EQ(run.cos_min_ratio, 0.1);
  EXPECT_EQ(
      load_train_config("", {"scheduler.params.warmup_num_steps=7"}).lr_schedule.warmup_num_steps,
      7);
  EXPECT_DOUBLE_EQ(load_train_config("", {}).lr, 3e-3);
  EXPECT_DOUBLE_EQ(parse_train_config(json::object()).lr, 1e-3);  // DeepSpeed's (Adam's)
  const LrSchedule file = parse_train_config(json::object()).lr_schedule;
  EXPECT_EQ(file.warmup_num_steps, 1000);
  EXPECT_EQ(file.warmup_type, WarmupType::LOG);
  EXPECT_DOUBLE_EQ(file.cos_min_ratio, 1e-4);
}

TEST(ConfigJson, StepsPerPrintIsLogInterval) {
  EXPECT_EQ(load_train_config("", {"steps_per_print=3"}).log_interval, 3);
  EXPECT_EQ(load_train_config("", {"log.interval=4"}).log_interval, 4);
  EXPECT_EQ(load_train_config("", {"log.interval=4", "steps_per_print=4"}).log_interval, 4);
  EXPECT_NE(tide::test::error_of([] {
              load_train_config("", {"log.interval=4", "steps_per_print=5"});
            }).find("give one of them"),
            std::string::npos);
}

TEST(ConfigJson, RunDirectoryConfigAndMetrics) {
  const fs::path dir = fs::path(TIDE_BINARY_DIR) / "test_tmp" / "config_json";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<uint16_t> tokens(3000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i * 7 % 30);
  write_token_shard((dir / "train.bin").string(), std::span<const uint16_t>(tokens));
  write_token_shard((dir / "val.bin").string(), std::span<const uint16_t>(tokens));
  const TrainConfig c = load_train_config(
      "",
      {"data.train=" + (dir / "train.bin").string(), "data.val=" + (dir / "val.bin").string(),
       "model.vocab_size=30", "model.n_layer=1", "model.n_head=2", "model.n_embd=8", "seq_len=8",
       "train_micro_batch_size_per_gpu=2", "train_steps=5", "steps_per_print=2", "eval.sequences=4",
       "eval.interval=0", "log.progress=false", "threads=1", "out_dir=" + (dir / "run").string()});
  Trainer t(c);
  t.run();
  std::ifstream f(dir / "run" / "config.json");
  const json written = json::parse(f);
  expect_every_key_and_round_trip(t.config(), written);
  EXPECT_TRUE(load_train_config((dir / "run" / "config.json").string(), {}) == t.config());

  // metrics.jsonl: every record has a wall-clock time; training records the interval's tok/s.
  std::ifstream m(dir / "run" / "metrics.jsonl");
  std::vector<int64_t> train_steps;
  for (std::string line; std::getline(m, line);) {
    const json r = json::parse(line);
    ASSERT_TRUE(r.contains("time") && r["time"].is_number()) << line;
    EXPECT_GT(r["time"].get<double>(), 1.7e9) << "Unix seconds";
    if (r.contains("loss")) {
      train_steps.push_back(r["step"].get<int64_t>());
      for (const char* key : {"lr", "grad_norm", "step_seconds", "comm_wait_seconds",
                              "tokens_per_s", "tokens_per_s_interval"})
        EXPECT_TRUE(r.contains(key)) << key << " missing: " << line;
      EXPECT_GT(r["tokens_per_s_interval"].get<double>(), 0);
    }
  }
  EXPECT_EQ(train_steps, (std::vector<int64_t>{2, 4, 5}));  // steps_per_print = 2, and the last
}

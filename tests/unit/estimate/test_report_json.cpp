// The comparison table as JSON, the config-file form, and --max-model.
#include <gtest/gtest.h>

#include <fstream>

#include "tide/core/error.h"
#include "tide/estimate/report.h"
#include "tide/estimate/setup_json.h"

using namespace tide;

TEST(ReportJson, OneRowPerOptionWithCategoriesThatAddUp) {
  TrainSetup s;
  s.model = GPTConfig::preset("gpt2-1.5b");
  s.world_size = 8;
  s.zero_stage = 1;
  MachineBudget budget{16LL << 30, 256LL << 30};
  const auto rows = compare_options(s, budget);
  const nlohmann::json j = nlohmann::json::parse(options_table_json(s, budget, rows).dump());
  ASSERT_EQ(j["options"].size(), 18u);
  EXPECT_EQ(j["setup"]["dp"], 8);
  EXPECT_EQ(j["budget"]["gpu_bytes"], 16LL << 30);
  int configured = 0;
  for (const auto& o : j["options"]) {
    const auto& d = o["device"];
    EXPECT_EQ(d["total"].get<int64_t>(),
              d["param16"].get<int64_t>() + d["grads"].get<int64_t>() + d["master"].get<int64_t>() +
                  d["adam_m"].get<int64_t>() + d["adam_v"].get<int64_t>() +
                  d["activations"].get<int64_t>() + d["temp_buffers"].get<int64_t>() +
                  d["chunk_padding"].get<int64_t>());
    EXPECT_EQ(o["fits_gpu"].get<bool>(), d["total"].get<int64_t>() <= (16LL << 30));
    EXPECT_EQ(o["fits"].get<bool>(), o["fits_gpu"].get<bool>() && o["fits_host"].get<bool>());
    configured += o["configured"].get<bool>();
  }
  EXPECT_EQ(configured, 1);
  EXPECT_EQ(j["options"][3]["option"], "ZeRO-1");  // DDP x3, then ZeRO-1 with recompute none
  EXPECT_EQ(j["options"][3]["configured"], true);
  // 1.5B with 16 bytes per parameter (24 GB) does not fit 16 GiB under DDP; ZeRO-3 over 8 does.
  EXPECT_EQ(j["options"][0]["fits"], false);
  EXPECT_EQ(j["options"][11]["option"], "ZeRO-3");
  EXPECT_EQ(j["options"][11]["recompute"], "full");
  EXPECT_EQ(j["options"][11]["fits"], true);
}

TEST(ReportText, MarksTheConfiguredOptionAndFits) {
  TrainSetup s;
  s.model = GPTConfig::preset("gpt2-124m");
  const std::string text =
      options_table_text(s, {80LL << 30, 0}, compare_options(s, {80LL << 30, 0}));
  EXPECT_NE(text.find("*DDP"), std::string::npos) << text;
  EXPECT_NE(text.find("ZeRO-3+offload_all"), std::string::npos);
  EXPECT_NE(text.find("yes"), std::string::npos);
}

TEST(SetupJson, ReadsDeepSpeedAndTideKeysAndIgnoresOthers) {
  const auto j = nlohmann::json::parse(R"({
    "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 8,
    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                          "offload_param": {"device": "cpu"}},
    "bf16": {"enabled": true}, "model": {"preset": "gpt2-774m", "max_seq_len": 512},
    "parallel": {"tp": 2, "pp": 2, "sp": true}, "world_size": 16,
    "activation_checkpointing": {"policy": "selective"},
    "pipeline": {"schedule": "zb-h1"}, "chunk_size_mb": 256, "lr": 0.001 })");
  const TrainSetup s = setup_from_json(j);
  EXPECT_EQ(s.micro_batch, 4);
  EXPECT_EQ(s.grad_accum, 8);
  EXPECT_EQ(s.zero_stage, 3);
  EXPECT_EQ(s.offload, Offload::All);
  EXPECT_EQ(s.precision, Precision::BF16);
  EXPECT_EQ(s.model.n_layer, 36);
  EXPECT_EQ(s.model.max_seq_len, 512);
  EXPECT_EQ(s.tp, 2);
  EXPECT_EQ(s.pp, 2);
  EXPECT_TRUE(s.sp);
  EXPECT_EQ(s.world_size, 16);
  EXPECT_EQ(s.recompute, Recompute::Selective);
  EXPECT_EQ(s.schedule, Schedule::ZBH1);
  EXPECT_EQ(s.chunk_mib, 256);
  EXPECT_EQ(estimate_memory(s).stages.size(), 2u);
}

TEST(SetupJson, ReadsTideTrainsModelBatchAndChunkKeysAsTideTrainDoes) {
  TrainSetup base;
  base.model = GPTConfig::preset("gpt2-124m");  // tide estimate's model without a config
  // A tide train config (README's "training your own data"): positions default to seq_len.
  const TrainSetup s = setup_from_json(nlohmann::json::parse(R"({
    "model": {"n_layer": 6, "n_head": 6, "n_embd": 384, "vocab_size": 8192},
    "seq_len": 256, "train_micro_batch_size_per_gpu": 8, "chunk_size_mb": 0.5 })"),
                                       base);
  EXPECT_EQ(s.model.n_layer, 6);
  EXPECT_EQ(s.model.vocab_size, 8192);
  EXPECT_EQ(s.model.max_seq_len, 256);
  EXPECT_EQ(s.seq(), 256);
  EXPECT_EQ(s.micro_batch, 8);
  EXPECT_EQ(s.chunk_target_elems(), 131072);  // MiB of f32, as tide train
  // model.max_seq_len 0 means seq_len too.
  EXPECT_EQ(setup_from_json(
                nlohmann::json::parse(R"({"seq_len": 64, "model": {"max_seq_len": 0}})"), base)
                .model.max_seq_len,
            64);
  // With a preset the positions are the preset's and seq_len only sets the training length,
  // which is what the activations scale with.
  const TrainSetup p = setup_from_json(
      nlohmann::json::parse(R"({"model": {"preset": "gpt2-350m"}, "seq_len": 512})"), base);
  EXPECT_EQ(p.model.max_seq_len, 1024);
  EXPECT_EQ(p.seq(), 512);
  TrainSetup full = p;
  full.seq_len = 0;
  EXPECT_LT(estimate_memory(p).device.activations, estimate_memory(full).device.activations);
}

TEST(SetupJson, WrongTypesAndFilesAreClearErrors) {
  auto error_of = [](const char* text) -> std::string {
    try {
      setup_from_json(nlohmann::json::parse(text));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error_of(R"({"parallel": {"tp": "2"}})"),
            "config key 'parallel.tp' must be an integer (got \"2\")");
  EXPECT_NE(error_of(R"({"zero_optimization": {"offload_optimizer": {"device": "nvme"}}})")
                .find("must be \"cpu\" or \"none\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"activation_checkpointing": {"policy": "some"}})")
                .find("use none, selective or full"),
            std::string::npos);
  const std::string path = std::string(TIDE_BINARY_DIR) + "/estimate_bad_config.json";
  std::ofstream(path) << "{ \"parallel\": ";
  try {
    read_setup_file(path);
    ADD_FAILURE() << "parsed a truncated file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not valid JSON"), std::string::npos) << e.what();
  }
}

TEST(MaxModel, LargestHiddenSizeThatFitsIsTheEdgeOfTheBudget) {
  TrainSetup s;
  s.model = GPTConfig::preset("gpt2-1.5b");  // family: 48 layers, head size 64, hidden 128k
  s.world_size = 64;
  const MachineBudget budget{32LL * 1000 * 1000 * 1000, 0};  // a 32 GB V100, as in ZeRO
  const auto rows = find_max_models(s, budget, GrowthFamily::Hidden);
  ASSERT_EQ(rows.size(), 18u);
  auto params = [&](int i) { return rows[i].found ? rows[i].model.num_parameters() : 0; };
  // ZeRO-1 partitions the optimizer states and adds no buffers, so it fits more than DDP;
  // recomputation frees activations (rows: DDP none/selective/full, then ZeRO-1 ...).
  EXPECT_LT(params(0), params(3));
  EXPECT_LE(params(3), params(5));
  for (const auto& r : rows) {
    if (!r.found) continue;
    EXPECT_LE(r.estimate.device.total(), budget.gpu_bytes);
    // The next size up of the family does not fit (or breaks the layout).
    TrainSetup bigger = with_option(s, r.option);
    bigger.model = r.model;
    bigger.model.n_embd += 128;
    bigger.model.n_head = bigger.model.n_embd / 64;
    EXPECT_GT(estimate_memory(bigger).device.total(), budget.gpu_bytes) << r.option.name;
  }
  EXPECT_THROW(find_max_models(s, {0, 0}, GrowthFamily::Hidden), Error);
}

// The comparison table as JSON, and --max-model. (The config-file form: tests/unit/train/
// test_estimate_setup.cpp, since the config is read by tide train's parser.)
#include <gtest/gtest.h>

#include <fstream>

#include "tide/core/error.h"
#include "tide/estimate/report.h"

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
                  d["chunk_padding"].get<int64_t>() + d["arenas"].get<int64_t>());
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

// With a host budget, --max-model adds placement.policy=auto rows (PatrickStar): the states
// spread over the GPU's default budget (80 GiB less the 4 GiB margin) and the host. On one
// 80 GiB GPU with 128 GiB of host memory they fit a larger GPT than any other option, whose
// states must fit one memory, and the next size up does not fit the host.
TEST(MaxModel, AutoPlacementSpreadsTheStatesOverTheGpuAndTheHost) {
  TrainSetup s;
  s.model = GPTConfig::preset("gpt2-1.5b");  // 48 layers, head size 64
  const MachineBudget budget{80LL << 30, 128LL << 30};
  const auto rows = find_max_models(s, budget, GrowthFamily::Hidden);
  ASSERT_EQ(rows.size(), 21u);
  int64_t others = 0;
  for (size_t i = 0; i < 18; ++i)
    if (rows[i].found) others = std::max(others, rows[i].model.num_parameters());
  for (size_t i = 18; i < 21; ++i) {
    const MaxModelResult& r = rows[i];
    SCOPED_TRACE(r.option.name + " " + to_string(r.option.recompute));
    ASSERT_TRUE(r.found);
    EXPECT_EQ(r.option.placement, Placement::Auto);
    EXPECT_GT(r.model.num_parameters(), others);
    EXPECT_EQ(r.estimate.limit.limit, (80LL << 30) - (4LL << 30));
    EXPECT_TRUE(r.estimate.limit.auto_fits);
    EXPECT_LE(r.estimate.host.total(), budget.host_bytes);
    // 16 bytes per parameter of bf16 states (2 + 2 + 4 + 4 + 4, ZeRO's 2 + 2 + 12 at one rank)
    // are more than the host holds: part of them is on the GPU.
    EXPECT_GT(16 * r.model.num_parameters(), budget.host_bytes);
    TrainSetup bigger = s;
    bigger.placement = Placement::Auto;
    bigger.device_memory_limit = r.estimate.limit.limit;
    bigger.recompute = r.option.recompute;
    bigger.model = r.model;
    bigger.model.n_embd += 128;
    bigger.model.n_head = bigger.model.n_embd / 64;
    EXPECT_GT(estimate_memory(bigger).host.total(), budget.host_bytes);
  }
}

// The Llama family grows as its published sizes do: the query heads per key/value head (4 in
// Llama 3.1 8B) and the MLP's width per hidden unit (3.5, rounded up to a multiple of 256)
// stay, so 8B's own shape is a member (hidden 4096: 8 kv heads, 14336) and is found under the
// budget that holds it.
TEST(MaxModel, LlamaKeepsItsGroupsAndMlpRatio) {
  TrainSetup s;
  s.model = GPTConfig::preset("llama3.1-8b");
  s.seq_len = 8192;
  s.world_size = 8;
  s.recompute = Recompute::Full;
  const MachineBudget budget{80LL << 30, 0};
  const auto rows = find_max_models(s, budget, GrowthFamily::Hidden);
  bool eight_b = false;
  for (const auto& r : rows) {
    if (!r.found) continue;
    EXPECT_TRUE(r.model.is_llama());
    EXPECT_EQ(r.model.n_head, 4 * r.model.n_kv_head) << r.option.name;
    EXPECT_EQ(r.model.ffn_size() % 256, 0) << r.option.name;
    EXPECT_GE(r.model.ffn_size(), 3.5 * r.model.n_embd) << r.option.name;
    EXPECT_LT(r.model.ffn_size(), 3.5 * r.model.n_embd + 256) << r.option.name;
    if (r.model.n_embd == 4096) {
      EXPECT_EQ(r.model.num_parameters(), GPTConfig::preset("llama3.1-8b").num_parameters());
      eight_b = true;
    }
  }
  EXPECT_TRUE(eight_b) << "no option's largest model is Llama 3.1 8B's shape under 80 GiB";
}

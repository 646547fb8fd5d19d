// Rank consistency (config/rank_consistency.h): every schema key is compared, per-rank keys are
// exempt, and the message names each differing key with the ranks that differ.

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "tide/config/rank_consistency.h"

using namespace tide;

TEST(RankConsistency, ComparesEverySchemaKey) {
  // A new schema key must be added to config_key_values, or ranks could disagree on it silently.
  const TrainConfig c = load_train_config("", {});
  const nlohmann::json values = config_key_values(c);
  for (const ConfigKey& k : config_schema())
    EXPECT_TRUE(values.contains(k.path)) << k.path << " is missing from config_key_values";
  EXPECT_EQ(values.size(), config_schema().size())
      << "config_key_values has keys not in the schema";
  EXPECT_EQ(config_agreement_items(c).size(), config_schema().size());
  for (const std::string& k : kPerRankKeys)
    EXPECT_TRUE(values.contains(k)) << "per-rank key " << k << " is not a schema key";
}

TEST(RankConsistency, EachKeyHashesItsOwnValue) {
  const auto base = config_agreement_items(load_train_config("", {}));
  auto differing = [&](const std::vector<std::string>& overrides) {
    const auto other = config_agreement_items(load_train_config("", overrides));
    std::vector<std::string> names;
    for (size_t i = 0; i < base.size(); ++i)
      if (base[i].hash != other[i].hash) names.push_back(base[i].name);
    return names;
  };
  EXPECT_EQ(differing({"optimizer.params.lr=3e-4"}),
            std::vector<std::string>{"optimizer.params.lr"});
  EXPECT_EQ(differing({"seed=1"}), std::vector<std::string>{"seed"});
  EXPECT_EQ(differing({"model.n_embd=256"}), std::vector<std::string>{"model.n_embd"});
  EXPECT_EQ(differing({"model.dropout=0.1"}), std::vector<std::string>{"model.dropout"});
  // Resolved values: train_steps also moves total_num_steps (0 = train_steps) and the default
  // config's warmup (-1 = 10% of it). A WarmupLR's peak defaults to lr.
  EXPECT_EQ(differing({"train_steps=100"}),
            (std::vector<std::string>{"train_steps", "scheduler.params.warmup_num_steps",
                                      "scheduler.params.total_num_steps"}));
  const auto warmup_lr = config_agreement_items(load_train_config("", {"scheduler.type=WarmupLR"}));
  const auto warmup_lr_3e4 = config_agreement_items(
      load_train_config("", {"scheduler.type=WarmupLR", "optimizer.params.lr=3e-4"}));
  std::vector<std::string> names;
  for (size_t i = 0; i < warmup_lr.size(); ++i)
    if (warmup_lr[i].hash != warmup_lr_3e4[i].hash) names.push_back(warmup_lr[i].name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"optimizer.params.lr", "scheduler.params.warmup_max_lr"}));
  // steps_per_print and log.interval are one setting.
  EXPECT_EQ(differing({"steps_per_print=5"}), differing({"log.interval=5"}));
  // Per-rank keys never differ.
  EXPECT_TRUE(
      differing({"threads=3", "log.progress=false", "comm.timeout_s=5", "data.dir=/tmp"}).empty());
}

TEST(RankConsistency, MessageNamesKeysAndRanks) {
  const std::vector<AgreementItem> items = {{"seed", 0}, {"optimizer.params.lr", 0}, {"x", 0}};
  EXPECT_EQ(disagreement_message(items, {{1, 2, 3}, {1, 2, 3}, {1, 2, 3}}), "");
  EXPECT_EQ(disagreement_message(items, {{1, 2, 3}, {1, 9, 3}, {5, 9, 3}}),
            "ranks disagree on config: seed (rank 2 differs from rank 0), optimizer.params.lr "
            "(ranks 1, 2 differ from rank 0)");
}

TEST(RankConsistency, DataFingerprintSeesSizeAndContents) {
  const std::string dir = testing::TempDir();
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
    return dir + "/" + name;
  };
  const std::string a = write("fp_a.bin", std::string(10000, 'a'));
  const std::string b = write("fp_b.bin", std::string(10000, 'a'));
  std::string c_bytes(10000, 'a');
  c_bytes[5000] = 'b';  // the middle sample
  const std::string c = write("fp_c.bin", c_bytes);
  const std::string d = write("fp_d.bin", std::string(10001, 'a'));
  EXPECT_EQ(data_fingerprint({a}), data_fingerprint({b}));  // paths do not matter
  EXPECT_NE(data_fingerprint({a}), data_fingerprint({c}));
  EXPECT_NE(data_fingerprint({a}), data_fingerprint({d}));
  EXPECT_NE(data_fingerprint({a}), data_fingerprint({a, b}));
}

// tide's learning rate against DeepSpeed's own engine (tests/fixtures/deepspeed_lr.json,
// written by tools/gen_lr_fixture.py with deepspeed.initialize): the same scheduler section,
// read through tide's config (its defaults, total_num_steps, how warmup_max_lr relates to
// optimizer.params.lr), must give the lr DeepSpeed applies at each of 200 steps.

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "tide/config/config.h"

using namespace tide;
using json = nlohmann::json;

TEST(LrFixture, EveryStepMatchesDeepSpeed) {
  std::ifstream f(std::string(TIDE_SOURCE_DIR) + "/tests/fixtures/deepspeed_lr.json");
  ASSERT_TRUE(f.good()) << "tests/fixtures/deepspeed_lr.json is missing";
  const json fx = json::parse(f);
  const int64_t steps = fx["steps"].get<int64_t>();
  int types_seen = 0;
  std::string last_type;
  for (const json& c : fx["cases"]) {
    json cfg = {{"train_steps", steps},
                {"optimizer", {{"params", {{"lr", fx["optimizer_lr"]}}}}},
                {"scheduler", {{"type", c["type"]}, {"params", c["params"]}}}};
    const TrainConfig tc = parse_train_config(cfg);  // a config file: DeepSpeed's defaults
    if (c["type"] != last_type) ++types_seen, last_type = c["type"];
    ASSERT_EQ(c["lr"].size(), static_cast<size_t>(steps));
    for (int64_t k = 0; k < steps; ++k) {
      const double want = c["lr"][k].get<double>(), got = lr_at(k, tc.lr_schedule);
      ASSERT_NEAR(got, want, 1e-7 * std::abs(want))
          << c["type"] << " " << c["params"].dump() << " step " << k;
    }
  }
  EXPECT_EQ(types_seen, 3);  // WarmupLR, WarmupDecayLR, WarmupCosineLR
}

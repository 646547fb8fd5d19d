// The fp16 loss scaler against DeepSpeed's own (tests/fixtures/deepspeed_loss_scale.json,
// written by tools/gen_loss_scale_fixture.py with DeepSpeed 0.19.8's DynamicLossScaler built
// from each fp16 section): the same overflow pattern gives the same scale after every step,
// the same hysteresis, and the same stop at the minimum scale.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tide/core/error.h"
#include "tide/optim/loss_scaler.h"

using namespace tide;
using json = nlohmann::json;

namespace {

Fp16LossScale settings_of(const json& fp16) {
  Fp16LossScale o;
  o.initial_scale_power = fp16.value("initial_scale_power", o.initial_scale_power);
  o.loss_scale_window = fp16.value("loss_scale_window", o.loss_scale_window);
  o.hysteresis = fp16.value("hysteresis", o.hysteresis);
  o.consecutive_hysteresis = fp16.value("consecutive_hysteresis", o.consecutive_hysteresis);
  o.min_loss_scale = fp16.value("min_loss_scale", o.min_loss_scale);
  return o;
}

}  // namespace

TEST(DynamicLossScaler, EveryStepMatchesDeepSpeed) {
  std::ifstream f(std::string(TIDE_SOURCE_DIR) + "/tests/fixtures/deepspeed_loss_scale.json");
  ASSERT_TRUE(f.good()) << "tests/fixtures/deepspeed_loss_scale.json is missing";
  const json fx = json::parse(f);
  int stops = 0, halvings = 0, doublings = 0;
  for (const json& c : fx["cases"]) {
    DynamicLossScaler s(settings_of(c["fp16"]));
    int step = 0;
    for (const json& want : c["steps"]) {
      const std::string where = c["fp16"].dump() + ", step " + std::to_string(step++);
      ASSERT_EQ(s.scale(), want["scale"].get<double>()) << where;
      const bool overflow = want["overflow"].get<bool>();
      if (want.contains("raised")) {
        EXPECT_THROW(s.update(overflow), Error) << where;
        ++stops;
        break;
      }
      EXPECT_EQ(s.update(overflow), !overflow) << where;
      EXPECT_EQ(s.scale(), want["next"].get<double>()) << where;
      EXPECT_EQ(s.hysteresis(), want["hysteresis"].get<int>()) << where;
      halvings += s.scale() < want["scale"].get<double>();
      doublings += s.scale() > want["scale"].get<double>();
    }
  }
  // The fixture exercises every rule: the stop at the minimum, backing off, growing.
  EXPECT_EQ(stops, 2);
  EXPECT_GT(halvings, 10);
  EXPECT_GT(doublings, 10);
}

TEST(DynamicLossScaler, CountsSkippedStepsAndRestoresItsState) {
  Fp16LossScale o;
  o.hysteresis = 1;
  DynamicLossScaler s(o);
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.skipped_steps(), 1);
  DynamicLossScaler resumed(o);
  resumed.restore(s.state());
  for (int i = 0; i < 2000; ++i) {
    const bool overflow = i % 700 == 3;
    EXPECT_EQ(s.update(overflow), resumed.update(overflow));
    ASSERT_EQ(s.scale(), resumed.scale()) << i;
  }
}

TEST(DynamicLossScaler, RejectsBadSettingsNamingTheKey) {
  Fp16LossScale o;
  o.loss_scale_window = 0;
  EXPECT_THROW(DynamicLossScaler{o}, Error);
  o = {};
  o.hysteresis = 0;
  EXPECT_THROW(DynamicLossScaler{o}, Error);
  o = {};
  o.min_loss_scale = 0;
  try {
    DynamicLossScaler s(o);
    FAIL() << "min_loss_scale 0 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fp16.min_loss_scale"), std::string::npos) << e.what();
  }
}

TEST(StaticLossScaler, NeverChangesButStillSkipsNonFinite) {
  StaticLossScaler s;
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_FALSE(s.update(true));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_EQ(s.skipped_steps(), 1);
  EXPECT_THROW(StaticLossScaler{0.0}, Error);
}

TEST(LossScaler, DynamicForF16StaticOtherwise) {
  EXPECT_EQ(make_loss_scaler(DType::F16)->scale(), 65536.0);
  Fp16LossScale fixed;
  fixed.loss_scale = 128;
  EXPECT_EQ(make_loss_scaler(DType::F16, fixed)->scale(), 128.0);
  EXPECT_EQ(make_loss_scaler(DType::BF16)->scale(), 1.0);
  EXPECT_EQ(make_loss_scaler(DType::F32)->scale(), 1.0);
}

#include <gtest/gtest.h>

#include "tide/core/error.h"
#include "tide/optim/loss_scaler.h"

using namespace tide;

TEST(DynamicLossScaler, BacksOffOnOverflowAndSkipsTheStep) {
  DynamicLossScaler s;
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_TRUE(s.update(false));
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 32768.0f);
  EXPECT_EQ(s.good_steps(), 0);
  EXPECT_EQ(s.skipped_steps(), 1);
  EXPECT_EQ(s.inv_scale(), 1.0f / 32768.0f);
}

TEST(DynamicLossScaler, GrowsAfterIntervalOfGoodSteps) {
  DynamicLossScalerOptions o;
  o.init_scale = 1024.0f;
  o.growth_interval = 3;
  DynamicLossScaler s(o);
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 1024.0f);
  EXPECT_TRUE(s.update(false));  // third consecutive good step
  EXPECT_EQ(s.scale(), 2048.0f);
  // An overflow resets the count: two good, one bad, two good -> no growth.
  s.update(false);
  s.update(false);
  s.update(true);
  EXPECT_EQ(s.scale(), 1024.0f);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 1024.0f);
  s.update(false);
  EXPECT_EQ(s.scale(), 2048.0f);
}

TEST(DynamicLossScaler, DefaultIntervalIs1000) {
  DynamicLossScaler s;
  for (int i = 0; i < 999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 65536.0f);
  s.update(false);
  EXPECT_EQ(s.scale(), 131072.0f);
}

TEST(DynamicLossScaler, StaysWithinMinAndMax) {
  DynamicLossScalerOptions o;
  o.init_scale = 4.0f;
  o.min_scale = 1.0f;
  o.max_scale = 8.0f;
  o.growth_interval = 1;
  DynamicLossScaler s(o);
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 1.0f);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 8.0f);
}

TEST(DynamicLossScaler, RejectsBadOptions) {
  DynamicLossScalerOptions o;
  o.backoff_factor = 1.5f;
  EXPECT_THROW(DynamicLossScaler{o}, Error);
  o = {};
  o.growth_interval = 0;
  EXPECT_THROW(DynamicLossScaler{o}, Error);
  o = {};
  o.init_scale = 0.5f;  // below min_scale 1
  EXPECT_THROW(DynamicLossScaler{o}, Error);
}

TEST(StaticLossScaler, NeverChangesButStillSkipsNonFinite) {
  StaticLossScaler s;
  EXPECT_EQ(s.scale(), 1.0f);
  EXPECT_FALSE(s.update(true));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 1.0f);
  EXPECT_EQ(s.skipped_steps(), 1);
  EXPECT_THROW(StaticLossScaler{0.0f}, Error);
}

TEST(LossScaler, DynamicForF16StaticOtherwise) {
  EXPECT_EQ(make_loss_scaler(DType::F16)->scale(), 65536.0f);
  EXPECT_EQ(make_loss_scaler(DType::BF16)->scale(), 1.0f);
  EXPECT_EQ(make_loss_scaler(DType::F32)->scale(), 1.0f);
}

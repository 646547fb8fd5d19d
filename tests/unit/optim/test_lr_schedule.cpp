#include <gtest/gtest.h>

#include "tide/core/error.h"
#include "tide/optim/lr_schedule.h"

using namespace tide;

TEST(LrSchedule, WarmupCosineAndFloorByHand) {
  // lr 1e-3, min 1e-4, warmup 10, max_steps 110 (100 steps of cosine).
  const LrSchedule s{1e-3f, 1e-4f, 10, 110};
  EXPECT_FLOAT_EQ(lr_at(0, s), 1e-4f);     // 1e-3 * 1/10
  EXPECT_FLOAT_EQ(lr_at(4, s), 5e-4f);     // 1e-3 * 5/10
  EXPECT_FLOAT_EQ(lr_at(9, s), 1e-3f);     // end of warmup
  EXPECT_FLOAT_EQ(lr_at(10, s), 1e-3f);    // cosine starts at the peak: r = 0
  EXPECT_FLOAT_EQ(lr_at(60, s), 5.5e-4f);  // r = 1/2: min + (lr-min)/2
  // r = 1/4: 0.5*(1+cos(pi/4)) = 0.853553...; 1e-4 + 0.853553*9e-4
  EXPECT_NEAR(lr_at(35, s), 1e-4 + 0.8535533905932737 * 9e-4, 1e-10);
  EXPECT_FLOAT_EQ(lr_at(110, s), 1e-4f);  // r = 1: min_lr
  EXPECT_FLOAT_EQ(lr_at(111, s), 1e-4f);  // constant afterwards
  EXPECT_FLOAT_EQ(lr_at(1000000, s), 1e-4f);
}

TEST(LrSchedule, NoWarmupStartsAtPeak) {
  const LrSchedule s{6e-4f, 0.0f, 0, 100};
  EXPECT_FLOAT_EQ(lr_at(0, s), 6e-4f);
  EXPECT_FLOAT_EQ(lr_at(50, s), 3e-4f);
  EXPECT_FLOAT_EQ(lr_at(100, s), 0.0f);
}

TEST(LrSchedule, ConstantWhenMinEqualsPeak) {
  const LrSchedule s{3e-4f, 3e-4f, 0, 10};
  for (int64_t t : {0, 5, 10, 11}) EXPECT_FLOAT_EQ(lr_at(t, s), 3e-4f);
}

TEST(LrSchedule, RejectsBadSchedules) {
  EXPECT_THROW(lr_at(0, LrSchedule{1e-3f, 1e-4f, 10, 10}), Error);  // no room for decay
  EXPECT_THROW(lr_at(0, LrSchedule{1e-3f, 2e-3f, 0, 10}), Error);   // min above peak
  EXPECT_THROW(lr_at(0, LrSchedule{1e-3f, 0.0f, -1, 10}), Error);
  EXPECT_THROW(lr_at(-1, LrSchedule{1e-3f, 0.0f, 0, 10}), Error);
  try {
    check_lr_schedule(LrSchedule{1e-3f, 0.0f, 20, 10});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_steps"), std::string::npos);
  }
}

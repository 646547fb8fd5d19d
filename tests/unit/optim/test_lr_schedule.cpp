// The learning-rate schedules (optim/lr_schedule.h) by hand: DeepSpeed's formulas on numbers
// that can be checked on paper. tests/unit/train/test_lr_fixture.cpp compares them with
// DeepSpeed's own engine.

#include <gtest/gtest.h>

#include <cmath>

#include "tide/core/error.h"
#include "tide/optim/lr_schedule.h"

using namespace tide;

namespace {

LrSchedule schedule(LrScheduleType type) {
  LrSchedule s;
  s.type = type;
  return s;
}

}  // namespace

TEST(LrSchedule, WarmupLRLogByHand) {
  LrSchedule s = schedule(LrScheduleType::WARMUP_LR);
  s.warmup_min_lr = 1e-4;
  s.warmup_max_lr = 1e-3;
  s.warmup_num_steps = 100;
  EXPECT_DOUBLE_EQ(lr_at(0, s), 1e-4);                // before DeepSpeed's first scheduler.step()
  EXPECT_DOUBLE_EQ(lr_at(1, s), 1e-4);                // iteration 0: log(1) = 0
  EXPECT_DOUBLE_EQ(lr_at(10, s), 1e-4 + 9e-4 * 0.5);  // iteration 9: log(10) / log(100)
  EXPECT_DOUBLE_EQ(lr_at(100, s), 1e-4 + 9e-4 * std::log(100.0) / std::log(100.0));
  EXPECT_DOUBLE_EQ(lr_at(101, s), 1e-3);  // iteration 100: warmup over, the peak from then on
  EXPECT_DOUBLE_EQ(lr_at(100000, s), 1e-3);
}

TEST(LrSchedule, WarmupDecayLRLinearByHand) {
  LrSchedule s = schedule(LrScheduleType::WARMUP_DECAY_LR);
  s.warmup_max_lr = 1e-3;
  s.warmup_num_steps = 10;
  s.warmup_type = WarmupType::LINEAR;
  s.total_num_steps = 110;
  EXPECT_DOUBLE_EQ(lr_at(0, s), 0.0);
  EXPECT_DOUBLE_EQ(lr_at(1, s), 0.0);    // iteration 0: 0 / 10
  EXPECT_DOUBLE_EQ(lr_at(6, s), 5e-4);   // iteration 5: 5 / 10
  EXPECT_DOUBLE_EQ(lr_at(11, s), 1e-3);  // iteration 10: (110 - 10) / 100
  EXPECT_DOUBLE_EQ(lr_at(61, s), 5e-4);  // iteration 60: 50 / 100
  EXPECT_DOUBLE_EQ(lr_at(111, s), 0.0);  // iteration 110: the end
  EXPECT_DOUBLE_EQ(lr_at(500, s), 0.0);  // clamped at 0, never negative
}

TEST(LrSchedule, WarmupCosineLRScalesTheOptimizerLr) {
  LrSchedule s = schedule(LrScheduleType::WARMUP_COSINE_LR);
  s.lr = 2e-3;
  s.warmup_num_steps = 10;
  s.warmup_type = WarmupType::LINEAR;
  s.warmup_min_ratio = 0.5;
  s.cos_min_ratio = 0.1;
  s.total_num_steps = 110;
  EXPECT_DOUBLE_EQ(lr_at(0, s), 0.0);          // DeepSpeed: 0 before the first step(), whatever
  EXPECT_DOUBLE_EQ(lr_at(1, s), 1e-3);         // warmup_min_ratio: iteration 0 -> 0.5 * lr
  EXPECT_DOUBLE_EQ(lr_at(6, s), 2e-3 * 0.75);  // iteration 5: 0.5 + 0.5 * 5/10
  EXPECT_DOUBLE_EQ(lr_at(11, s), 2e-3 * (0.1 + 0.9 * (1 + std::cos(M_PI / 100)) / 2));
  EXPECT_DOUBLE_EQ(lr_at(60, s), 2e-3 * 0.55);  // iteration 59: progress 1/2
  EXPECT_DOUBLE_EQ(lr_at(110, s), 2e-3 * 0.1);  // iteration 109: progress 1, the floor
  EXPECT_DOUBLE_EQ(lr_at(5000, s), 2e-3 * 0.1);
}

TEST(LrSchedule, DeepSpeedDefaults) {
  // Log warmup over 1000 steps, a floor of 1e-4 of lr: the first two steps at 0.
  LrSchedule s = schedule(LrScheduleType::WARMUP_COSINE_LR);
  s.total_num_steps = 2000;
  EXPECT_EQ(s.warmup_num_steps, 1000);
  EXPECT_EQ(s.warmup_type, WarmupType::LOG);
  EXPECT_DOUBLE_EQ(s.cos_min_ratio, 1e-4);
  EXPECT_DOUBLE_EQ(lr_at(0, s), 0.0);
  EXPECT_DOUBLE_EQ(lr_at(1, s), 0.0);
  EXPECT_GT(lr_at(2, s), 0.0);
  EXPECT_DOUBLE_EQ(lr_at(1000000, s), 1e-3 * 1e-4);
}

TEST(LrSchedule, ConstantIsTheOptimizerLr) {
  LrSchedule s = schedule(LrScheduleType::CONSTANT);
  s.lr = 3e-4;
  for (int64_t t : {0, 1, 5, 10000}) EXPECT_EQ(lr_at(t, s), 3e-4);
}

TEST(LrSchedule, OneWarmupStepCountsAsTwo) {
  // DeepSpeed: warmup_num_steps = max(2, n), so n = 1 still spends iteration 0 at the start.
  LrSchedule s = schedule(LrScheduleType::WARMUP_LR);
  s.warmup_num_steps = 1;
  EXPECT_DOUBLE_EQ(lr_at(1, s), 0.0);
  EXPECT_DOUBLE_EQ(lr_at(2, s), 1e-3);
}

TEST(LrSchedule, RejectsBadSchedules) {
  auto bad = [](auto change) {
    LrSchedule s = schedule(LrScheduleType::WARMUP_COSINE_LR);
    change(s);
    return s;
  };
  EXPECT_THROW(lr_at(0, bad([](LrSchedule& s) { s.warmup_num_steps = 0; })), Error);
  EXPECT_THROW(lr_at(0, bad([](LrSchedule& s) { s.total_num_steps = 0; })), Error);
  EXPECT_THROW(lr_at(0, bad([](LrSchedule& s) { s.cos_min_ratio = 1.5; })), Error);
  EXPECT_THROW(lr_at(0, bad([](LrSchedule& s) { s.warmup_min_ratio = -0.1; })), Error);
  EXPECT_THROW(lr_at(0, bad([](LrSchedule& s) { s.warmup_max_lr = NAN; })), Error);
  EXPECT_THROW(lr_at(0, bad([](LrSchedule& s) { s.lr = -1; })), Error);
  EXPECT_THROW(lr_at(-1, schedule(LrScheduleType::WARMUP_LR)), Error);
  EXPECT_THROW(parse_lr_schedule_type("OneCycle"), Error);
  EXPECT_THROW(parse_warmup_type("exp"), Error);
  EXPECT_EQ(parse_lr_schedule_type(lr_schedule_type_name(LrScheduleType::WARMUP_DECAY_LR)),
            LrScheduleType::WARMUP_DECAY_LR);
}

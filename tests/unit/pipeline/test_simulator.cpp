// The simulator on schedules small enough to time by hand.
#include <gtest/gtest.h>

#include "tide/core/error.h"
#include "tide/pipeline/generators.h"

using namespace tide::pipeline;

TEST(Simulator, TwoStagesOneMicroBatchByHand) {
  Schedule s = make_schedule("hand", 2, 1);
  s.actions[0] = {F(0), B(0), W(0)};
  s.actions[1] = {F(0), B(0), W(0)};
  add_communication(s);
  CostModel c;
  c.t_f = 1;
  c.t_b = 2;
  c.t_w = 3;
  c.t_comm = 0.5;
  c.m_b = 4;
  c.m_w = 1;
  const SimResult r = simulate(s, c);
  // Stage 0: F [0,1); the gradient leaves stage 1 at 4.5 and arrives at 5: B [5,7), W [7,10).
  // Stage 1: F [1.5,2.5), B [2.5,4.5), W [4.5,7.5).
  ASSERT_EQ(r.timeline[0].size(), 3u);
  EXPECT_DOUBLE_EQ(r.timeline[0][1].start, 5.0);
  EXPECT_DOUBLE_EQ(r.timeline[0][2].end, 10.0);
  EXPECT_DOUBLE_EQ(r.timeline[1][0].start, 1.5);
  EXPECT_DOUBLE_EQ(r.timeline[1][2].start, 4.5);
  EXPECT_DOUBLE_EQ(r.makespan, 10.0);
  EXPECT_DOUBLE_EQ(r.stages[0].bubble, 4.0);  // span 10, busy 6
  EXPECT_DOUBLE_EQ(r.stages[0].bubble_rate, 0.4);
  EXPECT_DOUBLE_EQ(r.stages[1].bubble, 0.0);  // span 6, busy 6
  EXPECT_DOUBLE_EQ(r.bubble, 4.0);
  EXPECT_DOUBLE_EQ(r.peak_memory, 4.0);
}

TEST(Simulator, MemoryFollowsFThenBThenW) {
  // One stage, F0 F1 B0 B1 W0 W1 with M_B = 10, M_W = 3: 10, 20, then B frees 7 each, W 3 each.
  Schedule s = make_schedule("mem", 1, 2);
  s.actions[0] = {F(0), F(1), B(0), B(1), W(0), W(1)};
  add_communication(s);
  CostModel c;
  c.m_b = 10;
  c.m_w = 3;
  EXPECT_DOUBLE_EQ(simulate(s, c).peak_memory, 20.0);
  // Interleaving W earlier lowers the peak: F0 B0 W0 F1 B1 W1 keeps one micro-batch at a time.
  s.actions[0] = {F(0), B(0), W(0), F(1), B(1), W(1)};
  add_communication(s);
  EXPECT_DOUBLE_EQ(simulate(s, c).peak_memory, 10.0);
}

TEST(Simulator, ChunksDivideTimeAndMemory) {
  CostModel c;
  c.m_b = 2;
  const SimResult r = simulate(zb_v(1, 1), c);
  // One stage, two chunks: six passes of 1/2 each and at most both chunks' activations (2).
  EXPECT_DOUBLE_EQ(r.makespan, 3.0);
  EXPECT_DOUBLE_EQ(r.peak_memory, 2.0);
}

TEST(Simulator, InvalidScheduleIsRejectedBeforeTiming) {
  Schedule s = make_schedule("broken", 1, 1);
  s.actions[0] = {F(0), W(0), B(0)};
  add_communication(s);
  EXPECT_THROW(simulate(s, CostModel{}), tide::Error);
}

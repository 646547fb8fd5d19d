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

TEST(Simulator, PerStageCostsByHand) {
  // The schedule above with stage 1 slower (F 2, B 3, W 1) and its messages slower (t_comm 1;
  // a message takes its sender's latency). Stage 0: F [0,1); its activation arrives at 1.5.
  // Stage 1: F [1.5,3.5), B [3.5,6.5), W [6.5,7.5); its gradient (sent at 6.5) arrives at 7.5.
  // Stage 0: B [7.5,9.5), W [9.5,12.5).
  Schedule s = make_schedule("hand", 2, 1);
  s.actions[0] = {F(0), B(0), W(0)};
  s.actions[1] = {F(0), B(0), W(0)};
  add_communication(s);
  CostModel c0;
  c0.t_f = 1;
  c0.t_b = 2;
  c0.t_w = 3;
  c0.t_comm = 0.5;
  CostModel c1 = c0;
  c1.t_f = 2;
  c1.t_b = 3;
  c1.t_w = 1;
  c1.t_comm = 1;
  c1.m_b = 5;
  const SimResult r = simulate(s, std::vector<CostModel>{c0, c1});
  EXPECT_DOUBLE_EQ(r.timeline[1][0].start, 1.5);
  EXPECT_DOUBLE_EQ(r.timeline[1][2].end, 7.5);
  EXPECT_DOUBLE_EQ(r.timeline[0][1].start, 7.5);
  EXPECT_DOUBLE_EQ(r.makespan, 12.5);
  EXPECT_DOUBLE_EQ(r.stages[0].bubble, 6.5);  // span 12.5, busy 6
  EXPECT_DOUBLE_EQ(r.stages[1].bubble, 0.0);  // span 6, busy 6
  EXPECT_DOUBLE_EQ(r.stages[0].peak_memory, 1.0);
  EXPECT_DOUBLE_EQ(r.stages[1].peak_memory, 5.0);
  EXPECT_THROW(simulate(s, std::vector<CostModel>{c0}), tide::Error);
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

// The generators against the zero-bubble paper's formulas (Qi et al., Table 2), measured by the
// simulator. Bubble = per-stage span minus busy time, maximum over stages (see simulator.h).
#include <gtest/gtest.h>

#include "tide/pipeline/generators.h"
#include "tide/pipeline/greedy.h"

using namespace tide::pipeline;

namespace {

CostModel costs(double f, double b, double w, double comm = 0, double m_w = 0.3) {
  CostModel c;
  c.t_f = f;
  c.t_b = b;
  c.t_w = w;
  c.t_comm = comm;
  c.m_w = m_w;
  return c;
}

constexpr double kTol = 1e-9;

}  // namespace

TEST(Generators, OneFOneBBubbleIsPMinusOneFullPasses) {
  for (const CostModel& c : {costs(1, 1, 1), costs(1, 2, 1.5), costs(0.7, 1.3, 0.4)}) {
    for (int p : {2, 4, 8}) {
      for (int m : {p, 2 * p, 3 * p}) {
        const SimResult r = simulate(one_f_one_b(p, m), c);
        EXPECT_NEAR(r.bubble, (p - 1) * (c.t_f + c.t_b + c.t_w), kTol) << "p=" << p << " m=" << m;
        EXPECT_NEAR(r.peak_memory, p * c.m_b, kTol);
        EXPECT_NEAR(r.stages[0].busy, m * (c.t_f + c.t_b + c.t_w), kTol);
      }
    }
  }
}

TEST(Generators, GPipeHasTheSameBubbleAndKeepsEveryMicroBatch) {
  const CostModel c = costs(1, 2, 1.5);
  for (int p : {2, 4}) {
    const SimResult r = simulate(gpipe(p, 3 * p), c);
    EXPECT_NEAR(r.bubble, (p - 1) * (c.t_f + c.t_b + c.t_w), kTol);
    EXPECT_NEAR(r.peak_memory, 3 * p * c.m_b, kTol);
  }
}

TEST(Generators, InterleavedDividesTheBubbleByTheChunks) {
  const CostModel c = costs(1, 1, 1);
  for (int p : {2, 4}) {
    for (int v : {2, 4}) {
      const SimResult r = simulate(interleaved_1f1b(p, 2 * p, v), c);
      EXPECT_NEAR(r.bubble, (p - 1) * (c.t_f + c.t_b + c.t_w) / v, kTol) << "p=" << p << " v=" << v;
    }
  }
}

TEST(Generators, ZbH1BubbleAndPeakMemory) {
  // (p-1)(T_F + T_B - T_W) for T_W <= T_F, T_B (the handcrafted shape assumes W is the short pass).
  for (const CostModel& c : {costs(1, 1, 1), costs(1, 1, 0.5), costs(1.2, 1, 0.8)}) {
    for (int p : {2, 4, 8}) {
      for (int m : {p, 2 * p, 3 * p}) {
        const SimResult h1 = simulate(zb_h1(p, m), c);
        const SimResult base = simulate(one_f_one_b(p, m), c);
        EXPECT_NEAR(h1.bubble, (p - 1) * (c.t_f + c.t_b - c.t_w), kTol)
            << "p=" << p << " m=" << m << " tf=" << c.t_f << " tw=" << c.t_w;
        EXPECT_NEAR(h1.peak_memory, base.peak_memory, kTol);
      }
    }
  }
  // Even when a pending W keeps all of M_B, ZB-H1 stays at 1F1B's p M_B.
  const CostModel full = costs(1, 1, 1, 0, 1.0);
  EXPECT_NEAR(simulate(zb_h1(4, 12), full).peak_memory, 4 * full.m_b, kTol);
}

TEST(Generators, ZbH2HasZeroBubbleWithEqualTimes) {
  const CostModel c = costs(1, 1, 1, 0, 1.0);  // M_W = M_B: the strictest memory count
  for (int p : {2, 4, 8}) {
    for (int m : {2 * p, 3 * p}) {
      const SimResult r = simulate(zb_h2(p, m), c);
      EXPECT_NEAR(r.bubble, 0.0, kTol) << "p=" << p << " m=" << m;
      EXPECT_NEAR(r.peak_memory, (2 * p - 1) * c.m_b, kTol);
    }
  }
}

TEST(Generators, ZbVHasZeroBubbleAtOneFOneBMemory) {
  for (const CostModel& c : {costs(1, 1, 1), costs(1, 1, 1, 0, 1.0)}) {
    for (int p : {2, 4, 8}) {
      for (int m : {2 * p, 3 * p}) {
        const SimResult r = simulate(zb_v(p, m), c);
        EXPECT_NEAR(r.bubble, 0.0, kTol) << "p=" << p << " m=" << m;
        EXPECT_LE(r.peak_memory, one_f_one_b_peak(p, m, c) + kTol);
        EXPECT_NEAR(r.stages[0].busy, m * (c.t_f + c.t_b + c.t_w), kTol);
      }
    }
  }
}

TEST(Generators, Zb1pIsNeverWorseThanZbH1) {
  const CostModel settings[] = {costs(1, 1, 1), costs(1, 1.1, 0.8, 0.05), costs(1, 0.9, 0.7, 0.02),
                                costs(0.8, 1, 1.2, 0.1), costs(1, 1.5, 0.5, 0.1)};
  for (const CostModel& c : settings) {
    for (int p : {4, 8, 16}) {
      for (int m : {p, 2 * p, 3 * p}) {
        const double limit = one_f_one_b_peak(p, m, c);
        const SimResult h1 = simulate(zb_h1(p, m), c);
        const SimResult z = simulate(zb_auto(p, m, c, limit, "zb-1p"), c);
        EXPECT_LE(z.bubble, h1.bubble + kTol) << "p=" << p << " m=" << m << " tb=" << c.t_b;
        EXPECT_LE(z.peak_memory, limit + kTol);
      }
    }
  }
}

TEST(Generators, Zb2pBubbleRateIsBelowOnePercent) {
  // Unequal passes and a non-zero link latency. T_F >= T_B here: stage 0 can run at most 2p F
  // before its first B, which cannot start before p T_F + (p-1) T_B + 2(p-1) T_comm, so with
  // T_B much larger than T_F no schedule under this limit avoids an idle start (see below).
  const CostModel c = costs(1.0, 0.9, 0.7, 0.02);
  for (int p = 4; p <= 16; ++p) {
    const int m = 3 * p;
    const double limit = 2 * one_f_one_b_peak(p, m, c);
    const SimResult r = simulate(zb_auto(p, m, c, limit, "zb-2p"), c);
    EXPECT_LT(r.bubble_rate, 0.01) << "p=" << p;
    EXPECT_LE(r.peak_memory, limit + kTol);
  }
}

TEST(Generators, Zb2pRespectsTheWarmUpLowerBound) {
  // Stage 0's first B starts no earlier than p T_F + (p-1) T_B + 2(p-1) T_comm; before it, stage 0
  // has at most 2p F to run, so its idle time is at least the difference.
  const CostModel c = costs(1.0, 1.5, 0.5, 0.1);
  for (int p : {4, 8}) {
    const SimResult r = simulate(zb_auto(p, 3 * p, c, 2 * p * c.m_b), c);
    const double bound = (p - 1) * c.t_b - p * c.t_f + 2 * (p - 1) * c.t_comm;
    EXPECT_GE(r.stages[0].bubble, bound - kTol);
  }
}

TEST(Generators, AutoScheduleFitsAnyLimitOfOneMicroBatch) {
  const CostModel c = costs(1, 1.2, 0.6, 0.05, 0.5);
  for (double limit : {1.0, 1.5, 3.0, 7.0}) {
    const SimResult r = simulate(zb_auto(4, 8, c, limit), c);
    EXPECT_LE(r.peak_memory, limit + kTol) << "limit " << limit;
  }
}

TEST(Generators, GreedyTimesMatchTheSimulator) {
  const CostModel c = costs(1, 1.1, 0.8, 0.05);
  GreedyPolicy pol;
  pol.memory_limit = 8;
  for (int bits = 0; bits < 8; ++bits) {
    pol.w_gaps = static_cast<WGaps>(bits % 3);
    pol.alternate = bits & 4;
    GreedyStats st;
    Schedule s = greedy_order("g", 6, 12, c, pol, &st);
    add_communication(s);
    const SimResult r = simulate(s, c);
    EXPECT_NEAR(st.bubble, r.bubble, kTol);
    EXPECT_NEAR(st.makespan, r.makespan, kTol);
    EXPECT_NEAR(st.peak_memory, r.peak_memory, kTol);
  }
}

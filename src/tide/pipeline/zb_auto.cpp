// The automatic zero-bubble schedule: the greedy heuristic of Qi et al. run for every
// combination of its binary choices, keeping the best schedule by simulation.
#include <tuple>

#include "tide/core/error.h"
#include "tide/pipeline/generators.h"
#include "tide/pipeline/greedy.h"

namespace tide::pipeline {

double one_f_one_b_peak(int p, int m, const CostModel& cost) {
  return std::min(p, m) * cost.m_b;
}

Schedule zb_auto(int p, int m, const CostModel& cost, double memory_limit, std::string name) {
  TIDE_CHECK(p >= 1 && m >= 1, "{}: stages ({}) and micro-batches ({}) must be at least 1", name, p,
             m);
  // The grid: 3 W-gap rules x 2^5 switches (less the combinations that mean the same), each one
  // greedy run of O(p * m) decisions that also times itself, so candidates are ranked without
  // building their communication or re-simulating; only the winner is completed and validated.
  Schedule best;
  std::tuple<double, double, double> best_score;
  bool have = false;
  for (int bits = 0; bits < 96; ++bits) {
    GreedyPolicy pol;
    pol.memory_limit = memory_limit;
    pol.w_gaps = static_cast<WGaps>(bits % 3);
    pol.prefer_f = (bits / 3) & 1;
    pol.f_ahead = (bits / 3) & 2;
    pol.alternate = (bits / 3) & 4;
    pol.warmup_may_delay_b = (bits / 3) & 8;
    pol.cap_in_flight_like_1f1b = (bits / 3) & 16;
    if (pol.alternate && pol.prefer_f) continue;  // prefer_f only matters when not alternating
    GreedyStats st;
    Schedule s = greedy_order(name, p, m, cost, pol, &st);
    // Smallest bubble, then shortest makespan, then least memory.
    const auto score = std::tuple{st.bubble, st.makespan, st.peak_memory};
    if (!have || score < best_score) {
      best = std::move(s);
      best_score = score;
      have = true;
    }
  }
  add_communication(best);
  validate(best);
  return best;
}

}  // namespace tide::pipeline

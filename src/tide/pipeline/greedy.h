#pragma once
// Greedy list scheduler: builds a single-chunk schedule by simulating all stages together in
// time order and letting each idle stage pick its next action by fixed rules. It is the engine
// of the automatic zero-bubble heuristic (Qi et al., section 3 and appendix) and also derives the
// ZB-H2 order.
//
// Rules, for a stage that is free at time t:
//   1. Run B if its gradient has arrived (B is on the critical path: it unblocks stage i-1).
//   2. Run F if its activation has arrived and one more micro-batch fits under the memory limit
//      (so the warm-up runs as many F as memory allows before the first B). After the warm-up,
//      with `alternate`, F and B take turns (the 1F1B pattern).
//      With `prefer_f`, or with `f_ahead` when the next stage has run as many F as this one
//      (it is starved), F goes before a ready B.
//   3. Otherwise run a pending W if: the wait until the next F/B can start is at least T_W (or
//      any wait, see WGaps); or F is blocked by the memory limit (W frees M_W).
//   4. Otherwise stay idle until an input arrives.
// After all F and B, the remaining W run back to back.

#include <string>

#include "tide/pipeline/schedule.h"
#include "tide/pipeline/simulator.h"

namespace tide::pipeline {

// Which idle gaps a pending W fills (besides W forced by the memory limit).
enum class WGaps {
  AtLeastTw,      // only gaps of at least T_W (a W never delays the next F or B)
  AnyInCooldown,  // also shorter gaps once F are used up (the tail, where idling is pure loss)
  Any,            // every gap
};

struct GreedyPolicy {
  double memory_limit = 0;               // per stage, same unit as CostModel::m_b
  WGaps w_gaps = WGaps::AtLeastTw;       // which idle gaps get a W
  bool prefer_f = false;                 // F before B when both are ready (when not alternating)
  bool f_ahead = true;                   // keep stage i at least one F ahead of stage i+1
  bool alternate = true;                 // after the warm-up, alternate F and B (the 1F1B pattern)
  bool warmup_may_delay_b = true;        // warm-up F even if it delays the first B
  bool cap_in_flight_like_1f1b = false;  // stage i: at most p-i micro-batches between F and B
};

// What the greedy run itself timed (the same numbers simulate() gives for the schedule; the
// grid search ranks candidates by these without re-simulating each one).
struct GreedyStats {
  double bubble = 0;  // max over stages of span - busy (see simulator.h)
  double makespan = 0;
  double peak_memory = 0;
};

// Compute order only (call add_communication() to get an executable schedule).
Schedule greedy_order(std::string name, int stages, int microbatches, const CostModel& cost,
                      const GreedyPolicy& policy, GreedyStats* stats = nullptr);

}  // namespace tide::pipeline

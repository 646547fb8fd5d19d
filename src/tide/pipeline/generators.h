#pragma once
// Schedule generators. Each returns a validated, executable Schedule (compute order plus the
// send/recv pairs and the optimizer step, see schedule.h). p = stages, m = micro-batches.
//
//   gpipe        all F, then all B+W                       bubble (p-1)(T_F+T_B+T_W), peak m M_B
//   1f1b         warm-up p-1-i F, then F/B alternate, W right after its B
//                                                          bubble (p-1)(T_F+T_B+T_W), peak p M_B
//   interleaved  Megatron's interleaved 1F1B with v chunks per stage (m a multiple of p)
//                                                          bubble (p-1)(T_F+T_B+T_W)/v
//   zb-h1        1F1B order with stage i deferring i W    bubble (p-1)(T_F+T_B-T_W), peak p M_B
//   zb-h2        2p-1-2i F in warm-up, W fill every gap    bubble (p-1)(T_F+T_B-2T_W), peak (2p-1)
//   M_B zb-auto      Qi et al.'s heuristic under a memory limit, grid search over its choices
//   zb-1p/zb-2p  zb-auto with 1F1B's peak (p M_B) / twice that as the limit
//   zb-v         two chunks per stage in a V (stage i holds virtual stages i and 2p-1-i)
//                                                          zero bubble at peak p M_B if T_F=T_B=T_W
// (bubble formulas: the paper's Table 2, T_comm = 0. tests/unit/pipeline checks them with the
// simulator: 1f1b/gpipe for any times, zb-h1 for T_W <= T_F, T_B, the rest for equal times.)

#include <string>
#include <vector>

#include "tide/pipeline/schedule.h"
#include "tide/pipeline/simulator.h"

namespace tide::pipeline {

Schedule gpipe(int p, int m);
Schedule one_f_one_b(int p, int m);
Schedule interleaved_1f1b(int p, int m, int chunks);
Schedule zb_h1(int p, int m);
Schedule zb_h2(int p, int m);
Schedule zb_v(int p, int m);
// The automatic schedule: the best (smallest bubble, then makespan) of the greedy heuristic
// over its binary choices, all under `memory_limit` per stage.
Schedule zb_auto(int p, int m, const CostModel& cost, double memory_limit,
                 std::string name = "zb-auto");

// 1F1B's peak activation memory per stage: p micro-batches in flight on stage 0.
double one_f_one_b_peak(int p, int m, const CostModel& cost);

// ---- Choosing a schedule by name (the `tide schedule` command and the benchmarks) ----

struct ScheduleOptions {
  std::string schedule = "1f1b";
  int stages = 4;
  int microbatches = 8;
  int chunks = 2;  // interleaved only (zb-v always uses 2)
  CostModel cost;
  double memory_limit = 0;  // per stage; 0 = none (zb-auto: 1F1B's peak)
};

const std::vector<std::string>& schedule_names();

// Throws tide::Error with one line naming the bad option and the fix.
void check_options(const ScheduleOptions& o);

// check_options, generate, and (if a memory limit is set) check the schedule's peak against it.
Schedule build_schedule(const ScheduleOptions& o);

}  // namespace tide::pipeline

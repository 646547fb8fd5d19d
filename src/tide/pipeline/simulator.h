#pragma once
// Discrete-event simulator: times a Schedule under a cost model and reports makespan, bubbles
// and peak activation memory per stage.
//
// Time model: a stage runs its actions in list order, one at a time. A compute action starts
// when the stage is free; a send is eager and takes no stage time; a recv waits until its
// message has arrived, T_comm after the send (T_comm is link latency; messages do not queue on a
// link). The optimizer step takes no time here.
//
// Costs are given for a whole stage (all its layers). With v chunks per stage each chunk holds
// 1/v of the stage's layers, so per-chunk F/B/W times and activation memory are divided by v.
//
// Memory model (activations of the stage): F adds M_B when it starts; B frees M_B - M_W when it
// ends (it keeps M_W: the inputs W needs); W frees M_W when it ends.
//
// Bubble (the definition used everywhere in tide, tests and docs):
//   span(stage)   = end of its last compute - start of its first compute
//   busy(stage)   = sum of its compute times (m (T_F + T_B + T_W) for any full schedule)
//   bubble(stage) = span - busy           (idle time between its first and last action)
//   bubble rate   = bubble / span         (per stage, as in Qi et al.: bubble / total)
// and for the schedule the maximum over stages. Counting from each stage's own start (not from
// time 0) is what the zero-bubble paper does: with the optimizer step post-validated, the next
// iteration's warm-up overlaps this one's tail, so a parallelogram layout repeats with period
// `span` and has no bubble. For 1F1B and ZB-H1 the maximum is stage 0, which starts at 0 and
// ends last, so it equals the global makespan minus busy time.

#include <vector>

#include "tide/pipeline/schedule.h"

namespace tide::pipeline {

struct CostModel {
  double t_f = 1.0;     // forward time of one micro-batch through a stage
  double t_b = 1.0;     // input-gradient backward time
  double t_w = 1.0;     // weight-gradient backward time
  double t_comm = 0.0;  // latency of one stage-to-stage send
  double m_b = 1.0;     // activation memory one micro-batch keeps from F until its B
  double m_w = 1.0;     // part of it kept from B until W (m_w <= m_b)
};

struct TimedAction {
  Action action;
  double start = 0;
  double end = 0;
};

struct StageStats {
  double start = 0;  // first compute start
  double end = 0;    // last compute end
  double busy = 0;
  double bubble = 0;       // (end - start) - busy
  double bubble_rate = 0;  // bubble / (end - start)
  double peak_memory = 0;  // activation memory high-water mark
};

struct SimResult {
  std::vector<std::vector<TimedAction>> timeline;  // [stage] -> compute actions with times
  std::vector<StageStats> stages;
  double makespan = 0;     // global: 0 to the last compute end
  double bubble = 0;       // max over stages
  double bubble_rate = 0;  // max over stages
  double peak_memory = 0;  // max over stages
};

// Per-chunk duration and memory of a compute action for a schedule with `chunks` chunks.
double op_time(const CostModel& c, Op op, int chunks);

// Times `s` (validated first: throws tide::Error if the schedule is invalid).
SimResult simulate(const Schedule& s, const CostModel& cost);
// The same with a cost model per stage (`stage_costs[i]` times stage i's actions and memory; a
// message takes its sender's t_comm): stages that differ, e.g. times measured on real ranks
// where the first stage embeds and the last runs the head (exec/pipeline_measure.h).
SimResult simulate(const Schedule& s, const std::vector<CostModel>& stage_costs);

}  // namespace tide::pipeline

#pragma once
// Measured stage times and the automatic schedule from measurement (issue 13).
//
// Why: the automatic zero-bubble generator (pipeline::zb_auto, Qi et al. section 3) places W
// passes into the gaps a schedule leaves, and how big those gaps are depends on T_F, T_B, T_W
// and T_comm. Guessed figures give a schedule for a machine that does not exist; here they come
// from a real step of the executor, traced (PipelineEngine::step with a Tracer): the F/B/W
// action spans give each stage's times, the transfers the link latency. The figures are
// gathered over the pipeline group, so every rank holds all stages' and builds the same
// schedule from them (the executor needs one schedule on every rank).
//
// Use (what pipeline.schedule = zb-auto does):
//
//   PipelineEngine engine(models, pipeline, pipeline::one_f_one_b(p, m), B, T, optimizer);
//   StepMeasurement measured;
//   StepStats st = auto_schedule_step(engine, step, seed, batch, memory_limit, &measured);
//   // engine now runs the zb-auto schedule; later steps as usual: engine.step(...)
//
// The warm-up step is a real training step (every schedule trains bitwise alike, so which one
// it ran does not show in the results).

#include <string>
#include <vector>

#include "tide/comm/process_group.h"
#include "tide/core/trace.h"
#include "tide/exec/pipeline_engine.h"
#include "tide/pipeline/schedule.h"
#include "tide/pipeline/simulator.h"

namespace tide {

struct StepMeasurement {
  // Per stage: t_f, t_b, t_w in seconds, each the stage's time for one micro-batch (the mean
  // action span per micro-batch, summed over the stage's chunks: the simulator's per-stage
  // cost); t_comm (the same on every stage, see below); m_b = m_w = 1 (tide keeps a
  // micro-batch's activations from its F until its W, so a slot is one unit until W and memory
  // limits count micro-batches in flight, M_B).
  std::vector<pipeline::CostModel> stages;
  // Per stage, from the trace: start and end of its first and last F/B/W (seconds, relative to
  // the earliest start of any stage: the ranks share the steady clock), busy (the sum of its
  // F/B/W spans), bubble = (end - start) - busy and bubble_rate = bubble / (end - start), the
  // definitions of simulator.h. peak_memory is 0 here (PipelineEngine::activation_memory).
  std::vector<pipeline::StageStats> measured;
  // Link latency, seconds: the median over the step's receives that a stage waited for ("wait
  // recv") of (the receive's completion - the later of the matching send's posting, on the
  // sender's clock, and the receive's own posting). 0 when no stage waited for a message
  // (transfers hid behind compute).
  double t_comm = 0;
  int waited_receives = 0;  // how many receives t_comm is the median of

  // What the generator takes (one cost model for all stages): the per-field maximum over
  // stages (the slowest stage paces a pipeline), m_b = m_w = 1.
  pipeline::CostModel generator_costs() const;
};

// From this rank's trace of exactly one PipelineEngine::step (a Tracer that recorded only that
// step) of `schedule` (the one the step ran). Collective over `pipeline` (every rank calls it
// after the same step; all return the same figures). Throws a tide::Error when the trace lacks
// the step's actions (e.g. the step was not traced).
StepMeasurement measure_step(const Tracer& trace, const pipeline::Schedule& schedule,
                             ProcessGroup& pipeline);

// The automatic zero-bubble schedule for the measured figures: pipeline::zb_auto over
// m.stages.size() stages and `microbatches`, with m.generator_costs(), under `memory_limit`
// micro-batches in flight per stage (units of M_B, like `tide schedule --memory-limit`; 0:
// 1F1B's peak, p). The same on every rank given the same measurement.
pipeline::Schedule auto_schedule(const StepMeasurement& m, int microbatches, double memory_limit);

// The hint the zb-auto log line ends with when `microbatches` (gradient_accumulation_steps) is
// below the stage count p: with fewer micro-batches than stages the pipeline never fills and
// most of every stage's time is bubble, which the bubble figure alone does not explain. Names
// the p micro-batches that fill it and, from the same measured times through the same
// generator and simulator, the bubbles at p and 4p micro-batches. "" when microbatches >= p.
std::string microbatch_hint(const StepMeasurement& m, int microbatches, double memory_limit);

// One training step of `engine` (its current schedule, e.g. 1F1B) traced and measured, then the
// automatic schedule for the measured figures, and the engine switched to it
// (PipelineEngine::reschedule). Collective over the engine's pipeline group (`pipeline`, the
// group the engine was built with). zb-auto places one chunk per stage, so the engine must run
// a single-chunk schedule; that and a memory_limit below one micro-batch (other than 0) are a
// tide::Error before the step runs. Returns the step's stats; `measured` (optional) receives
// the measurement.
StepStats auto_schedule_step(PipelineEngine& engine, ProcessGroup& pipeline, int64_t step,
                             uint64_t seed, const PipelineEngine::BatchFn& batch,
                             double memory_limit, StepMeasurement* measured = nullptr);

}  // namespace tide

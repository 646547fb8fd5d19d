// tide estimate sizes every schedule tide train runs: its count of micro-batches in flight per
// stage (estimate/pipeline_inflight.h) against the simulator's peak for the same schedule
// (pipeline/simulator.h) with tide's memory model, m_b = m_w = 1 (a micro-batch counts from its
// F until its W, exec/pipeline_measure.cpp). Exact for the fixed schedules, an upper bound for
// the ones built under a memory limit (zb-auto, zb-1p, zb-2p), and for ZB-V the embedding and
// the head both on stage 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tide/estimate/activation_memory.h"
#include "tide/estimate/memory_estimate.h"
#include "tide/estimate/pipeline_inflight.h"
#include "tide/model/layout.h"
#include "tide/pipeline/generators.h"
#include "tide/pipeline/simulator.h"
#include "tide/pipeline/stage_peaks.h"

using namespace tide;

namespace {

pipeline::CostModel tide_costs(double t_f = 1, double t_b = 1, double t_w = 1) {
  pipeline::CostModel c;
  c.t_f = t_f, c.t_b = t_b, c.t_w = t_w;
  c.m_b = c.m_w = 1;
  return c;
}

pipeline::Schedule build(const std::string& name, int p, int m, const pipeline::CostModel& c,
                         double memory_limit = 0) {
  pipeline::ScheduleOptions o;
  o.schedule = name;
  o.stages = p;
  o.microbatches = m;
  o.chunks = 2;
  o.cost = c;
  o.memory_limit = memory_limit;
  return pipeline::build_schedule(o);
}

// The estimate's activations of a stage in micro-batches (M_B): layer-micro-batches over the
// stage's layers (4 layers per stage, divisible by the 2 chunks of interleaved and zb-v).
double estimated_mb(Schedule s, int p, int stage, int m, double limit = 0) {
  const int v = s == Schedule::Interleaved ? 2 : 1, layers = 4;
  return static_cast<double>(inflight_layer_microbatches(s, p, stage, m, v, layers, limit)) /
         layers;
}

// Peak micro-batches in flight (F to W) of one model chunk on one stage, from the timeline.
int chunk_peak(const pipeline::SimResult& r, int stage, int chunk) {
  int now = 0, peak = 0;
  for (const pipeline::TimedAction& a : r.timeline[stage]) {
    if (a.action.chunk != chunk) continue;
    if (a.action.op == pipeline::Op::F) peak = std::max(peak, ++now);
    if (a.action.op == pipeline::Op::W) --now;
  }
  return peak;
}

struct Named {
  const char* name;
  Schedule schedule;
};
const Named kExact[] = {
    {"gpipe", Schedule::GPipe}, {"1f1b", Schedule::OneFOneB},           {"zb-h1", Schedule::ZBH1},
    {"zb-h2", Schedule::ZBH2},  {"interleaved", Schedule::Interleaved}, {"zb-v", Schedule::ZBV}};
const Named kBound[] = {
    {"zb-1p", Schedule::ZB1P}, {"zb-2p", Schedule::ZB2P}, {"zb-auto", Schedule::ZBAuto}};

}  // namespace

TEST(EstimateSchedules, FixedSchedulesEqualTheSimulatorsPeakPerStage) {
  for (const Named& n : kExact)
    for (int p : {2, 3, 4})
      for (int m : {p, 2 * p}) {
        const pipeline::SimResult r =
            pipeline::simulate(build(n.name, p, m, tide_costs()), tide_costs());
        for (int s = 0; s < p; ++s)
          EXPECT_DOUBLE_EQ(estimated_mb(n.schedule, p, s, m), r.stages[s].peak_memory)
              << n.name << " p=" << p << " m=" << m << " stage " << s;
      }
}

TEST(EstimateSchedules, AutomaticSchedulesStayWithinTheEstimatesBound) {
  // Equal times (where the bound is reached) and skewed ones, as measured times can be.
  const pipeline::CostModel costs[] = {tide_costs(), tide_costs(1, 2, 0.5), tide_costs(1, 1.3, 1.7),
                                       tide_costs(2, 1, 1)};
  for (const Named& n : kBound)
    for (int p : {2, 3, 4})
      for (int m : {p, 2 * p})
        for (const pipeline::CostModel& c : costs) {
          const pipeline::SimResult r = pipeline::simulate(build(n.name, p, m, c), c);
          EXPECT_TRUE(inflight_is_bound(n.schedule, p));
          for (int s = 0; s < p; ++s)
            EXPECT_LE(r.stages[s].peak_memory, estimated_mb(n.schedule, p, s, m))
                << n.name << " p=" << p << " m=" << m << " stage " << s << " t_b " << c.t_b;
          if (c.t_b == 1 && c.t_w == 1)  // equal times: the bound is the peak
            EXPECT_DOUBLE_EQ(r.peak_memory, estimated_mb(n.schedule, p, 0, m)) << n.name;
        }
  // zb-auto under pipeline.memory_limit = 2.5 micro-batches: at most 2 whole ones.
  const pipeline::SimResult r =
      pipeline::simulate(build("zb-auto", 4, 8, tide_costs(), 2.5), tide_costs());
  EXPECT_DOUBLE_EQ(estimated_mb(Schedule::ZBAuto, 4, 0, 8, 2.5), 2);
  EXPECT_DOUBLE_EQ(r.peak_memory, 2);
  EXPECT_FALSE(inflight_is_bound(Schedule::ZBV, 4));
}

TEST(EstimateSchedules, InputAndOutputLayersOnTheStagesThatRunThem) {
  for (const Named& n : kExact)
    for (int p : {2, 3, 4})
      for (int m : {p, 2 * p}) {
        const int v = n.schedule == Schedule::Interleaved ? 2 : 1;
        const pipeline::Schedule sched = build(n.name, p, m, tide_costs());
        const pipeline::SimResult r = pipeline::simulate(sched, tide_costs());
        const auto [in_stage, in_chunk] = sched.locate(0);
        const auto [out_stage, out_chunk] = sched.locate(sched.virtual_stages() - 1);
        EXPECT_EQ(input_layer_stage(n.schedule, p), in_stage) << n.name;
        EXPECT_EQ(output_layer_stage(n.schedule, p), out_stage) << n.name;
        if (n.schedule == Schedule::Interleaved) continue;  // counted per stage, not per chunk
        EXPECT_EQ(input_layer_microbatches(n.schedule, p, m, v), chunk_peak(r, in_stage, in_chunk))
            << n.name << " p=" << p << " m=" << m;
        EXPECT_EQ(output_layer_microbatches(n.schedule, p, m, v),
                  chunk_peak(r, out_stage, out_chunk))
            << n.name << " p=" << p << " m=" << m;
      }
}

TEST(EstimateSchedules, ZbVHoldsEmbeddingAndHeadOnStageZero) {
  TrainSetup s;
  s.model = GPTConfig{};
  s.model.n_layer = 8, s.model.n_head = 2, s.model.n_embd = 32, s.model.vocab_size = 500;
  s.model.max_seq_len = 16;
  s.world_size = 4, s.pp = 4, s.grad_accum = 8, s.precision = Precision::FP32;
  s.schedule = Schedule::ZBV;
  s.virtual_stages = 2;
  const MemoryEstimate e = estimate_memory(s);
  ASSERT_EQ(e.stages.size(), 4u);
  // The runtime's two models on stage i: virtual stages i and 2p-1-i of 2p.
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(e.stages[i].params, make_layout(s.model, {1, 0, 8, i}).num_params() +
                                      make_layout(s.model, {1, 0, 8, 7 - i}).num_params());
  const ChunkLayout first = make_layout(s.model, {1, 0, 8, 0}),
                    last = make_layout(s.model, {1, 0, 8, 7});
  EXPECT_GE(first.find("wte"), 0);
  EXPECT_GE(last.find("lm_head.weight"), 0);
  // Activations: stage 0 holds the input layer's of min(m, 2p) micro-batches and the output
  // layer's of one on top of its blocks'; the last stage only its blocks'. Each chunk but the
  // last virtual stage keeps its output and that output's gradient per micro-batch slot, the
  // slots the engine sizes its pools by (pipeline/stage_peaks.h): stage 0's first chunk, both
  // of stage 3's.
  ActivationShape x;
  x.s = 16, x.b = 1, x.h = 32, x.a = 2, x.v = 500, x.elem_bytes = 4;
  const int64_t layer = layer_activation_bytes(x, Recompute::None);
  EXPECT_EQ(e.stages[0].inflight_layer_microbatches, 8);  // min(2p, 2m, m+1) = 8 chunk-mbs of 1
  const int64_t boundary = stage_boundary_bytes(x);
  EXPECT_EQ(boundary, 2 * 16 * 32 * 4);
  const pipeline::Schedule zbv = pipeline::zb_v(4, 8);
  const pipeline::StagePeaks first_stage = pipeline::stage_peaks(zbv, 0, {2, 2}),
                             last_stage = pipeline::stage_peaks(zbv, 3, {1, 1});
  EXPECT_EQ(e.stages[0].device.activations, 8 * layer + 8 * input_layer_activation_bytes(x) +
                                                1 * output_layer_activation_bytes(x) +
                                                first_stage.slots[0] * boundary);
  EXPECT_EQ(e.stages[3].device.activations,
            8 * layer + (last_stage.slots[0] + last_stage.slots[1]) * boundary);
}

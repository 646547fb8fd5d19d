// Stage times from a traced executor step, gathered over the pipeline group, and the automatic
// schedule built from them (see pipeline_measure.h).
#include "tide/exec/pipeline_measure.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "tide/core/error.h"
#include "tide/pipeline/generators.h"
#include "tide/pipeline/simulator.h"

namespace tide {

namespace {

int64_t arg(const TraceEvent& e, const char* key) {
  for (const auto& [k, v] : e.args)
    if (k == key) return v;
  return -1;
}

// A transfer as gathered: kind (0 send act, 1 send grad, 2 waited recv act, 3 waited recv grad),
// micro-batch, peer, time (us: a send's posting, a receive's completion), a receive's posting.
constexpr int kHeader = 6;  // t_f, t_b, t_w (us), start, end, busy (us)
constexpr int kRecord = 5;

}  // namespace

pipeline::CostModel StepMeasurement::generator_costs() const {
  pipeline::CostModel c;
  c.t_f = c.t_b = c.t_w = 0;
  for (const pipeline::CostModel& s : stages) {
    c.t_f = std::max(c.t_f, s.t_f);
    c.t_b = std::max(c.t_b, s.t_b);
    c.t_w = std::max(c.t_w, s.t_w);
  }
  c.t_comm = t_comm;
  c.m_b = c.m_w = 1;
  return c;
}

StepMeasurement measure_step(const Tracer& trace, const pipeline::Schedule& schedule,
                             ProcessGroup& pipeline) {
  const int p = pipeline.size(), M = schedule.microbatches;
  TIDE_CHECK(schedule.stages == p,
             "measure_step: schedule '{}' has {} stages but the pipeline group has {} ranks",
             schedule.name, schedule.stages, p);
  // This rank's figures: action times and the transfers.
  std::vector<double> mine(kHeader + static_cast<size_t>(kRecord) * 4 * M * schedule.chunks, -1);
  double sum[3] = {0, 0, 0}, start = std::numeric_limits<double>::infinity(), end = -start;
  int count[3] = {0, 0, 0};
  double part[2] = {0, 0};  // the block parts' input-gradient and weight-gradient spans
  std::vector<const TraceEvent*> recvs, waits;
  int records = 0;
  auto add = [&](int kind, const TraceEvent& e, double t, double posted) {
    TIDE_CHECK(records < 4 * M * schedule.chunks,
               "measure_step: more transfers in the trace than one step of '{}' has; trace "
               "exactly one step (a fresh Tracer per step)",
               schedule.name);
    double* r = &mine[kHeader + static_cast<size_t>(kRecord) * records++];
    r[0] = kind;
    r[1] = static_cast<double>(arg(e, "mb"));
    r[2] = static_cast<double>(arg(e, "peer"));
    r[3] = t;
    r[4] = posted;
  };
  for (const TraceEvent& e : trace.events()) {
    if (e.cat == "action") {
      const int op = e.name == "F" ? 0 : e.name == "B" ? 1 : e.name == "W" ? 2 : -1;
      if (op < 0) continue;
      sum[op] += e.dur_us;
      ++count[op];
      start = std::min(start, e.ts_us);
      end = std::max(end, e.ts_us + e.dur_us);
    } else if (e.cat == "compute" && (e.name == "backward" || e.name == "weight")) {
      part[e.name == "weight"] += e.dur_us;
    } else if (e.name == "send act" || e.name == "send grad") {
      add(e.name == "send act" ? 0 : 1, e, e.ts_us, e.ts_us);
    } else if (e.name == "recv act" || e.name == "recv grad") {
      recvs.push_back(&e);
    } else if (e.name == "wait recv") {
      waits.push_back(&e);
    }
  }
  // Every F, B and W of the step is traced (a W right after its B is empty when the backward
  // is not split: the B ran both).
  const int want = M * schedule.chunks;
  TIDE_CHECK(count[0] == want && count[1] == want && count[2] == want,
             "measure_step: the trace of stage {} holds {} F, {} B and {} W actions but one step "
             "of '{}' runs {} of each; pass the Tracer of exactly one traced step",
             pipeline.rank(), count[0], count[1], count[2], schedule.name, want);
  // A waited receive: the one of the wait's micro-batch that completed right when the wait
  // ended (AsyncTrace::finish follows the wait).
  for (const TraceEvent* w : waits) {
    const TraceEvent* best = nullptr;
    double gap = std::numeric_limits<double>::infinity();
    for (const TraceEvent* r : recvs) {
      if (arg(*r, "mb") != arg(*w, "mb")) continue;
      const double g = std::abs((r->ts_us + r->dur_us) - (w->ts_us + w->dur_us));
      if (g < gap) gap = g, best = r;
    }
    if (best) add(best->name == "recv act" ? 2 : 3, *best, best->ts_us + best->dur_us, best->ts_us);
  }
  mine[0] = sum[0] / M;
  mine[1] = sum[1] / M;
  mine[2] = sum[2] / M;
  if (!schedule.split_backward) {
    // One B action ran both passes block by block (1F1B, GPipe): split its time in the
    // proportion of its block parts' spans, so the figures serve a split schedule too.
    TIDE_CHECK(part[0] > 0 && part[1] > 0,
               "measure_step: schedule '{}' fuses W into B and the trace of stage {} has no "
               "block-part spans (\"backward\", \"weight\") to split them by",
               schedule.name, pipeline.rank());
    const double backward = (sum[1] + sum[2]) / M;
    mine[1] = backward * part[0] / (part[0] + part[1]);
    mine[2] = backward * part[1] / (part[0] + part[1]);
  }
  mine[3] = start;
  mine[4] = end;
  mine[5] = sum[0] + sum[1] + sum[2];

  // Everyone's, in stage order. Doubles travel as pairs of int32 (only a gather).
  const int64_t n = static_cast<int64_t>(mine.size());
  std::vector<double> all(static_cast<size_t>(n * p));
  pipeline.all_gather(Tensor(mine.data(), Shape{2 * n}, DType::I32),
                      Tensor(all.data(), Shape{2 * n * p}, DType::I32));

  StepMeasurement m;
  double t0 = std::numeric_limits<double>::infinity();
  for (int r = 0; r < p; ++r) t0 = std::min(t0, all[r * n + 3]);
  std::vector<double> latencies;
  for (int r = 0; r < p; ++r) {
    const double* h = &all[r * n];
    pipeline::CostModel c;
    c.t_f = h[0] * 1e-6;
    c.t_b = h[1] * 1e-6;
    c.t_w = h[2] * 1e-6;
    c.m_b = c.m_w = 1;
    m.stages.push_back(c);
    pipeline::StageStats s;
    s.start = (h[3] - t0) * 1e-6;
    s.end = (h[4] - t0) * 1e-6;
    s.busy = h[5] * 1e-6;
    s.bubble = std::max(0.0, (s.end - s.start) - s.busy);
    s.bubble_rate = s.end > s.start ? s.bubble / (s.end - s.start) : 0.0;
    m.measured.push_back(s);
    // Its waited receives against the sender's posting of the same message: the latest send
    // of that kind, micro-batch and destination posted before the receive completed (two
    // chunks may send the same micro-batch to the same stage; the later one is the match).
    for (int i = 0; i < 4 * M * schedule.chunks; ++i) {
      const double* rec = &h[kHeader + kRecord * i];
      if (rec[0] < 2) continue;  // a send, or unused (-1)
      const int kind = static_cast<int>(rec[0]) - 2, mb = static_cast<int>(rec[1]),
                peer = static_cast<int>(rec[2]);
      if (peer < 0 || peer >= p) continue;
      double sent = -std::numeric_limits<double>::infinity();
      for (int j = 0; j < 4 * M * schedule.chunks; ++j) {
        const double* snd = &all[peer * n + kHeader + kRecord * j];
        if (snd[0] == kind && static_cast<int>(snd[1]) == mb && static_cast<int>(snd[2]) == r &&
            snd[3] <= rec[3])
          sent = std::max(sent, snd[3]);
      }
      // From when both sides were ready (a receive posted after the send could not complete
      // before it was posted; the simulator's receive waits for send + T_comm, no earlier).
      if (std::isfinite(sent)) latencies.push_back((rec[3] - std::max(sent, rec[4])) * 1e-6);
    }
  }
  if (!latencies.empty()) {
    std::sort(latencies.begin(), latencies.end());
    const size_t k = latencies.size();
    m.t_comm = k % 2 ? latencies[k / 2] : 0.5 * (latencies[k / 2 - 1] + latencies[k / 2]);
  }
  m.waited_receives = static_cast<int>(latencies.size());
  for (pipeline::CostModel& c : m.stages) c.t_comm = m.t_comm;
  return m;
}

pipeline::Schedule auto_schedule(const StepMeasurement& m, int microbatches, double memory_limit) {
  const int p = static_cast<int>(m.stages.size());
  TIDE_CHECK(p >= 1, "auto_schedule: the measurement holds no stages");
  pipeline::ScheduleOptions o;
  o.schedule = "zb-auto";
  o.stages = p;
  o.microbatches = microbatches;
  o.cost = m.generator_costs();
  o.memory_limit = memory_limit;
  // check_options names a bad limit (below one micro-batch) or a time that is not positive.
  return pipeline::build_schedule(o);
}

std::string microbatch_hint(const StepMeasurement& m, int microbatches, double memory_limit) {
  const int p = static_cast<int>(m.stages.size());
  if (microbatches >= p) return "";
  auto bubble = [&](int mb) {
    return pipeline::simulate(auto_schedule(m, mb, memory_limit), m.stages).bubble_rate * 100;
  };
  return fmt::format(
      "; only {} micro-batch{} per step for {} stages, so the pipeline never fills: it needs at "
      "least {} (gradient_accumulation_steps={} simulates a bubble of {:.1f}% with these times, "
      "={} {:.1f}%)",
      microbatches, microbatches == 1 ? "" : "es", p, p, p, bubble(p), 4 * p, bubble(4 * p));
}

StepStats auto_schedule_step(PipelineEngine& engine, ProcessGroup& pipeline, int64_t step,
                             uint64_t seed, const PipelineEngine::BatchFn& batch,
                             double memory_limit, StepMeasurement* measured) {
  // Checked before the step changes the model.
  TIDE_CHECK(std::isfinite(memory_limit) && (memory_limit == 0 || memory_limit >= 1),
             "the automatic schedule's memory limit is {} micro-batches in flight per stage; give "
             "at least 1 (one micro-batch's activations, M_B), or 0 for 1F1B's peak (p)",
             memory_limit);
  TIDE_CHECK(engine.schedule().chunks == 1,
             "the automatic schedule runs one model chunk per stage but the engine runs '{}' with "
             "{} chunks per stage; start it with a single-chunk schedule such as 1f1b",
             engine.schedule().name, engine.schedule().chunks);
  Tracer tracer(pipeline.rank());
  const StepStats st = engine.step(step, seed, batch, &tracer);
  StepMeasurement m = measure_step(tracer, engine.schedule(), pipeline);
  engine.reschedule(auto_schedule(m, engine.schedule().microbatches, memory_limit));
  if (measured) *measured = std::move(m);
  return st;
}

}  // namespace tide

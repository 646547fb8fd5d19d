// Bubble rates of every pipeline schedule for p in {4, 8, 16} and m in {p, 2p, 3p}, simulated
// under two cost settings. Prints one JSON line per (setting, schedule, p, m):
//   {"bench": "pipeline_bubbles", "setting": ..., "schedule": ..., "p": .., "m": ..,
//    "bubble": .., "bubble_rate": .., "makespan": .., "peak_memory_mb": .., "gen_ms": ..}
// bubble = max over stages of (span - busy); rate = bubble / span; peak in units of M_B.
// A schedule that cannot run a case (interleaved needs m a multiple of p) prints "skipped".
#include <fmt/format.h>

#include <chrono>

#include "tide/core/error.h"
#include "tide/pipeline/generators.h"

using namespace tide::pipeline;

int main() {
  struct Setting {
    const char* name;
    CostModel cost;
  };
  CostModel equal;  // T_F = T_B = T_W = 1, no latency, M_W = 0.28 M_B (see docs/pipeline.md)
  equal.m_w = 0.28;
  CostModel unequal;  // W shorter than F and B, B slightly shorter than F, 2% link latency
  unequal.t_f = 1.0;
  unequal.t_b = 0.9;
  unequal.t_w = 0.7;
  unequal.t_comm = 0.02;
  unequal.m_w = 0.28;
  const Setting settings[] = {{"equal", equal}, {"unequal", unequal}};
  for (const Setting& set : settings) {
    for (const std::string& name : schedule_names()) {
      for (int p : {4, 8, 16}) {
        for (int m : {p, 2 * p, 3 * p}) {
          ScheduleOptions o;
          o.schedule = name;
          o.stages = p;
          o.microbatches = m;
          o.cost = set.cost;
          const auto t0 = std::chrono::steady_clock::now();
          try {
            const Schedule s = build_schedule(o);
            const double gen_ms =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                    .count();
            const SimResult r = simulate(s, o.cost);
            fmt::print(
                "{{\"bench\": \"pipeline_bubbles\", \"setting\": \"{}\", \"schedule\": \"{}\", "
                "\"p\": {}, \"m\": {}, \"bubble\": {:.4f}, \"bubble_rate\": {:.5f}, "
                "\"makespan\": {:.4f}, \"peak_memory_mb\": {:.3f}, \"gen_ms\": {:.2f}}}\n",
                set.name, name, p, m, r.bubble, r.bubble_rate, r.makespan,
                r.peak_memory / o.cost.m_b, gen_ms);
          } catch (const tide::Error& e) {
            fmt::print(
                "{{\"bench\": \"pipeline_bubbles\", \"setting\": \"{}\", \"schedule\": "
                "\"{}\", \"p\": {}, \"m\": {}, \"skipped\": true}}\n",
                set.name, name, p, m);
          }
        }
      }
    }
  }
  return 0;
}

// Pipeline bubbles and activation memory measured on real ranks (issue 13), next to what the
// simulator predicts for the measured stage times. Under mpirun with p ranks (one stage each,
// threads per rank from --threads), every schedule trains the same GPT from the same init:
//
//   mpirun -np 2 bench_pipeline_measured [--layers 8] [--embd 256] [--heads 4] [--vocab 1024]
//            [--seq-len 128] [--micro-batch 4] [--microbatches 2p] [--steps 5] [--warmup 1]
//            [--threads 1] [--schedules 1f1b,zb-h1,zb-h2,zb-auto] [--memory-limit 0]
//
// zb-auto starts from 1F1B: its first warm-up step is traced and measured, and the zb-auto
// generator builds the schedule from those figures under --memory-limit (micro-batches in
// flight, M_B; 0: 1F1B's p); the other warm-up steps and the timed steps run that schedule.
// Every timed step is traced; per step, measure_step (exec/pipeline_measure.h) gives each
// stage's T_F/T_B/T_W, the link latency T_comm and the measured bubble rate (span - busy) /
// span, and the simulator times the same schedule with those per-stage figures. Rank 0 prints
// one JSON line per (schedule, stage) with the medians over the timed steps:
//
// t_f_ms, t_b_ms, t_w_ms   the stage's measured times per micro-batch; t_comm_ms the latency
// bubble_measured          (span - busy) / span of the stage, from its trace
// bubble_predicted         the simulator's bubble rate for the stage with the measured figures
// diff_points              100 * (measured - predicted), the median of the per-step differences
// step_s                   wall time of the step (rank 0's StepStats::seconds)
// act_peak_mib, m_b_mib    the stage's peak activation memory over the last step and one
//                          micro-batch's (PipelineEngine::activation_memory: arena bytes)
// in_flight                act_peak / M_B, measured; in_flight_schedule: the schedule's count
//                          (simulator, M_B = M_W = 1)
// stash_peak_mib           the W stash's high-water mark (what B leaves for a deferred W)
// loss                     the last step's loss (the same bits for every schedule)

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "tide/comm/distributed.h"
#include "tide/core/error.h"
#include "tide/core/rng.h"
#include "tide/exec/pipeline_engine.h"
#include "tide/exec/pipeline_measure.h"
#include "tide/pipeline/generators.h"

using namespace tide;

namespace {

struct Args {
  int layers = 8, embd = 256, heads = 4, vocab = 1024, seq_len = 128, micro_batch = 4;
  int microbatches = 0, steps = 5, warmup = 1, threads = 1;
  double memory_limit = 0;
  std::vector<std::string> schedules = {"1f1b", "zb-h1", "zb-h2", "zb-auto"};
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) try {
  Args a;
  CLI::App app{"pipeline bubbles and activation memory, measured vs simulated",
               "bench_pipeline_measured"};
  bench::add_model_shape_options(app,
                                 {a.layers, a.embd, a.heads, a.vocab, a.seq_len, a.micro_batch});
  app.add_option("--microbatches", a.microbatches, "micro-batches per step (0: 2p)");
  app.add_option("--steps", a.steps)->capture_default_str();
  app.add_option("--warmup", a.warmup)->capture_default_str();
  app.add_option("--threads", a.threads)->capture_default_str();
  app.add_option("--memory-limit", a.memory_limit, "zb-auto: micro-batches in flight (0: p)");
  app.add_option("--schedules", a.schedules)->delimiter(',')->capture_default_str();
  bench::parse_args(app, argc, argv);

  std::shared_ptr<ProcessGroup> world = init_distributed();
  const int p = world->size(), rank = world->rank();
  TIDE_CHECK(p >= 2, "bench_pipeline_measured runs a pipeline: use mpirun -np P, P >= 2");
  TIDE_CHECK(a.layers % p == 0, "--layers {} does not divide over {} stages", a.layers, p);
  TIDE_CHECK(a.steps >= 1 && a.warmup >= 1, "--steps and --warmup must be at least 1");
  const int M = a.microbatches > 0 ? a.microbatches : 2 * p;
  omp_set_num_threads(a.threads);

  GPTConfig cfg;
  cfg.n_layer = a.layers;
  cfg.n_head = a.heads;
  cfg.n_embd = a.embd;
  cfg.vocab_size = a.vocab;
  cfg.max_seq_len = a.seq_len;
  cfg.dropout = 0.0f;
  OptimizerSettings opt;
  opt.lr.type = LrScheduleType::CONSTANT;
  opt.lr.lr = 1e-4;
  const int B = a.micro_batch, T = a.seq_len;
  auto batch = [&](int mb, int32_t* in, int32_t* tg) {
    const PhiloxStream rng{31, static_cast<uint64_t>(mb)};
    for (int i = 0; i < B * T; ++i) {
      in[i] = static_cast<int32_t>(rng.uint(2 * i) % a.vocab);
      tg[i] = static_cast<int32_t>(rng.uint(2 * i + 1) % a.vocab);
    }
  };

  for (const std::string& name : a.schedules) {
    ModelOptions mo;
    mo.pp = p;
    mo.stage = rank;
    GPT gpt(cfg, ActivationPolicy::SAVE_ALL, mo);
    gpt.init_weights(1);
    const bool automatic = name == "zb-auto";
    pipeline::ScheduleOptions so;
    so.schedule = automatic ? "1f1b" : name;
    so.stages = p;
    so.microbatches = M;
    PipelineEngine engine(gpt, world, pipeline::build_schedule(so), B, T, opt);
    int64_t step = 0;
    for (int w = 0; w < a.warmup; ++w, ++step) {
      if (automatic && w == 0)
        auto_schedule_step(engine, *world, step, 7, batch, a.memory_limit);
      else
        engine.step(step, 7, batch);
    }
    const pipeline::Schedule& sched = engine.schedule();
    // Per stage, per timed step.
    std::vector<std::vector<double>> tf(p), tb(p), tw(p), meas(p), pred(p), diff(p);
    std::vector<double> tcomm, seconds;
    float loss = 0;
    for (int s = 0; s < a.steps; ++s, ++step) {
      Tracer tracer(rank);
      const StepStats st = engine.step(step, 7, batch, &tracer);
      const StepMeasurement m = measure_step(tracer, sched, *world);
      const pipeline::SimResult sim = pipeline::simulate(sched, m.stages);
      for (int i = 0; i < p; ++i) {
        tf[i].push_back(m.stages[i].t_f);
        tb[i].push_back(m.stages[i].t_b);
        tw[i].push_back(m.stages[i].t_w);
        meas[i].push_back(m.measured[i].bubble_rate);
        pred[i].push_back(sim.stages[i].bubble_rate);
        diff[i].push_back(100 * (m.measured[i].bubble_rate - sim.stages[i].bubble_rate));
      }
      tcomm.push_back(m.t_comm);
      seconds.push_back(st.seconds);
      loss = st.loss;
    }
    // Every stage's memory figures on rank 0.
    const PipelineEngine::ActivationMemory& mem = engine.activation_memory();
    std::vector<double> mine = {static_cast<double>(mem.peak_bytes),
                                static_cast<double>(mem.micro_batch_bytes),
                                static_cast<double>(mem.peak_stash_bytes)};
    std::vector<double> all(3 * static_cast<size_t>(p));
    world->all_gather(Tensor(mine.data(), Shape{6}, DType::I32),
                      Tensor(all.data(), Shape{6 * p}, DType::I32));
    const pipeline::SimResult counts = pipeline::simulate(sched, pipeline::CostModel{});
    if (rank == 0) {
      const double MiB = 1024.0 * 1024.0;
      for (int i = 0; i < p; ++i)
        fmt::print(
            "{{\"bench\": \"pipeline_measured\", \"schedule\": \"{}\", \"p\": {}, \"m\": {}, "
            "\"stage\": {}, \"layers\": {}, \"embd\": {}, \"seq_len\": {}, \"micro_batch\": {}, "
            "\"threads\": {}, \"steps\": {}, \"t_f_ms\": {:.3f}, \"t_b_ms\": {:.3f}, "
            "\"t_w_ms\": {:.3f}, \"t_comm_ms\": {:.3f}, \"bubble_measured\": {:.4f}, "
            "\"bubble_predicted\": {:.4f}, \"diff_points\": {:.2f}, \"step_s\": {:.3f}, "
            "\"act_peak_mib\": {:.3f}, \"m_b_mib\": {:.3f}, \"in_flight\": {:.3f}, "
            "\"in_flight_schedule\": {:.0f}, \"stash_peak_mib\": {:.3f}, \"loss\": {:.6f}}}\n",
            name, p, M, i, a.layers, a.embd, a.seq_len, B, a.threads, a.steps, 1e3 * median(tf[i]),
            1e3 * median(tb[i]), 1e3 * median(tw[i]), 1e3 * median(tcomm), median(meas[i]),
            median(pred[i]), median(diff[i]), median(seconds), all[3 * i] / MiB,
            all[3 * i + 1] / MiB, all[3 * i] / all[3 * i + 1], counts.stages[i].peak_memory,
            all[3 * i + 2] / MiB, loss);
      std::fflush(stdout);
    }
  }
  return 0;
} catch (const tide::Error& e) {
  std::fprintf(stderr, "bench_pipeline_measured: error: %s\n", e.what());
  return 1;
}

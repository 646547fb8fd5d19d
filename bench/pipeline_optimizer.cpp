// The pipeline executor's optimizer tail, synchronous against post-validated (PipelineEngine,
// docs/pipeline.md): what the copy for the rollback costs, and how much of the wait for the
// global gradient norm the optimistic AdamW fills. Under mpirun every rank is one stage of a
// GPT; every step is traced and the spans of category "optimizer" are timed. Rank 0 prints one
// JSON line per (mode, clipping, stage):
//
//   mpirun -np 4 bench_pipeline_optimizer [--layers 8] [--embd 256] [--heads 4] [--vocab 2048]
//       [--seq-len 64] [--micro-batch 2] [--micro-batches 8] [--steps 4] [--threads 1]
//       [--schedule zb-h1]
//
// mode            sync (wait for the norm, then AdamW) or post (post-validation)
// clipping        inactive (grad_clip 0: no rollback) or active (grad_clip 1e-6: every step
//                 rolls back and redoes AdamW, the worst case)
// params          parameters of the stage; snapshot_bytes the copy post-validation holds
// step_s          mean wall time of a step on this stage (StepStats::seconds)
// tail_s          mean time from the end of "finish gradients" to the end of the optimizer
// norm_s          sync: "grad norm" (local sums of squares + the blocking gather)
// adamw_s         sync: "optimizer"; post: "optimizer (optimistic)"
// save_s, wait_s, rollback_s, redo_s   post: the spans of those names in the tail
// save_in_bubbles_s  post: the snapshot pieces copied while the stage waited for a message
// rollbacks       StepStats::rollbacks summed over the timed steps
// The first step is a warm-up (not timed).

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "tide/comm/distributed.h"
#include "tide/core/rng.h"
#include "tide/core/trace.h"
#include "tide/exec/pipeline_engine.h"
#include "tide/pipeline/generators.h"

using namespace tide;

namespace {

struct Args {
  int layers = 8, embd = 256, heads = 4, vocab = 2048, seq_len = 64, micro_batch = 2;
  int micro_batches = 0, steps = 4, threads = 1;
  std::string schedule = "zb-h1";
};

Args parse(int argc, char** argv) {
  Args a;
  CLI::App app{"pipeline optimizer tail: synchronous vs post-validated",
               "bench_pipeline_optimizer"};
  app.add_option("--layers", a.layers)->capture_default_str();
  app.add_option("--embd", a.embd)->capture_default_str();
  app.add_option("--heads", a.heads)->capture_default_str();
  app.add_option("--vocab", a.vocab)->capture_default_str();
  app.add_option("--seq-len", a.seq_len)->capture_default_str();
  app.add_option("--micro-batch", a.micro_batch, "sequences per micro-batch")
      ->capture_default_str();
  app.add_option("--micro-batches", a.micro_batches, "micro-batches per step (0: 2 x stages)")
      ->capture_default_str();
  app.add_option("--steps", a.steps, "timed steps (after one warm-up)")->capture_default_str();
  app.add_option("--threads", a.threads, "OpenMP threads per rank")->capture_default_str();
  app.add_option("--schedule", a.schedule)->capture_default_str();
  bench::parse_args(app, argc, argv);
  TIDE_CHECK(a.steps >= 1 && a.vocab >= 2, "--steps must be >= 1 and --vocab >= 2");
  return a;
}

struct Times {
  double step = 0, tail = 0, norm = 0, adamw = 0, save = 0, save_bubble = 0, wait = 0, rollback = 0,
         redo = 0;
  int rollbacks = 0;
  int64_t params = 0, snapshot_bytes = 0;
};

Times run(const Args& a, ProcessGroup& world_ref, std::shared_ptr<ProcessGroup> world, bool post,
          bool clip) {
  const int p = world->size(), M = a.micro_batches > 0 ? a.micro_batches : 2 * p;
  GPTConfig c;
  c.n_layer = a.layers;
  c.n_head = a.heads;
  c.n_embd = a.embd;
  c.vocab_size = a.vocab;
  c.max_seq_len = a.seq_len;
  ModelOptions o;
  o.pp = p;
  o.stage = world->rank();
  GPT gpt(c, ActivationPolicy::SAVE_ALL, o);
  gpt.init_weights(1);
  OptimizerSettings opt;
  opt.lr.type = LrScheduleType::CONSTANT;
  opt.lr.lr = 1e-4;
  opt.grad_clip = clip ? 1e-6f : 0.0f;
  pipeline::ScheduleOptions so;
  so.schedule = a.schedule;
  so.stages = p;
  so.microbatches = M;
  PipelineEngine engine(gpt, world, pipeline::build_schedule(so), a.micro_batch, a.seq_len, opt);
  engine.set_post_validation(post);
  const int B = a.micro_batch, T = a.seq_len;
  auto batch = [&](int mb, int32_t* in, int32_t* tg) {
    const PhiloxStream rng{7, static_cast<uint64_t>(mb)};
    for (int i = 0; i < B * T; ++i) {
      in[i] = static_cast<int32_t>(rng.uint(2 * i) % a.vocab);
      tg[i] = static_cast<int32_t>(rng.uint(2 * i + 1) % a.vocab);
    }
  };
  Times t;
  for (int s = 0; s <= a.steps; ++s) {
    world_ref.barrier();
    Tracer tracer(world->rank());
    const StepStats st = engine.step(s, 3, batch, &tracer);
    if (s == 0) continue;  // warm-up
    t.step += st.seconds;
    t.rollbacks += st.rollbacks;
    std::map<std::string, double> us;
    double finish_end = 0, opt_end = 0;
    for (const TraceEvent& e : tracer.events()) {
      if (e.name == "finish gradients") finish_end = e.ts_us + e.dur_us;
      if (e.cat == "optimizer") {
        const bool bubble = !e.args.empty() && e.args[0].first == "bubble";
        us[bubble ? e.name + " (bubble)" : e.name] += e.dur_us;
        opt_end = std::max(opt_end, e.ts_us + e.dur_us);
      }
    }
    t.tail += (opt_end - finish_end) * 1e-6;
    t.norm += us["grad norm"] * 1e-6;
    t.adamw += (post ? us["optimizer (optimistic)"] : us["optimizer"]) * 1e-6;
    t.save += us["save optimizer state"] * 1e-6;
    t.save_bubble += us["save optimizer state (bubble)"] * 1e-6;
    t.wait += us["wait grad norm"] * 1e-6;
    t.rollback += us["rollback"] * 1e-6;
    t.redo += us["optimizer (redo)"] * 1e-6;
  }
  const ChunkLayout& lay = gpt.store().layout();
  for (int id = 0; id < lay.num_tensors(); ++id) t.params += lay.slot(id).numel;
  t.snapshot_bytes = static_cast<int64_t>(engine.snapshot_bytes());
  for (double* x : {&t.step, &t.tail, &t.norm, &t.adamw, &t.save, &t.save_bubble, &t.wait,
                    &t.rollback, &t.redo})
    *x /= a.steps;
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    std::shared_ptr<ProcessGroup> world = init_distributed();
    omp_set_num_threads(a.threads);
    const int p = world->size();
    for (bool post : {false, true})
      for (bool clip : {false, true}) {
        const Times t = run(a, *world, world, post, clip);
        // Each rank's numbers to rank 0, as doubles in int32 pairs.
        std::vector<double> mine = {t.step,
                                    t.tail,
                                    t.norm,
                                    t.adamw,
                                    t.save,
                                    t.wait,
                                    t.rollback,
                                    t.redo,
                                    double(t.rollbacks),
                                    double(t.params),
                                    double(t.snapshot_bytes),
                                    t.save_bubble};
        const int64_t K = static_cast<int64_t>(mine.size());
        std::vector<double> all(static_cast<size_t>(K * p));
        world->all_gather(Tensor(mine.data(), Shape{2 * K}, DType::I32),
                          Tensor(all.data(), Shape{2 * K * p}, DType::I32));
        if (world->rank() != 0) continue;
        for (int r = 0; r < p; ++r) {
          const double* v = &all[static_cast<size_t>(r * K)];
          fmt::print(
              "{{\"bench\": \"pipeline_optimizer\", \"schedule\": \"{}\", \"stages\": {}, "
              "\"mode\": \"{}\", \"clipping\": \"{}\", \"stage\": {}, \"params\": {}, "
              "\"snapshot_bytes\": {}, \"step_s\": {:.5f}, \"tail_s\": {:.6f}, "
              "\"norm_s\": {:.6f}, \"adamw_s\": {:.6f}, \"save_s\": {:.6f}, \"wait_s\": {:.6f}, "
              "\"rollback_s\": {:.6f}, \"redo_s\": {:.6f}, \"rollbacks\": {}, "
              "\"save_in_bubbles_s\": {:.6f}}}\n",
              a.schedule, p, post ? "post" : "sync", clip ? "active" : "inactive", r,
              static_cast<int64_t>(v[9]), static_cast<int64_t>(v[10]), v[0], v[1], v[2], v[3], v[4],
              v[5], v[6], v[7], static_cast<int>(v[8]), v[11]);
        }
        std::fflush(stdout);
      }
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_pipeline_optimizer: {}\n", e.what());
    return 1;
  }
  return 0;
}

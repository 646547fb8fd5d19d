// ZeRO-Offload (zero_optimization.offload_optimizer.device=cpu): step time with the optimizer
// offloaded against the same run without, the traffic per step against the paper, and how
// much of the offload thread's work (gradient copies + norm partials, CPU Adam) ran while
// backward was still computing. Rank 0 prints one JSON line per (stage, clip):
//
//   [mpirun -np N] bench_offload [--layers 6] [--embd 384] [--heads 6] [--vocab 2048]
//                                [--seq-len 64] [--micro-batch 2] [--steps 5] [--threads 1]
//                                [--zero-stages 1,2,3] [--clip 1,0] [--dpu true]
//
// mode            "after-backward" (gradient_clipping 1: Adam waits for the global norm),
//                 "as-chunks-arrive" (gradient_clipping 0: Adam runs on each chunk as soon as its
//                 gradients reach the host), or "dpu" (clipping 1 with the one-step delayed update
//                 from the first step: step t's Adam runs during step t+1)
// clip            gradient_clipping
// psi             elements of every chunk, padding included
// base_step_s     mean step time without offload (same stage, same clip)
// step_s          mean step time with offload; ratio = step_s / base_step_s
// bytes_to_host, bytes_to_device  per step and rank, measured (StepStats::offload); theory_bytes
//                 = 4 psi / N each way (f32 gradients down, f32 parameters up)
// copy_s, adam_s  seconds the offload thread spent copying gradients (+ norm partials) and in
//                 CPU Adam, per step
// hidden_s        of copy_s + adam_s, the part that ran before backward ended; hidden =
//                 hidden_s / (copy_s + adam_s)
// adam_hidden     the fraction of adam_s hidden: (hidden_s - hidden copy time) / adam_s, where
//                 all copy time counts as hidden (a lower bound for Adam's share is 0 with clip)
// wait_s          seconds the compute thread waited on the offload thread per step
// Times are the slowest rank's.

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "bench_ranks.h"
#include "tide/comm/distributed.h"
#include "tide/core/rng.h"
#include "tide/data/shard.h"
#include "tide/kernels/cpu/openblas_core.h"
#include "tide/train/trainer.h"

using namespace tide;

namespace {

struct Args {
  int layers = 6, embd = 384, heads = 6, vocab = 2048, seq_len = 64, micro_batch = 2;
  int steps = 5, threads = 1;
  std::vector<int> zero_stages = {1, 2, 3};
  std::vector<double> clips = {1.0, 0.0};
  bool dpu = true;
};

Args parse(int argc, char** argv) {
  Args a;
  CLI::App app{"ZeRO-Offload: step time vs no offload, traffic, hidden CPU Adam", "bench_offload"};
  bench::add_model_shape_options(app,
                                 {a.layers, a.embd, a.heads, a.vocab, a.seq_len, a.micro_batch});
  app.add_option("--steps", a.steps)->capture_default_str();
  app.add_option("--threads", a.threads, "OpenMP threads per rank (compute and CPU Adam)")
      ->capture_default_str();
  app.add_option("--zero-stages", a.zero_stages, "ZeRO stages, e.g. 1,2,3")
      ->delimiter(',')
      ->check(CLI::Range(1, 3))
      ->capture_default_str();
  app.add_option("--clip", a.clips, "gradient_clipping values, e.g. 1,0")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--dpu", a.dpu, "also measure the delayed update (clip 1)")->capture_default_str();
  bench::parse_args(app, argc, argv);
  TIDE_CHECK(a.steps >= 1 && a.vocab >= 2 && a.vocab <= 65536,
             "--steps must be >= 1 and --vocab in [2, 65536] (got {} and {})", a.steps, a.vocab);
  return a;
}

struct Measured {
  double step_s = 0;
  OffloadStepCounters o;  // per-step means (bytes: of the last step)
  int64_t psi = 0, params = 0;
  std::string model;
};

Measured measure(const Args& a, std::shared_ptr<ProcessGroup> world, const std::string& shard,
                 int stage, double clip, bool offload, bool dpu = false) {
  const TrainConfig cfg = load_train_config(
      "", {"data.train=" + shard, "out_dir=/tmp", fmt::format("model.n_layer={}", a.layers),
           fmt::format("model.n_embd={}", a.embd), fmt::format("model.n_head={}", a.heads),
           fmt::format("model.vocab_size={}", a.vocab), fmt::format("seq_len={}", a.seq_len),
           fmt::format("train_micro_batch_size_per_gpu={}", a.micro_batch),
           fmt::format("train_steps={}", a.steps + 1), fmt::format("threads={}", a.threads),
           "log.progress=false", fmt::format("gradient_clipping={}", clip),
           fmt::format("zero_optimization.stage={}", stage),
           fmt::format("zero_optimization.offload_optimizer.device={}", offload ? "cpu" : "none"),
           fmt::format("zero_optimization.offload_optimizer.delayed_update={}", dpu),
           "zero_optimization.offload_optimizer.dpu_warmup_steps=0"});
  Trainer trainer(cfg, world);
  Measured m;
  m.psi = trainer.model().store().layout().total_elems();
  m.params = trainer.model().store().layout().num_params();
  m.model = cfg.model.str();
  trainer.train_step();  // warm-up: first touch of arenas and buffers
  for (int s = 0; s < a.steps; ++s) {
    world->barrier();
    const StepStats st = trainer.train_step();
    m.step_s += st.seconds / a.steps;
    m.o.bytes_to_host = st.offload.bytes_to_host;
    m.o.bytes_to_compute = st.offload.bytes_to_compute;
    m.o.copy_seconds += st.offload.copy_seconds / a.steps;
    m.o.adam_seconds += st.offload.adam_seconds / a.steps;
    m.o.hidden_seconds += st.offload.hidden_seconds / a.steps;
    m.o.wait_seconds += st.offload.wait_seconds / a.steps;
  }
  m.step_s = bench::max_over_ranks(*world, m.step_s);
  m.o.copy_seconds = bench::max_over_ranks(*world, m.o.copy_seconds);
  m.o.adam_seconds = bench::max_over_ranks(*world, m.o.adam_seconds);
  m.o.hidden_seconds = bench::max_over_ranks(*world, m.o.hidden_seconds);
  m.o.wait_seconds = bench::max_over_ranks(*world, m.o.wait_seconds);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  // As tide does: the vector kernels where OpenBLAS fell back to its generic ones.
  cpu::reexec_with_vector_openblas_kernels(argv);
  return run_ranks([&] {
    const Args a = parse(argc, argv);
    std::shared_ptr<ProcessGroup> world = init_distributed({CommAlgorithm::Mpi});
    const int N = world->size();
    const std::string shard =
        bench::write_random_shard("offload", N, world->rank(), a.micro_batch, a.seq_len, a.vocab);
    struct Mode {
      double clip;
      bool dpu;
    };
    std::vector<Mode> modes;
    for (double clip : a.clips) modes.push_back({clip, false});
    if (a.dpu) modes.push_back({1.0, true});
    for (int stage : a.zero_stages)
      for (const auto [clip, dpu] : modes) {
        const Measured base = measure(a, world, shard, stage, clip, false);
        const Measured off = measure(a, world, shard, stage, clip, true, dpu);
        if (world->rank() != 0) continue;
        const OffloadStepCounters& o = off.o;
        const double work = o.copy_seconds + o.adam_seconds;
        const double adam_hidden =
            o.adam_seconds > 0
                ? std::clamp((o.hidden_seconds - o.copy_seconds) / o.adam_seconds, 0.0, 1.0)
                : 0.0;
        std::printf(
            "{\"bench\":\"offload\",\"zero_stage\":%d,\"world\":%d,\"mode\":\"%s\",\"clip\":%g,"
            "\"model\":\"%s\","
            "\"params\":%lld,\"psi\":%lld,\"micro_batch\":%d,\"seq_len\":%d,\"threads\":%d,"
            "\"steps\":%d,\"base_step_s\":%.4f,\"step_s\":%.4f,\"ratio\":%.3f,"
            "\"bytes_to_host\":%llu,\"bytes_to_device\":%llu,\"theory_bytes\":%lld,"
            "\"copy_s\":%.4f,\"adam_s\":%.4f,\"hidden_s\":%.4f,\"hidden\":%.3f,"
            "\"adam_hidden\":%.3f,\"wait_s\":%.4f}\n",
            stage, N,
            dpu        ? "dpu"
            : clip > 0 ? "after-backward"
                       : "as-chunks-arrive",
            clip, off.model.c_str(), static_cast<long long>(off.params),
            static_cast<long long>(off.psi), a.micro_batch, a.seq_len, a.threads, a.steps,
            base.step_s, off.step_s, off.step_s / base.step_s,
            static_cast<unsigned long long>(o.bytes_to_host),
            static_cast<unsigned long long>(o.bytes_to_compute),
            static_cast<long long>(4 * off.psi / N), o.copy_seconds, o.adam_seconds,
            o.hidden_seconds, work > 0 ? o.hidden_seconds / work : 0.0, adam_hidden,
            o.wait_seconds);
        std::fflush(stdout);
      }
    std::filesystem::remove(shard);
  });
}

// Data parallelism, ZeRO stages 0-3: communication traffic per step against the paper and how
// much of the communication time compute hides. Under mpirun, every rank trains the same GPT on
// its slice of each global batch; rank 0 prints one JSON line per (stage, algorithm):
//
//   mpirun -np 4 bench_dp [--layers 6] [--embd 384] [--heads 6] [--vocab 2048] [--seq-len 64]
//                         [--micro-batch 2] [--steps 3] [--chunk-mb 3] [--algorithm both]
//                         [--threads 1] [--zero-stages 0,1,2,3] [--pipeline-stages 1]
//
// With --pipeline-stages P > 1 the world is P stages x N/P data-parallel replicas (one executor:
// the same policy stack on every stage's store), each replica running 2P micro-batches of 1F1B;
// the figures are rank 0's stage (first stage, dp group of N/P ranks).
//
// params          model parameters
// psi             elements of every chunk, padding at the chunk ends included (that is what goes
//                 over the wire)
// bytes_sent      bytes this rank sent per step (gradient reductions and parameter gathers), from
//                 the process group's counters (ring: added up message by message; mpi: MPI hides
//                 its algorithm, so the counters record the ring formula)
// theory_bytes    ZeRO's volume: 2*psi*(N-1)/N elements x 4 bytes for stages 0-2 (all-reduce =
//                 reduce-scatter + all-gather), 3*psi*(N-1)/N for stage 3; ratio = bytes_sent /
//                 theory_bytes (stage 3 gathers the tied embedding's chunk a third time)
// theory_bytes_params  the same for psi = params (no padding): the price of the padding
// reductions, gathers  collectives issued per step
// step_s          wall time of one optimizer step (mean over the timed steps)
// exposed_s       time the step blocked on communication (StepStats::comm_seconds)
// blocking_s      the step's collectives run alone, one after another, blocking, on scratch
//                 buffers: the communication time if nothing overlapped it
// hidden          1 - exposed_s / blocking_s: the fraction of communication time hidden behind
//                 compute (clamped to [0, 1]); the slowest rank's times are used

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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
  int steps = 3, threads = 1;
  double chunk_mb = 3.0;  // = the largest tensor (wte, 2048 x 384) at the defaults
  std::string algorithm = "both";
  std::vector<int> zero_stages = {0};
  int pipeline_stages = 1;
};

Args parse(int argc, char** argv) {
  Args a;
  CLI::App app{"data-parallel gradient reduction: bytes vs ring theory, overlap", "bench_dp"};
  bench::add_model_shape_options(app,
                                 {a.layers, a.embd, a.heads, a.vocab, a.seq_len, a.micro_batch});
  app.add_option("--steps", a.steps)->capture_default_str();
  app.add_option("--threads", a.threads, "OpenMP threads per rank")->capture_default_str();
  app.add_option("--chunk-mb", a.chunk_mb, "chunk size in MiB")->capture_default_str();
  app.add_option("--algorithm", a.algorithm, "mpi, ring or both")
      ->check(CLI::IsMember({"mpi", "ring", "both"}))
      ->capture_default_str();
  app.add_option("--zero-stages", a.zero_stages, "ZeRO stages to run, e.g. 0,1,2,3")
      ->delimiter(',')
      ->check(CLI::Range(0, 3))
      ->capture_default_str();
  app.add_option("--pipeline-stages", a.pipeline_stages,
                 "pipeline stages P (the world is P x data-parallel replicas)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  bench::parse_args(app, argc, argv);
  TIDE_CHECK(a.steps >= 1 && a.vocab >= 2 && a.vocab <= 65536,
             "--steps must be >= 1 and --vocab in [2, 65536] (got {} and {})", a.steps, a.vocab);
  return a;
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The step's collectives at `stage` over the dp group, blocking, one after another, on scratch
// buffers.
double blocking_seconds(ProcessGroup& dp, const ChunkLayout& lay, int stage) {
  const int r = dp.rank();
  const double t0 = now();
  for (int c = 0; c < lay.num_chunks(); ++c) {
    std::vector<float> whole(static_cast<size_t>(lay.chunk_elems(c)));
    const Tensor t(whole.data(), {lay.chunk_elems(c)});
    const int64_t k = lay.slice_elems(c);
    const Tensor own(whole.data() + r * k, {k});
    if (stage == 0) {
      dp.all_reduce(t, ReduceOp::Avg);
      continue;
    }
    dp.reduce_scatter(t, own, ReduceOp::Sum);
    for (int g = 0; g < (stage == 3 ? 2 : 1); ++g) dp.all_gather(own, t);
  }
  return now() - t0;
}

void run(const Args& a, CommAlgorithm algo, int stage) {
  std::shared_ptr<ProcessGroup> world = init_distributed({algo});
  const int N = world->size(), rank = world->rank(), P = a.pipeline_stages;
  TIDE_CHECK(N % P == 0 && N / P >= 2,
             "bench_dp measures data-parallel reductions: run it with mpirun -np N, N a multiple "
             "of --pipeline-stages {} with at least 2 replicas (N >= {})",
             P, 2 * P);
  const std::string shard =
      bench::write_random_shard("dp", N, rank, a.micro_batch, a.seq_len, a.vocab);
  const TrainConfig cfg = load_train_config(
      "", {"data.train=" + shard, "out_dir=/tmp", fmt::format("model.n_layer={}", a.layers),
           fmt::format("model.n_embd={}", a.embd), fmt::format("model.n_head={}", a.heads),
           fmt::format("model.vocab_size={}", a.vocab), fmt::format("seq_len={}", a.seq_len),
           fmt::format("train_micro_batch_size_per_gpu={}", a.micro_batch),
           fmt::format("train_steps={}", a.steps + 1), fmt::format("chunk_size_mb={}", a.chunk_mb),
           fmt::format("threads={}", a.threads), "log.progress=false",
           fmt::format("zero_optimization.stage={}", stage),
           // Stage 3 as in the paper: gather one chunk ahead, release after use.
           "zero_optimization.stage3_param_persistence_threshold=0",
           fmt::format("pipeline.stages={}", P),
           fmt::format("gradient_accumulation_steps={}", P > 1 ? 2 * P : 1),
           fmt::format("zero_optimization.stage3_prefetch_bucket_size={}",
                       std::max<int64_t>(1, chunk_elems_from_mib(a.chunk_mb)))});
  Trainer trainer(cfg, world);
  const ChunkStore& store = trainer.model().store();  // this rank's stage under pp
  const ChunkLayout& lay = store.layout();
  ProcessGroup& dp = trainer.runner().dp();
  const int D = dp.size();
  const int64_t psi = lay.total_elems();

  trainer.train_step();  // warm-up: first touch of the activation arenas, MPI connections
  double step_s = 0, exposed_s = 0;
  uint64_t bytes_sent = 0;
  StepStats st;
  for (int s = 0; s < a.steps; ++s) {
    world->barrier();
    st = trainer.train_step();
    step_s += st.seconds;
    exposed_s += st.comm_seconds;
    bytes_sent += st.bytes_sent;
  }
  step_s /= a.steps;
  exposed_s /= a.steps;
  bytes_sent /= static_cast<uint64_t>(a.steps);

  double blocking_s = 0;
  for (int s = 0; s < a.steps; ++s) {
    world->barrier();
    blocking_s += blocking_seconds(dp, lay, stage);
  }
  blocking_s /= a.steps;

  const float exposed_max = bench::max_over_ranks(*world, static_cast<float>(exposed_s));
  const float blocking_max = bench::max_over_ranks(*world, static_cast<float>(blocking_s));
  const float step_max = bench::max_over_ranks(*world, static_cast<float>(step_s));
  std::filesystem::remove(shard);
  if (rank != 0) return;
  const double volume = stage == 3 ? 3.0 : 2.0;  // multiples of psi per rank (ZeRO, sec. 7)
  const double theory = volume * static_cast<double>(psi) * (D - 1) / D * sizeof(float);
  const double theory_params = volume * static_cast<double>(lay.num_params()) * (D - 1) / D * 4;
  const double hidden =
      blocking_max > 0 ? std::clamp(1.0 - exposed_max / blocking_max, 0.0, 1.0) : 0.0;
  std::printf(
      "{\"bench\":\"dp\",\"zero_stage\":%d,\"world\":%d,\"pipeline_stages\":%d,\"dp\":%d,"
      "\"algorithm\":\"%s\",\"model\":\"%s\","
      "\"params\":%lld,\"chunks\":%d,\"reductions\":%d,\"gathers\":%d,\"chunk_elems\":%lld,"
      "\"psi\":%lld,\"micro_batch\":%d,\"seq_len\":%d,\"steps\":%d,\"bytes_sent\":%llu,"
      "\"theory_bytes\":%.0f,\"ratio\":%.5f,\"theory_bytes_params\":%.0f,\"step_s\":%.3f,"
      "\"exposed_s\":%.4f,\"blocking_s\":%.4f,\"hidden\":%.3f}\n",
      stage, N, P, D, algo == CommAlgorithm::Ring ? "ring" : "mpi", cfg.model.str().c_str(),
      static_cast<long long>(lay.num_params()), lay.num_chunks(), st.grad_reductions,
      st.param_gathers, static_cast<long long>(lay.max_chunk_elems()), static_cast<long long>(psi),
      a.micro_batch, a.seq_len, a.steps, static_cast<unsigned long long>(bytes_sent), theory,
      static_cast<double>(bytes_sent) / theory, theory_params, step_max, exposed_max, blocking_max,
      hidden);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  // As tide does: the vector kernels where OpenBLAS fell back to its generic ones.
  cpu::reexec_with_vector_openblas_kernels(argv);
  return run_ranks([&] {
    const Args args = parse(argc, argv);
    for (int stage : args.zero_stages)
      for (const char* name : {"mpi", "ring"})
        if (args.algorithm == "both" || args.algorithm == name)
          run(args, parse_comm_algorithm(name), stage);
  });
}

// Data parallelism (ZeRO stage 0): gradient-reduction traffic and how much of the reduction time
// backward hides. Under mpirun, every rank trains the same GPT on its slice of each global batch;
// rank 0 prints one JSON line per communication algorithm (mpi, ring):
//
//   mpirun -np 4 bench_dp [--layers 6] [--embd 384] [--heads 6] [--vocab 2048] [--seq-len 64]
//                         [--micro-batch 2] [--steps 3] [--chunk-mb 3] [--algorithm both]
//                         [--threads 1]
//
// params          model parameters
// psi             gradient elements all-reduced per step: every chunk that holds tensors, padding
//                 at the chunk ends included (that is what goes over the wire)
// bytes_sent      bytes this rank sent for gradient reductions per step, from the process group's
//                 counters (ring: added up message by message; mpi: MPI hides its algorithm, so
//                 the counters record the ring formula)
// theory_bytes    ring all-reduce theory 2*psi*(N-1)/N elements x 4 bytes; ratio = bytes_sent /
//                 theory_bytes (1 up to the rounding of chunks that N does not divide)
// theory_bytes_params  the same for psi = params (no padding): the price of the padding
// step_s          wall time of one optimizer step (mean over the timed steps)
// exposed_s       time the step waited for reductions after backward ended (StepStats)
// blocking_s      the same reductions run alone, one after another, blocking, after the step:
//                 the reduction time if nothing overlapped it
// hidden          1 - exposed_s / blocking_s: the fraction of reduction time hidden behind
//                 backward (clamped to [0, 1]); slowest rank's exposed_s is used

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "tide/comm/distributed.h"
#include "tide/core/rng.h"
#include "tide/data/shard.h"
#include "tide/train/trainer.h"

using namespace tide;

namespace {

struct Args {
  int layers = 6, embd = 384, heads = 6, vocab = 2048, seq_len = 64, micro_batch = 2;
  int steps = 3, threads = 1;
  double chunk_mb = 3.0;  // = the largest tensor (wte, 2048 x 384) at the defaults
  std::string algorithm = "both";
};

Args parse(int argc, char** argv) {
  Args a;
  CLI::App app{"data-parallel gradient reduction: bytes vs ring theory, overlap", "bench_dp"};
  app.add_option("--layers", a.layers)->capture_default_str();
  app.add_option("--embd", a.embd)->capture_default_str();
  app.add_option("--heads", a.heads)->capture_default_str();
  app.add_option("--vocab", a.vocab)->capture_default_str();
  app.add_option("--seq-len", a.seq_len)->capture_default_str();
  app.add_option("--micro-batch", a.micro_batch)->capture_default_str();
  app.add_option("--steps", a.steps)->capture_default_str();
  app.add_option("--threads", a.threads, "OpenMP threads per rank")->capture_default_str();
  app.add_option("--chunk-mb", a.chunk_mb, "chunk size in MiB")->capture_default_str();
  app.add_option("--algorithm", a.algorithm, "mpi, ring or both")
      ->check(CLI::IsMember({"mpi", "ring", "both"}))
      ->capture_default_str();
  bench::parse_args(app, argc, argv);
  TIDE_CHECK(a.steps >= 1 && a.vocab >= 2 && a.vocab <= 65536,
             "--steps must be >= 1 and --vocab in [2, 65536] (got {} and {})", a.steps, a.vocab);
  return a;
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Random tokens: enough sequences for a few global batches (the loader wraps around epochs).
// Each rank writes its own copy, so no shared file system or barrier is needed.
std::string write_random_shard(const Args& a, int world, int rank) {
  const std::string path = fmt::format("/tmp/tide_bench_dp_{}_{}.bin", ::getpid(), rank);
  const int64_t sequences = int64_t{4} * world * a.micro_batch;
  std::vector<uint16_t> tokens(static_cast<size_t>(sequences * a.seq_len + 1));
  const PhiloxStream rng{11, 0};
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<uint16_t>(rng.uint(i) % static_cast<uint32_t>(a.vocab));
  write_token_shard(path, std::span<const uint16_t>(tokens));
  return path;
}

// Maximum of a per-rank value over the world (all-gather, then max: no max reduction needed).
float max_over_ranks(ProcessGroup& world, float v) {
  std::vector<float> all(static_cast<size_t>(world.size()));
  world.all_gather(Tensor(&v, {1}), Tensor(all.data(), {world.size()}));
  return *std::max_element(all.begin(), all.end());
}

void run(const Args& a, CommAlgorithm algo) {
  std::shared_ptr<ProcessGroup> world = init_distributed({algo});
  const int N = world->size(), rank = world->rank();
  TIDE_CHECK(N >= 2,
             "bench_dp measures data-parallel reductions: run it with mpirun -np N, N >= 2");
  const std::string shard = write_random_shard(a, N, rank);
  const TrainConfig cfg = load_train_config(
      "", {"data.train=" + shard, "out_dir=/tmp", fmt::format("model.n_layer={}", a.layers),
           fmt::format("model.n_embd={}", a.embd), fmt::format("model.n_head={}", a.heads),
           fmt::format("model.vocab_size={}", a.vocab), fmt::format("seq_len={}", a.seq_len),
           fmt::format("train_micro_batch_size_per_gpu={}", a.micro_batch),
           fmt::format("train_steps={}", a.steps + 1), fmt::format("chunk_size_mb={}", a.chunk_mb),
           fmt::format("threads={}", a.threads), "log.progress=false"});
  Trainer trainer(cfg, world);
  const ChunkStore& store = trainer.model().store();
  const ChunkLayout& lay = store.layout();
  std::vector<int> reduced;  // every chunk holds tensors: the trainer reduces each once a step
  for (int c = 0; c < lay.num_chunks(); ++c) reduced.push_back(c);
  const int64_t psi = lay.total_elems();

  trainer.train_step();  // warm-up: first touch of the activation arenas, MPI connections
  double step_s = 0, exposed_s = 0;
  uint64_t bytes_sent = 0;
  for (int s = 0; s < a.steps; ++s) {
    world->barrier();
    const StepStats st = trainer.train_step();
    TIDE_ASSERT(st.grad_reductions == static_cast<int>(reduced.size()));
    step_s += st.seconds;
    exposed_s += st.comm_seconds;
    bytes_sent += st.bytes_sent;
  }
  step_s /= a.steps;
  exposed_s /= a.steps;
  bytes_sent /= static_cast<uint64_t>(a.steps);

  // The same reductions without backward to hide behind: blocking, one chunk after another.
  double blocking_s = 0;
  for (int s = 0; s < a.steps; ++s) {
    world->barrier();
    const double t0 = now();
    for (int c : reduced) world->all_reduce(store.chunk(ChunkKind::GRAD, c), ReduceOp::Avg);
    blocking_s += now() - t0;
  }
  blocking_s /= a.steps;

  const float exposed_max = max_over_ranks(*world, static_cast<float>(exposed_s));
  const float blocking_max = max_over_ranks(*world, static_cast<float>(blocking_s));
  const float step_max = max_over_ranks(*world, static_cast<float>(step_s));
  std::filesystem::remove(shard);
  if (rank != 0) return;
  const double theory = 2.0 * static_cast<double>(psi) * (N - 1) / N * sizeof(float);
  const double theory_params = 2.0 * static_cast<double>(lay.num_params()) * (N - 1) / N * 4;
  const double hidden =
      blocking_max > 0 ? std::clamp(1.0 - exposed_max / blocking_max, 0.0, 1.0) : 0.0;
  std::printf(
      "{\"bench\":\"dp\",\"world\":%d,\"algorithm\":\"%s\",\"model\":\"%s\",\"params\":%lld,"
      "\"chunks_reduced\":%zu,\"chunk_elems\":%lld,\"psi\":%lld,\"micro_batch\":%d,"
      "\"seq_len\":%d,\"steps\":%d,\"bytes_sent\":%llu,\"theory_bytes\":%.0f,\"ratio\":%.5f,"
      "\"theory_bytes_params\":%.0f,\"step_s\":%.3f,\"exposed_s\":%.4f,\"blocking_s\":%.4f,"
      "\"hidden\":%.3f}\n",
      N, algo == CommAlgorithm::Ring ? "ring" : "mpi", cfg.model.str().c_str(),
      static_cast<long long>(lay.num_params()), reduced.size(),
      static_cast<long long>(lay.max_chunk_elems()), static_cast<long long>(psi), a.micro_batch,
      a.seq_len, a.steps, static_cast<unsigned long long>(bytes_sent), theory,
      static_cast<double>(bytes_sent) / theory, theory_params, step_max, exposed_max, blocking_max,
      hidden);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  return run_ranks([&] {
    const Args args = parse(argc, argv);
    for (const char* name : {"mpi", "ring"})
      if (args.algorithm == "both" || args.algorithm == name) run(args, parse_comm_algorithm(name));
  });
}

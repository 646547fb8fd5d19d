// All-reduce bandwidth over the MPI backend, for buffer sizes 1 KiB .. 64 MiB, with MPI's own
// algorithm and tide's explicit ring. One JSON line per (algorithm, size), printed by rank 0:
//
//   mpirun -np 4 bench_allreduce [--min-bytes 1024] [--max-bytes 67108864] [--algorithm both]
//
// time_us   mean time of one all-reduce: the slowest rank's mean (ranks end at different times)
// algbw     bytes / time
// busbw     algbw * 2(N-1)/N: the traffic through each rank's link in a ring, comparable across
//           world sizes (the nccl-tests convention)
// sent_per_rank / theory_sent: bytes this rank's counters recorded per call, and 2n(N-1)/N

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "tide/comm/distributed.h"
#include "tide/comm/ring_traffic.h"

using namespace tide;

namespace {

struct Args {
  int64_t min_bytes = 1024, max_bytes = 64 << 20;
  std::string algorithm = "both";
  double seconds_per_size = 0.2;  // time budget per measurement, after one warm-up call
};

Args parse(int argc, char** argv) {
  Args a;
  CLI::App app{"all-reduce bandwidth and bytes per rank", "bench_allreduce"};
  app.add_option("--min-bytes", a.min_bytes, "smallest message")->capture_default_str();
  app.add_option("--max-bytes", a.max_bytes, "largest message")->capture_default_str();
  app.add_option("--algorithm", a.algorithm, "mpi, ring or both")
      ->check(CLI::IsMember({"mpi", "ring", "both"}))
      ->capture_default_str();
  app.add_option("--seconds", a.seconds_per_size, "time budget per size")->capture_default_str();
  bench::parse_args(app, argc, argv);
  TIDE_CHECK(a.min_bytes >= 4 && a.min_bytes <= a.max_bytes,
             "--min-bytes {} / --max-bytes {}: need 4 <= min <= max", a.min_bytes, a.max_bytes);
  return a;
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void run(ProcessGroup& world, const Args& args, CommAlgorithm algo) {
  ProcessGroup* g = &world;
  const int N = world.size();
  for (int64_t bytes = args.min_bytes; bytes <= args.max_bytes; bytes *= 4) {
    const int64_t n = bytes / 4;
    std::vector<float> x(static_cast<size_t>(n), 1.0f);
    Tensor t(x.data(), {n});
    g->all_reduce(t);  // warm-up
    // Every rank must run the same number of iterations: rank 0 decides from the warm-up.
    float iters_f = 0;
    {
      g->barrier();
      const double t0 = now();
      g->all_reduce(t);
      const double dt = now() - t0;
      iters_f = static_cast<float>(std::max(3.0, std::min(1000.0, args.seconds_per_size / dt)));
      g->broadcast(Tensor(&iters_f, {1}), 0);
    }
    const int iters = static_cast<int>(iters_f);
    g->barrier();
    g->reset_counters();
    const double t0 = now();
    for (int i = 0; i < iters; ++i) g->all_reduce(t);
    float mean = static_cast<float>((now() - t0) / iters);
    const CommCounters c = g->counters();
    // Slowest rank's mean: all-gather the means (no max reduction needed).
    std::vector<float> means(static_cast<size_t>(N));
    g->all_gather(Tensor(&mean, {1}), Tensor(means.data(), {N}));
    float slowest = 0;
    for (float m : means) slowest = std::max(slowest, m);
    if (world.rank() == 0) {
      const double algbw = static_cast<double>(bytes) / slowest / 1e9;
      std::printf(
          "{\"bench\":\"allreduce\",\"world\":%d,\"algorithm\":\"%s\",\"bytes\":%lld,"
          "\"iters\":%d,\"time_us\":%.1f,\"algbw_GBps\":%.3f,\"busbw_GBps\":%.3f,"
          "\"sent_per_rank\":%llu,\"theory_sent\":%lld}\n",
          N, algo == CommAlgorithm::Ring ? "ring" : "mpi", static_cast<long long>(bytes), iters,
          slowest * 1e6, algbw, algbw * 2.0 * (N - 1) / N,
          static_cast<unsigned long long>(c.bytes_sent / static_cast<uint64_t>(iters)),
          static_cast<long long>(ring_all_reduce_traffic(n, N, 0).sent * 4));
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  return run_ranks([&] {
    const Args args = parse(argc, argv);
    for (const char* name : {"mpi", "ring"}) {
      if (args.algorithm != "both" && args.algorithm != name) continue;
      const CommAlgorithm algo = parse_comm_algorithm(name);
      auto world = init_distributed({algo});
      run(*world, args, algo);
    }
  });
}

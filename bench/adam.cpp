// bench_adam: throughput of the CPU AdamW (tide::adamw_cpu) next to the machine's memory
// bandwidth, measured in the same run with the same threads by a STREAM triad.
//
// For each size n it prints one JSON line:
//   params_per_s  parameters updated per second (best of --reps steps)
//   gbps          effective bandwidth = bytes_per_param * n / time, where bytes_per_param
//                 counts what the update must move: f32 grads + bf16 param copy =
//                 read master 4 + grad 4 + m 4 + v 4, write master 4 + m 4 + v 4 + param 2 = 30
//                 (bf16 grads: 28; no param copy: 2 fewer)
//   triad_gbps    best STREAM triad a[i] = b[i] + s*c[i] on float arrays, 12 bytes/element,
//                 one triad repetition after each AdamW repetition (same machine state);
//                 the better of plain stores (triad_plain_gbps) and streaming stores
//                 (triad_streaming_gbps)
//   frac_of_triad gbps / triad_gbps
//   speedup_vs_reference  time of the plain scalar adamw_reference loop (1 thread, f32
//                 grads, no param copy: it moves 2 bytes/param less) over this update's time
//
// Usage: bench_adam [--max-params 1e8] [--threads N] [--reps 5] [--path auto|scalar|avx2|avx512]
//                   [--grad f32|bf16|f16] [--check caller|prescan] [--tile 16384]
//                   [--nt none|param|all]   (streaming stores; default param)
//                   [--sweep]   (also prints tile-size / streaming-store / prescan variants at
//                                the largest n, the data behind the defaults)

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "tide/core/dtype.h"
#include "tide/core/error.h"
#include "tide/optim/adamw.h"
#include "tide/optim/adamw_cpu.h"

using namespace tide;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <typename T>
T* alloc(int64_t n) {
  void* p = std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64);
  TIDE_CHECK(p, "bench_adam: out of memory allocating {} bytes; lower --max-params", n * sizeof(T));
  return static_cast<T*>(p);
}

// STREAM triad a[i] = b[i] + s*c[i] over float arrays (12 bytes/element), same OpenMP
// static partition and thread count as the update. One repetition per call: main()
// interleaves triad and AdamW repetitions so that both see the same machine (this machine is
// shared; a triad measured once up front would not be comparable).
struct Triad {
  Triad(int64_t n, int threads)
      : n(n), threads(threads), a(alloc<float>(n)), b(alloc<float>(n)), c(alloc<float>(n)) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t i = 0; i < n; ++i) a[i] = 0.0f, b[i] = 1.0f, c[i] = 2.0f;
  }
  ~Triad() {
    std::free(a), std::free(b), std::free(c);
  }
  double once() {  // seconds
    const float s = 3.0f;
    const double t0 = now();
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
    const double t = now() - t0;
    volatile float sink = a[n / 2];  // keep the stores
    (void)sink;
    return t;
  }
  // The same triad with streaming stores for a (SSE, any x86-64): no read-for-ownership of
  // a's lines, so all 12 counted bytes are the bytes moved. On this VM plain stores reach
  // only about half of it, so AdamW is compared against the better of the two.
  double once_streaming() {
    const __m128 s = _mm_set1_ps(3.0f);
    const double t0 = now();
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t i = 0; i < n; i += 4)
      _mm_stream_ps(a + i, _mm_add_ps(_mm_load_ps(b + i), _mm_mul_ps(s, _mm_load_ps(c + i))));
    _mm_sfence();
    return now() - t0;
  }
  double gbps(double t) const {
    return 12.0 * n / t / 1e9;
  }
  int64_t n;
  int threads;
  float *a, *b, *c;
};

struct Buffers {
  float *master, *grad32, *m, *v;
  uint16_t *grad16, *out16;
};

struct Config {
  int threads;
  int reps;
  AdamWCpuOptions opt;
  DType grad;
};

struct Timing {
  double adam = 1e30, triad = 1e30, triad_streaming = 1e30;  // best seconds
};

// Best times of reps steps of adamw_cpu on the first n elements, each step followed by one
// triad repetition.
Timing time_adam(const Buffers& b, int64_t n, const Config& cfg, const AdamWCpuOptions& opt,
                 Triad& triad) {
  const AdamWHyper h{1e-4, 0.9, 0.95, 1e-8, 0.1};
  AdamWChunk c{b.master,    cfg.grad == DType::F32 ? (void*)b.grad32 : (void*)b.grad16,
               cfg.grad,    b.m,
               b.v,         b.out16,
               DType::BF16, n};
  Timing best;
  // Small sizes are cheap and suffer most from a busy machine: repeat them more.
  const int reps = cfg.reps * (n <= 1000000 ? 20 : n <= 10000000 ? 4 : 1);
  for (int r = 0; r < reps; ++r) {
    const double t0 = now();
    const bool applied = adamw_cpu(c, h, AdamWStep{r + 1, 1.0f}, opt);
    best.adam = std::min(best.adam, now() - t0);
    TIDE_CHECK(applied,
               "bench_adam: the step was skipped (non-finite gradients in the bench data)");
    best.triad = std::min(best.triad, triad.once());
    best.triad_streaming = std::min(best.triad_streaming, triad.once_streaming());
  }
  return best;
}

double time_reference(const Buffers& b, int64_t n, int reps) {
  const AdamWHyper h{1e-4, 0.9, 0.95, 1e-8, 0.1};
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now();
    adamw_reference(b.master, b.grad32, b.m, b.v, n, h, AdamWStep{r + 1, 1.0f});
    best = std::min(best, now() - t0);
  }
  return best;
}

const char* streaming_name(Streaming s) {
  return s == Streaming::kAll ? "all" : s == Streaming::kParamCopy ? "param" : "none";
}

Streaming parse_streaming(const std::string& s) {
  if (s == "none") return Streaming::kNone;
  if (s == "param") return Streaming::kParamCopy;
  if (s == "all") return Streaming::kAll;
  TIDE_FAIL("bench_adam: --nt {} is unknown; use none, param or all", s);
}

int bytes_per_param(DType grad) {
  return 4 + static_cast<int>(dtype_size(grad)) + 4 + 4 + 4 + 4 + 4 + 2;
}

void print_line(const char* variant, int64_t n, const Config& cfg, const AdamWCpuOptions& opt,
                double t, double triad_plain, double triad_streaming, double t_ref) {
  const int bpp = bytes_per_param(cfg.grad);
  const double gbps = double(bpp) * n / t / 1e9;
  const double triad = std::max(triad_plain, triad_streaming);
  std::printf(
      "{\"bench\":\"adamw_cpu\",\"variant\":\"%s\",\"n\":%lld,\"path\":\"%s\",\"threads\":%d,"
      "\"grad\":\"%s\",\"param_out\":\"bf16\",\"check\":\"%s\",\"tile\":%lld,\"nontemporal\":\"%"
      "s\","
      "\"bytes_per_param\":%d,\"best_s\":%.6f,\"params_per_s\":%.4g,\"gbps\":%.2f,"
      "\"triad_plain_gbps\":%.2f,\"triad_streaming_gbps\":%.2f,\"triad_gbps\":%.2f,"
      "\"frac_of_triad\":%.3f",
      variant, static_cast<long long>(n),
      std::string(simd_path_name(opt.path == SimdPath::kAuto ? best_simd_path() : opt.path))
          .c_str(),
      cfg.threads, std::string(dtype_name(cfg.grad)).c_str(),
      opt.check == FiniteCheck::kPrescan ? "prescan" : "caller", static_cast<long long>(opt.tile),
      n >= opt.nontemporal_min ? streaming_name(opt.nontemporal) : "none", bpp, t, n / t, gbps,
      triad_plain, triad_streaming, triad, gbps / triad);
  if (t_ref > 0)
    std::printf(",\"reference_s\":%.6f,\"speedup_vs_reference\":%.2f", t_ref, t_ref / t);
  std::printf("}\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) try {
  double max_params = 1e8;
  Config cfg{omp_get_max_threads(), 5, {}, DType::F32};
  // The trainer's mode: the NaN/Inf verdict comes from the gradient-norm pass it runs anyway,
  // so the update itself moves exactly bytes_per_param. --check prescan adds the read-only scan.
  cfg.opt.check = FiniteCheck::kCheckedByCaller;
  bool sweep = false;
  std::string path = "auto", grad = "f32", nt, check = "caller";
  CLI::App app{"AdamW parameters/s and GB/s next to the STREAM triad", "bench_adam"};
  app.add_option("--max-params", max_params, "largest size (1e6..1e9)")->capture_default_str();
  app.add_option("--threads", cfg.threads)->capture_default_str();
  app.add_option("--reps", cfg.reps, "repetitions (best is kept)")->capture_default_str();
  app.add_option("--path", path, "auto, scalar, avx2, avx512")->capture_default_str();
  app.add_option("--grad", grad, "gradient dtype: f32, bf16, f16")->capture_default_str();
  app.add_option("--tile", cfg.opt.tile, "elements per OpenMP work item")->capture_default_str();
  app.add_option("--nt", nt, "streaming stores (see the top of this file)");
  app.add_option("--check", check, "prescan or caller")
      ->check(CLI::IsMember({"prescan", "caller"}))
      ->capture_default_str();
  app.add_flag("--sweep", sweep, "also sweep tile size, streaming, check and path");
  bench::parse_args(app, argc, argv);
  cfg.opt.path = parse_simd_path(path);
  cfg.grad = parse_dtype(grad);
  if (!nt.empty()) cfg.opt.nontemporal = parse_streaming(nt);
  cfg.opt.check = check == "prescan" ? FiniteCheck::kPrescan : FiniteCheck::kCheckedByCaller;
  TIDE_CHECK(max_params >= 1e6 && max_params <= 1e9,
             "bench_adam: --max-params {} must be between 1e6 and 1e9 (1e9 needs ~18 GB)",
             max_params);
  TIDE_CHECK(cfg.reps >= 1 && cfg.threads >= 1, "bench_adam: --reps and --threads must be >= 1");
  cfg.opt.threads = cfg.threads;

  std::vector<int64_t> sizes;
  for (double n = 1e6; n <= max_params * 1.0001; n *= 10) sizes.push_back(static_cast<int64_t>(n));
  const int64_t nmax = sizes.back();

  // Triad arrays of 2^25 floats (128 MiB each, 12x the 32 MiB L3 here): DRAM bandwidth.
  Triad triad(int64_t{1} << 25, cfg.threads);

  Buffers b{alloc<float>(nmax), alloc<float>(nmax),    alloc<float>(nmax),
            alloc<float>(nmax), alloc<uint16_t>(nmax), alloc<uint16_t>(nmax)};
  // First touch with the same static partition the update uses; small finite values.
#pragma omp parallel for schedule(static) num_threads(cfg.threads)
  for (int64_t i = 0; i < nmax; ++i) {
    const float x = static_cast<float>((i * 7919) % 2001 - 1000) * 1e-3f;
    b.master[i] = x, b.grad32[i] = 0.01f * x, b.m[i] = 0.0f, b.v[i] = 0.0f;
    b.grad16[i] = cfg.grad == DType::F16 ? f32_to_f16(0.01f * x) : f32_to_bf16(0.01f * x);
    b.out16[i] = 0;
  }

  Timing best_triad;
  const auto run = [&](const char* variant, int64_t n, const AdamWCpuOptions& o, double t_ref) {
    const Timing t = time_adam(b, n, cfg, o, triad);
    best_triad.triad = std::min(best_triad.triad, t.triad);
    best_triad.triad_streaming = std::min(best_triad.triad_streaming, t.triad_streaming);
    print_line(variant, n, cfg, o, t.adam, triad.gbps(t.triad), triad.gbps(t.triad_streaming),
               t_ref);
  };
  for (int64_t n : sizes) run("default", n, cfg.opt, time_reference(b, n, std::min(cfg.reps, 3)));
  if (sweep) {
    for (int64_t tile : {4096, 16384, 65536, 262144}) {
      AdamWCpuOptions o = cfg.opt;
      o.tile = tile;
      run("tile", nmax, o, 0);
    }
    AdamWCpuOptions o = cfg.opt;
    for (Streaming nt : {Streaming::kNone, Streaming::kParamCopy, Streaming::kAll}) {
      o.nontemporal = nt;
      run("streaming", nmax, o, 0);
    }
    o = cfg.opt;
    o.check =
        o.check == FiniteCheck::kPrescan ? FiniteCheck::kCheckedByCaller : FiniteCheck::kPrescan;
    run("toggle_check", nmax, o, 0);
    o = cfg.opt;
    o.path = SimdPath::kScalar;
    run("scalar_path", nmax, o, 0);
  }
  std::printf(
      "{\"bench\":\"stream_triad\",\"n\":%d,\"threads\":%d,\"bytes_per_elem\":12,"
      "\"best_plain_gbps_of_run\":%.2f,\"best_streaming_gbps_of_run\":%.2f}\n",
      1 << 25, cfg.threads, triad.gbps(best_triad.triad), triad.gbps(best_triad.triad_streaming));
  return 0;
} catch (const tide::Error& e) {
  std::fprintf(stderr, "bench_adam: error: %s\n", e.what());
  return 1;
}

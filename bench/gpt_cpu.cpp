// bench_gpt_cpu: training throughput of a small GPT on the CPU (tokens/s and achieved
// GFLOP/s), next to the machine's sgemm peak measured in the same run with the same threads.
//
// One training step is what tide's trainer does: zero the gradients, forward, backward,
// AdamW on every tensor (tide::adamw_cpu, one call per tensor, weight decay on matrices).
// The micro-batch is one fixed random batch, reused every step (the loss must fall: a check
// that the step really trains).
//
// Model FLOPs per token (PaLM, appendix B; llm.c counts the same way):
//   flops_per_token = 6*N + 12*L*T*C
// N = all parameters, the tied LM head counted once (it IS wte: its V*C matmul is the
// 6*V*C part of 6N; wpe's T*C are counted although they do no matmul, as llm.c does). 6 = 2
// (multiply-add) x 3 (forward, backward-input, backward-weight). 12*L*T*C is the attention core:
// QK^T and AV, 2*T*C flops each per token and layer in forward, twice that in backward. Like PaLM
// it counts the full T x T scores although the causal mask lets the kernels skip half, and it does
// not count the recomputation of the selective/full policies: "model FLOPs", so the three policies
// are compared on equal terms (a policy that recomputes more shows up as fewer achieved GFLOP/s).
//
// The sgemm peak: C(M,N) = A(M,K) @ B(N,K)^T (the product matmul_forward does), on a square
// 1024^3 problem and on the model's MLP shape (M,N,K) = (B*T, 4C, C), in two ways:
//   openblas_threads  cblas_sgemm with OpenBLAS's own threading (openblas_set_num_threads)
//   tide_matmul       tide::matmul_forward: OpenBLAS pinned to one thread per fixed-size tile,
//                     tiles spread over OpenMP threads (reproducible whatever the thread
//                     count; see src/tide/kernels/cpu/gemm.h). This is what training runs.
// Each is the best of --steps repetitions (a peak is a best case).
//
// The run goes in rounds: one training step of each policy, then one repetition of each sgemm
// probe; --warmup untimed rounds, then --steps timed ones. On a shared machine the load
// changes from second to second; interleaving lets every policy and the peak see the same
// conditions, so their ratios mean something even when the absolute numbers are noisy.
//
// Output, JSON lines:
//   kind=config  the model and run settings, the load average before the run, params,
//                flops_per_token and its formula
//   kind=sgemm   impl, shape "MxNxK", ms (best), gflops
//   kind=train   one line per activation policy: ms per step split into forward, backward,
//                optimizer (medians over --steps timed steps; step_ms_min the fastest step),
//                tokens_per_s and gflops from the median step, mfu_openblas / mfu_tide_matmul
//                = gflops / the best sgemm GFLOP/s of that implementation; gflops_best and
//                mfu_tide_matmul_best the same from the fastest step (best case against best
//                case: the fairer ratio on a loaded machine); loss of the first and last step
//                (the same for every policy: they compute the same gradients); peak bytes
//                of the activation ("saved") and workspace arenas
//
// Usage: bench_gpt_cpu [--L 4] [--H 4] [--C 256] [--V 4096] [--T 128] [--B 8]
//                      [--threads N] [--steps 10] [--warmup 2]
//                      [--policies none,selective,full] [--no-sgemm]

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "tide/core/error.h"
#include "tide/core/rng.h"
#include "tide/kernels/cpu/gemm_bf16.h"
#include "tide/kernels/cpu/openblas_core.h"
#include "tide/kernels/ops.h"
#include "tide/model/gpt.h"
#include "tide/parallel/optimizer_step.h"

using namespace tide;

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Options {
  GPTConfig model;
  int B = 8, T = 128;
  int threads = 0;  // 0: OpenMP's default
  int steps = 10, warmup = 2;
  bool no_sgemm = false;  // skip the sgemm peak probes (bench/vs_torch.py: training only)
  // The compute dtype (tide train's bf16.enabled / fp16.enabled): 16-bit parameters, gradients
  // and activations, f32 master weights and Adam states.
  DType dtype = DType::F32;
  std::vector<ActivationPolicy> policies = {ActivationPolicy::SAVE_ALL, ActivationPolicy::SELECTIVE,
                                            ActivationPolicy::FULL};
};

std::vector<ActivationPolicy> parse_policies(const std::string& list) {
  std::vector<ActivationPolicy> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    out.push_back(parse_activation_policy(list.substr(start, comma - start)));
    start = comma + 1;
  }
  return out;
}

Options parse_options(int argc, char** argv) {
  Options o;
  o.model.n_layer = 4;
  o.model.n_head = 4;
  o.model.n_embd = 256;
  o.model.vocab_size = 4096;
  o.model.dropout = 0.0f;
  std::string policies;
  CLI::App app{"GPT training tokens/s and GFLOP/s next to the sgemm peak", "bench_gpt_cpu"};
  app.add_option("--L", o.model.n_layer, "layers")->capture_default_str();
  app.add_option("--H", o.model.n_head, "heads")->capture_default_str();
  app.add_option("--C", o.model.n_embd, "hidden size")->capture_default_str();
  app.add_option("--V", o.model.vocab_size, "vocabulary")->capture_default_str();
  app.add_option("--T", o.T, "sequence length")->capture_default_str();
  app.add_option("--B", o.B, "micro-batch")->capture_default_str();
  app.add_option("--threads", o.threads, "OpenMP threads (0: default)")->capture_default_str();
  app.add_option("--steps", o.steps, "timed steps")->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed steps first")->capture_default_str();
  app.add_option("--policies", policies, "comma-separated: none,selective,full");
  app.add_flag("--no-sgemm", o.no_sgemm, "skip the sgemm peak probes (mfu_* print 0)");
  std::string dtype = "f32";
  app.add_option("--dtype", dtype, "compute dtype: f32, bf16 or f16")->capture_default_str();
  bench::parse_args(app, argc, argv);
  o.dtype = parse_dtype(dtype);
  if (!policies.empty()) o.policies = parse_policies(policies);
  TIDE_CHECK(o.B > 0 && o.T > 0, "--B and --T must be positive (got {} and {})", o.B, o.T);
  TIDE_CHECK(o.threads >= 0, "--threads must be >= 1 (or 0 for OpenMP's default)");
  TIDE_CHECK(o.steps >= 1 && o.warmup >= 0,
             "--steps must be >= 1 and --warmup >= 0 (got {} and {})", o.steps, o.warmup);
  o.model.max_seq_len = o.T;  // wpe sized for exactly the benchmarked sequence length
  o.model.validate();         // names the bad field (e.g. C not divisible by H)
  return o;
}

// ---- sgemm peak ------------------------------------------------------------------------

struct Gemm {
  int64_t M, N, K;
  std::string shape() const { return fmt::format("{}x{}x{}", M, N, K); }
  double flops() const { return 2.0 * M * N * K; }
};

// One sgemm problem C(M,N) = A(M,K) @ B(N,K)^T through one implementation, with its data.
class SgemmProbe {
 public:
  SgemmProbe(Gemm g, bool openblas_threads, int threads)
      : g_(g), openblas_threads_(openblas_threads), threads_(threads) {
    a_.resize(g.M * g.K), b_.resize(g.N * g.K), c_.resize(g.M * g.N);
    const PhiloxStream rng{7, 1};
    for (size_t i = 0; i < a_.size(); ++i) a_[i] = rng.uniform(i) - 0.5f;
    for (size_t i = 0; i < b_.size(); ++i) b_[i] = rng.uniform(a_.size() + i) - 0.5f;
  }
  const Gemm& gemm() const { return g_; }
  const char* impl() const { return openblas_threads_ ? "openblas_threads" : "tide_matmul"; }
  double best_ms() const { return best_ms_; }

  // One repetition; `timed` = false for the warm-up (first touch, OpenBLAS buffers).
  void run(bool timed) {
    const auto t0 = Clock::now();
    if (openblas_threads_) {
      // Set on every call: tide's gemm pins OpenBLAS back to one thread whenever it runs.
      openblas_set_num_threads(threads_);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(g_.M),
                  static_cast<int>(g_.N), static_cast<int>(g_.K), 1.0f, a_.data(),
                  static_cast<int>(g_.K), b_.data(), static_cast<int>(g_.K), 0.0f, c_.data(),
                  static_cast<int>(g_.N));
    } else {
      matmul_forward(OpContext{}, Tensor(c_.data(), {g_.M, g_.N}), Tensor(a_.data(), {g_.M, g_.K}),
                     Tensor(b_.data(), {g_.N, g_.K}), Tensor{});
    }
    if (timed) best_ms_ = std::min(best_ms_, ms_since(t0));
  }

 private:
  Gemm g_;
  bool openblas_threads_;
  int threads_;
  std::vector<float> a_, b_, c_;
  double best_ms_ = 1e30;
};

// ---- training --------------------------------------------------------------------------

// One optimizer step over every tensor, as the trainer applies it.
void adamw_step(ChunkStore& store, int64_t t) {
  AdamWHyper h;
  h.lr = 1e-3;
  h.weight_decay = 0.1;
  tide::adamw_step(OpContext{}, store, h, AdamWStep{t, 1.0f});
}

ModelOptions model_options(DType dtype) {
  ModelOptions m;
  m.store.compute_dtype = dtype;
  return m;
}

// A model trained under one activation policy, with its timings.
class PolicyRun {
 public:
  PolicyRun(const Options& o, ActivationPolicy policy)
      : policy_(policy),
        model_(o.model, policy, model_options(o.dtype)),
        mb_(model_.make_micro_batch(o.B, o.T)) {
    model_.init_weights(1337);
    // One fixed random sequence of B*T+1 tokens; targets are the inputs shifted by one.
    const int64_t n = int64_t{o.B} * o.T;
    const int V = o.model.vocab_size;
    const PhiloxStream rng{42, 3};
    std::vector<int32_t> seq(n + 1);
    for (int64_t i = 0; i <= n; ++i) seq[i] = std::min(V - 1, static_cast<int>(rng.uniform(i) * V));
    std::copy(seq.begin(), seq.end() - 1, mb_->tokens.i32());
    std::copy(seq.begin() + 1, seq.end(), mb_->targets.i32());
  }

  // One training step: zero grads, forward, backward, AdamW.
  void step(bool timed) {
    ChunkStore& store = model_.store();
    const auto t0 = Clock::now();
    store.zero(ChunkKind::GRAD, model_.op());
    store.begin_step();
    mb_->training = true;
    mb_->step = static_cast<uint64_t>(steps_done_);
    mb_->index = 0;
    mb_->dloss = 1.0f;
    const auto t_fwd = Clock::now();
    const float loss = model_.forward(*mb_);
    const double fwd = ms_since(t_fwd);
    const auto t_bwd = Clock::now();
    model_.backward(*mb_);
    const double bwd = ms_since(t_bwd);
    TIDE_CHECK(std::isfinite(loss),
               "the loss at step {} is not finite ({}); this is a bug in the model or the "
               "optimizer, not in the benchmark settings",
               steps_done_, loss);
    const auto t_opt = Clock::now();
    adamw_step(store, ++steps_done_);
    const double opt = ms_since(t_opt);
    const double total = ms_since(t0);
    if (steps_done_ == 1) loss_first = loss;
    loss_last = loss;
    if (!timed) return;
    fwd_ms.push_back(fwd);
    bwd_ms.push_back(bwd);
    opt_ms.push_back(opt);
    step_ms.push_back(total);
  }

  ActivationPolicy policy() const { return policy_; }
  size_t activation_peak() const { return mb_->saved.peak(); }
  size_t workspace_peak() const { return mb_->workspace.peak(); }

  std::vector<double> fwd_ms, bwd_ms, opt_ms, step_ms;
  float loss_first = 0, loss_last = 0;

 private:
  ActivationPolicy policy_;
  GPT model_;
  std::unique_ptr<MicroBatch> mb_;
  int64_t steps_done_ = 0;
};

}  // namespace

int main(int argc, char** argv) try {
  // As tide does: the vector kernels where OpenBLAS fell back to the generic ones.
  cpu::reexec_with_vector_openblas_kernels(argv);
  const Options o = parse_options(argc, argv);
  if (o.threads > 0) omp_set_num_threads(o.threads);
  const int threads = omp_get_max_threads();
  const GPTConfig& m = o.model;
  const int64_t params = m.num_parameters();
  const double flops_per_token =
      6.0 * params + 12.0 * m.n_layer * static_cast<double>(o.T) * m.n_embd;
  const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
  // The machine's 1-minute load average before the run (Linux; -1 elsewhere): on a shared
  // machine, the context every number below needs.
  double load = -1;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = -1;
    std::fclose(f);
  }
  std::printf(
      "{\"bench\":\"gpt_cpu\",\"kind\":\"config\",\"L\":%d,\"H\":%d,\"C\":%d,\"V\":%d,\"T\":%d,"
      "\"B\":%d,\"dtype\":\"%s\",\"threads\":%d,\"steps\":%d,\"warmup\":%d,"
      "\"omp_wait_policy\":\"%s\","
      "\"loadavg_1min\":%.2f,"
      "\"openblas\":\"%s\",\"bf16_gemm\":\"%s\",\"params\":%lld,\"flops_per_token\":%.0f,"
      "\"flops_formula\":\"6*N + 12*L*T*C (N = all params, tied head once)\"}\n",
      m.n_layer, m.n_head, m.n_embd, m.vocab_size, o.T, o.B,
      std::string(dtype_name(o.dtype)).c_str(), threads, o.steps, o.warmup,
      wait_policy ? wait_policy : "", load, openblas_get_config(),
      std::string(cpu::bf16_gemm_path_name(cpu::bf16_gemm_path())).c_str(),
      static_cast<long long>(params), flops_per_token);
  std::fflush(stdout);

  // Everything runs in interleaved rounds: one step of each policy, then one repetition of
  // each sgemm probe. On a shared machine the load changes over seconds; interleaving makes
  // every policy and the peak see the same conditions (as bench_adam does with its triad).
  std::vector<std::unique_ptr<SgemmProbe>> probes;
  if (!o.no_sgemm) {
    for (const Gemm& g : {Gemm{1024, 1024, 1024},
                          Gemm{int64_t{o.B} * o.T, 4 * int64_t{m.n_embd}, int64_t{m.n_embd}}})
      for (bool openblas : {true, false})
        probes.push_back(std::make_unique<SgemmProbe>(g, openblas, threads));
  }
  std::vector<std::unique_ptr<PolicyRun>> runs;
  for (ActivationPolicy p : o.policies) runs.push_back(std::make_unique<PolicyRun>(o, p));
  for (int round = 0; round < o.warmup + o.steps; ++round) {
    const bool timed = round >= o.warmup;
    for (auto& r : runs) r->step(timed);
    for (auto& p : probes) p->run(timed);
  }

  double peak_openblas = 0, peak_tide = 0;
  for (const auto& p : probes) {
    const double gflops = p->gemm().flops() / (p->best_ms() * 1e6);
    double& peak = std::string(p->impl()) == "openblas_threads" ? peak_openblas : peak_tide;
    peak = std::max(peak, gflops);
    std::printf(
        "{\"bench\":\"gpt_cpu\",\"kind\":\"sgemm\",\"impl\":\"%s\",\"shape\":\"%s\","
        "\"threads\":%d,\"ms\":%.3f,\"gflops\":%.1f}\n",
        p->impl(), p->gemm().shape().c_str(), threads, p->best_ms(), gflops);
  }

  const double tokens_per_step = static_cast<double>(o.B) * o.T;
  auto mfu = [](double gflops, double peak) { return peak > 0 ? gflops / peak : 0.0; };
  for (const auto& run : runs) {
    const PolicyRun& r = *run;
    const double step_ms = median(r.step_ms);
    const double step_ms_min = *std::min_element(r.step_ms.begin(), r.step_ms.end());
    const double tok_s = tokens_per_step / (step_ms * 1e-3);
    const double gflops = tok_s * flops_per_token * 1e-9;
    // From the fastest step: the best case, comparable with the best-of sgemm peak.
    const double gflops_best = tokens_per_step / (step_ms_min * 1e-3) * flops_per_token * 1e-9;
    std::printf(
        "{\"bench\":\"gpt_cpu\",\"kind\":\"train\",\"policy\":\"%s\",\"threads\":%d,"
        "\"step_ms\":%.1f,\"step_ms_min\":%.1f,\"forward_ms\":%.1f,\"backward_ms\":%.1f,"
        "\"optimizer_ms\":%.1f,\"tokens_per_s\":%.0f,\"gflops\":%.2f,\"gflops_best\":%.2f,"
        "\"mfu_openblas\":%.3f,\"mfu_tide_matmul\":%.3f,\"mfu_tide_matmul_best\":%.3f,"
        "\"loss_first\":%.4f,\"loss_last\":%.4f,\"activation_bytes\":%zu,"
        "\"workspace_bytes\":%zu}\n",
        activation_policy_name(r.policy()), threads, step_ms, step_ms_min, median(r.fwd_ms),
        median(r.bwd_ms), median(r.opt_ms), tok_s, gflops, gflops_best, mfu(gflops, peak_openblas),
        mfu(gflops, peak_tide), mfu(gflops_best, peak_tide), r.loss_first, r.loss_last,
        r.activation_peak(), r.workspace_peak());
  }
  return 0;
} catch (const tide::Error& e) {
  std::fprintf(stderr, "bench_gpt_cpu: error: %s\n", e.what());
  return 1;
}

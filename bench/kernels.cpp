// bench_kernels: time of every CPU op of the op API (tide/kernels/ops.h) on the shapes of one
// GPT-2 layer, plus the LM head and the loss.
//
// For each op it prints one JSON line:
//   op       the op (and which linear layer for matmuls: qkv C->3C, fc C->4C, head C->V)
//   shape    the main input's shape
//   ms       best time of --reps runs, in milliseconds
//   gflops   for matmuls and attention: useful flops / time (matmul 2*N*C*OC per product;
//            attention forward 2*B*NH*T*(T+1)/2*HS*2, i.e. the causal half of QK^T and AV)
// and, for the qkv shape, the same products through OpenBLAS's own threading instead of
// tide's fixed tiling (cpu/gemm.h), to show what reproducibility costs:
//   op = "sgemm_openblas_threads/<product>"
//
// With --dtype bf16 or f16 every float tensor but the statistics (layernorm's mean and rstd,
// the losses) is stored in that dtype (the ops compute in f32: ops.h), and each line says so.
//
// Usage: bench_kernels [--B 4] [--T 128] [--C 768] [--NH 12] [--V 50257] [--reps 5]
//                      [--threads N] [--dtype f32|bf16|f16]

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "tide/core/error.h"
#include "tide/core/rng.h"
#include "tide/kernels/cpu/openblas_core.h"
#include "tide/kernels/ops.h"

using namespace tide;

namespace {

int g_reps = 5, g_threads = 1;
DType g_dtype = DType::F32;  // storage of the float tensors (not the statistics)

double best_ms(const std::function<void()>& fn) {
  fn();  // warm-up: first touch, OpenBLAS buffers
  double best = 1e30;
  for (int r = 0; r < g_reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return best;
}

void report(const std::string& op, const Shape& shape, const std::function<void()>& fn,
            double flops = 0.0) {
  const double ms = best_ms(fn);
  std::printf(
      "{\"bench\":\"kernels\",\"op\":\"%s\",\"shape\":\"%s\",\"dtype\":\"%s\",\"threads\":%d,"
      "\"ms\":%.3f",
      op.c_str(), shape.str().c_str(), std::string(dtype_name(g_dtype)).c_str(), g_threads, ms);
  if (flops > 0) std::printf(",\"gflops\":%.1f", flops / (ms * 1e6));
  std::printf("}\n");
  std::fflush(stdout);
}

// n values N(0, scale^2), stored in g_dtype: a 16-bit dtype packs them into the vector's
// first half (zeros read the same in every dtype).
std::vector<float> randn(int64_t n, uint64_t seed, float scale = 1.0f) {
  std::vector<float> v(n);
  const PhiloxStream rng{seed, 1};
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) v[i] = scale * rng.normal(i);
  if (g_dtype == DType::F32) return v;
  std::vector<float> packed(n);
  auto* h = reinterpret_cast<uint16_t*>(packed.data());
  for (int64_t i = 0; i < n; ++i)
    h[i] = g_dtype == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
  return packed;
}

// A float tensor in g_dtype, and a statistic (always f32).
Tensor view(std::vector<float>& v, Shape s) {
  return Tensor(v.data(), s, g_dtype);
}
Tensor stat(std::vector<float>& v, Shape s) {
  return Tensor(v.data(), s, DType::F32);
}
Tensor view(std::vector<int32_t>& v, Shape s) {
  return Tensor(v.data(), s, DType::I32);
}

}  // namespace

int main(int argc, char** argv) try {
  // As tide does: the vector kernels where OpenBLAS fell back to its generic ones.
  cpu::reexec_with_vector_openblas_kernels(argv);
  int64_t B = 4, T = 128, C = 768, NH = 12, V = 50257;
  g_threads = omp_get_max_threads();
  CLI::App app{"time of every CPU op at GPT-2 layer shapes", "bench_kernels"};
  bench::add_op_shape_options(app, B, T, C, NH, V, g_reps);
  app.add_option("--threads", g_threads)->capture_default_str();
  std::string dtype = "f32";
  app.add_option("--dtype", dtype, "storage of the float tensors: f32, bf16 or f16")
      ->capture_default_str();
  bench::parse_args(app, argc, argv);
  g_dtype = parse_dtype(dtype);

  TIDE_CHECK(B > 0 && T > 0 && C > 0 && NH > 0 && V > 0 && g_reps > 0 && g_threads > 0,
             "bench_kernels: sizes, --reps and --threads must be positive");
  omp_set_num_threads(g_threads);
  const int64_t N = B * T;
  const OpContext ctx;

  // ---- embedding
  std::vector<int32_t> tokens(N);
  for (int64_t i = 0; i < N; ++i) tokens[i] = static_cast<int32_t>((i * 7919) % V);
  auto wte = randn(V * C, 1, 0.02f), wpe = randn(T * C, 2, 0.02f);
  auto x = randn(N * C, 3), dx = randn(N * C, 4), dwte = std::vector<float>(V * C),
       dwpe = std::vector<float>(T * C);
  report("embedding_forward", {B, T}, [&] {
    embedding_forward(ctx, view(x, {B, T, C}), view(tokens, {B, T}), view(wte, {V, C}),
                      view(wpe, {T, C}));
  });
  report("embedding_backward", {B, T}, [&] {
    embedding_backward(ctx, view(dwte, {V, C}), view(dwpe, {T, C}), view(dx, {B, T, C}),
                       view(tokens, {B, T}));
  });

  // ---- layernorm
  auto lw = randn(C, 5), lb = randn(C, 6);
  std::vector<float> ln(N * C), mean(N), rstd(N), dlw(C), dlb(C), dln(N * C);
  report("layernorm_forward", {B, T, C}, [&] {
    layernorm_forward(ctx, view(ln, {B, T, C}), stat(mean, {B, T}), stat(rstd, {B, T}),
                      view(x, {B, T, C}), view(lw, {C}), view(lb, {C}));
  });
  report("layernorm_backward_input", {B, T, C}, [&] {
    layernorm_backward_input(ctx, view(dln, {B, T, C}), view(dx, {B, T, C}), view(x, {B, T, C}),
                             view(lw, {C}), stat(mean, {B, T}), stat(rstd, {B, T}));
  });
  report("layernorm_backward_weight", {B, T, C}, [&] {
    layernorm_backward_weight(ctx, view(dlw, {C}), view(dlb, {C}), view(dx, {B, T, C}),
                              view(x, {B, T, C}), stat(mean, {B, T}), stat(rstd, {B, T}));
  });

  // ---- linear layers: qkv (C->3C), proj (C->C), fc (C->4C), head (C->V, no bias, tied to wte)
  struct Linear {
    const char* name;
    int64_t OC;
    bool bias;
  };
  for (const Linear& l : {Linear{"qkv", 3 * C, true}, Linear{"proj", C, true},
                          Linear{"fc", 4 * C, true}, Linear{"head", V, false}}) {
    const int64_t OC = l.OC;
    auto w = randn(OC * C, 7, 0.02f), b = randn(OC, 8), dout = randn(N * OC, 9, 0.01f);
    std::vector<float> out(N * OC), dw(OC * C), db(OC), din(N * C);
    const double flops = 2.0 * N * C * OC;
    const Tensor bias = l.bias ? view(b, {OC}) : Tensor{},
                 dbias = l.bias ? view(db, {OC}) : Tensor{};
    report(
        std::string("matmul_forward/") + l.name, {N, C},
        [&] {
          matmul_forward(ctx, view(out, {N, OC}), view(ln, {N, C}), view(w, {OC, C}), bias);
        },
        flops);
    report(
        std::string("matmul_backward_input/") + l.name, {N, OC},
        [&] {
          matmul_backward_input(ctx, view(din, {N, C}), view(dout, {N, OC}), view(w, {OC, C}));
        },
        flops);
    report(
        std::string("matmul_backward_weight/") + l.name, {N, OC},
        [&] {
          matmul_backward_weight(ctx, view(dw, {OC, C}), dbias, view(dout, {N, OC}),
                                 view(ln, {N, C}));
        },
        flops);
    if (std::string(l.name) == "qkv" && g_dtype == DType::F32) {
      // The same three products with OpenBLAS threading itself (not reproducible bitwise).
      const int n = static_cast<int>(N), c = static_cast<int>(C), oc = static_cast<int>(OC);
      auto raw = [&](const char* what, const std::function<void()>& fn) {
        report(
            std::string("sgemm_openblas_threads/") + what, {N, C},
            [&] {
              openblas_set_num_threads(g_threads);
              fn();
            },
            flops);
      };
      raw("forward", [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, oc, c, 1.0f, ln.data(), c, w.data(),
                    c, 0.0f, out.data(), oc);
      });
      raw("backward_input", [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, c, oc, 1.0f, dout.data(), oc,
                    w.data(), c, 1.0f, din.data(), c);
      });
      raw("backward_weight", [&] {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, oc, c, n, 1.0f, dout.data(), oc,
                    ln.data(), c, 1.0f, dw.data(), c);
      });
    }
  }

  // ---- attention
  {
    auto qkv = randn(N * 3 * C, 10), dout = randn(N * C, 11);
    std::vector<float> out(N * C), lse(B * NH * T), dqkv(N * 3 * C);
    const double flops = 2.0 * B * NH * (T * (T + 1) / 2.0) * (C / NH) * 2.0;
    for (float p : {0.0f, 0.1f}) {
      const DropoutSpec drop{p, 1, 2};
      const std::string tag = p > 0 ? "/dropout0.1" : "";
      report(
          "attention_forward" + tag, {B, T, 3 * C},
          [&] {
            attention_forward(ctx, view(out, {B, T, C}), stat(lse, {B, NH, T}),
                              view(qkv, {B, T, 3 * C}), NH, drop);
          },
          flops);
      report(
          "attention_backward" + tag, {B, T, 3 * C},
          [&] {
            attention_backward(ctx, view(dqkv, {B, T, 3 * C}), view(dout, {B, T, C}),
                               view(qkv, {B, T, 3 * C}), stat(lse, {B, NH, T}), NH, drop);
          },
          2 * flops);
    }
  }

  // ---- pointwise on the MLP's (N, 4C)
  {
    auto h = randn(N * 4 * C, 12), dh = randn(N * 4 * C, 13);
    std::vector<float> g(N * 4 * C), dg(N * 4 * C), r(N * 4 * C);
    const Shape s{N, 4 * C};
    const DropoutSpec drop{0.1f, 1, 3};
    report("gelu_forward", s, [&] { gelu_forward(ctx, view(g, s), view(h, s)); });
    report("gelu_backward", s, [&] { gelu_backward(ctx, view(dg, s), view(dh, s), view(h, s)); });
    report("residual_forward", s,
           [&] { residual_forward(ctx, view(r, s), view(g, s), view(h, s)); });
    report("residual_backward", s,
           [&] { residual_backward(ctx, view(r, s), view(dg, s), view(dh, s)); });
    report("dropout_forward", s, [&] { dropout_forward(ctx, view(r, s), view(h, s), drop); });
    report("dropout_backward", s, [&] { dropout_backward(ctx, view(dg, s), view(dh, s), drop); });
  }

  // ---- loss over (N, V)
  {
    auto logits = randn(N * V, 14);
    std::vector<float> losses(N), dlogits(N * V);
    std::vector<int32_t> targets(N);
    for (int64_t i = 0; i < N; ++i) targets[i] = static_cast<int32_t>((i * 104729) % V);
    report("crossentropy_forward", {N, V}, [&] {
      crossentropy_forward(ctx, stat(losses, {N}), view(logits, {N, V}), view(targets, {N}));
    });
    report("crossentropy_backward", {N, V}, [&] {
      crossentropy_backward(ctx, view(dlogits, {N, V}), view(logits, {N, V}), view(targets, {N}),
                            1.0f / N);
    });
    // The fused classifier a training step runs instead of the two.
    report("crossentropy_forward_backward", {N, V}, [&] {
      crossentropy_forward_backward(ctx, stat(losses, {N}), view(dlogits, {N, V}),
                                    view(logits, {N, V}), view(targets, {N}), 1.0f / N);
    });
  }
  return 0;
} catch (const tide::Error& e) {
  std::fprintf(stderr, "bench_kernels: error: %s\n", e.what());
  return 1;
}

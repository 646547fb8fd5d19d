#include "op_cases.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "tide/core/rng.h"
#include "tide/kernels/rope_freq.h"

namespace tide::testing {

HostTensor randn(const std::string& name, Shape shape, uint64_t seed, float scale) {
  HostTensor t{name, shape, DType::F32, std::vector<float>(shape.numel()), {}, {}};
  const PhiloxStream rng{seed, 11};
  for (int64_t i = 0; i < shape.numel(); ++i) t.f[i] = scale * rng.normal(i);
  return t;
}

HostTensor zeros(const std::string& name, Shape shape) {
  return HostTensor{name, shape, DType::F32, std::vector<float>(shape.numel(), 0.0f), {}, {}};
}

HostTensor ids(const std::string& name, Shape shape, int32_t hi, uint64_t seed, int ignore_every) {
  HostTensor t{name, shape, DType::I32, {}, std::vector<int32_t>(shape.numel()), {}};
  const PhiloxStream rng{seed, 13};
  for (int64_t i = 0; i < shape.numel(); ++i) {
    t.ids[i] = static_cast<int32_t>(rng.uint(i) % static_cast<uint32_t>(hi));
    if (ignore_every > 0 && i % ignore_every == ignore_every - 1) t.ids[i] = -1;
  }
  return t;
}

HostTensor narrowed(const HostTensor& t, DType dtype) {
  HostTensor n{t.name, t.shape, dtype, {}, {}, std::vector<uint16_t>(t.f.size())};
  for (size_t i = 0; i < t.f.size(); ++i)
    n.h[i] = dtype == DType::BF16 ? f32_to_bf16(t.f[i]) : f32_to_f16(t.f[i]);
  return n;
}

HostTensor widened(const HostTensor& t) {
  HostTensor w{t.name, t.shape, DType::F32, std::vector<float>(t.h.size()), {}, {}};
  for (size_t i = 0; i < t.h.size(); ++i)
    w.f[i] = t.dtype == DType::BF16 ? bf16_to_f32(t.h[i]) : f16_to_f32(t.h[i]);
  return w;
}

std::vector<Tensor> host_views(std::vector<HostTensor>& ts) {
  std::vector<Tensor> v;
  for (auto& t : ts) v.emplace_back(t.data(), t.shape, t.dtype, Device::cpu());
  return v;
}

void expect_close(const std::string& what, const HostTensor& got, const HostTensor& cpu,
                  double tol) {
  if (cpu.dtype == DType::I32) {
    EXPECT_EQ(got.ids, cpu.ids) << what;
    return;
  }
  double sq = 0.0;
  for (float x : cpu.f) sq += static_cast<double>(x) * x;
  const double rms = cpu.f.empty() ? 0.0 : std::sqrt(sq / cpu.f.size());
  int64_t worst = -1, n_bad = 0;
  double worst_ratio = 0.0;
  for (size_t i = 0; i < cpu.f.size(); ++i) {
    const double ref = cpu.f[i], value = got.f[i];
    const double err = std::fabs(value - ref);
    const double allowed = tol * (std::fabs(ref) + rms);
    const bool bad = tol == 0.0 ? std::memcmp(&cpu.f[i], &got.f[i], sizeof(float)) != 0
                                : !(err <= allowed);  // NaN is bad
    if (bad) {
      ++n_bad;
      const double ratio = allowed > 0 ? err / allowed : INFINITY;
      if (worst < 0 || ratio > worst_ratio || std::isnan(ratio)) worst = i, worst_ratio = ratio;
    }
  }
  EXPECT_EQ(n_bad, 0) << what << ": " << n_bad << " of " << cpu.f.size()
                      << " elements differ from the CPU beyond tol " << tol << " (rms " << rms
                      << "); worst at " << worst << ": got " << (worst >= 0 ? got.f[worst] : 0.0f)
                      << " cpu " << (worst >= 0 ? cpu.f[worst] : 0.0f);
}

void expect_bitwise(const std::string& what, const HostTensor& a, const HostTensor& b) {
  const bool same = a.dtype == b.dtype && a.bytes() == b.bytes() &&
                    std::memcmp(a.data(), b.data(), a.bytes()) == 0;
  EXPECT_TRUE(same) << what << ": two runs of the same op on the same inputs differ";
}

// ---- the cases ---------------------------------------------------------------------------

std::vector<OpCase> embedding_cases() {
  std::vector<OpCase> cases;
  // V small against B*T, so tokens repeat and the backward's scatter-add collides.
  for (auto [B, T, C, V] : {std::array<int, 4>{3, 17, 40, 50}, {2, 64, 96, 1000}}) {
    const std::string dims = fmt::format("B={} T={} C={} V={}", B, T, C, V);
    cases.push_back({"embedding_forward " + dims,
                     {zeros("out", {B, T, C}), ids("tokens", {B, T}, V, 1), randn("wte", {V, C}, 2),
                      randn("wpe", {T + 3, C}, 3)},
                     [](const OpContext& ctx, const std::vector<Tensor>& t) {
                       embedding_forward(ctx, t[0], t[1], t[2], t[3]);
                     },
                     0.0});
    cases.push_back({"embedding_backward " + dims,
                     {randn("dwte", {V, C}, 4), randn("dwpe", {T + 3, C}, 5),
                      randn("dout", {B, T, C}, 6), ids("tokens", {B, T}, V, 7)},
                     [](const OpContext& ctx, const std::vector<Tensor>& t) {
                       embedding_backward(ctx, t[0], t[1], t[2], t[3]);
                     },
                     0.0});
  }
  return cases;
}

std::vector<OpCase> layernorm_cases() {
  std::vector<OpCase> cases;
  // N above one 64-row chunk of the weight gradient; C odd, and C = GPT-2's 768.
  for (auto [N, C] : {std::array<int64_t, 2>{130, 67}, {4, 768}, {1, 5}}) {
    const std::string dims = fmt::format("N={} C={}", N, C);
    // Statistics from the CPU forward, so that both backward runs see the same mean/rstd.
    HostTensor inp = randn("inp", {N, C}, 10, 2.0f);
    for (auto& x : inp.f) x += 0.5f;  // a non-zero mean
    HostTensor weight = randn("weight", {C}, 11), bias = randn("bias", {C}, 12);
    HostTensor out = zeros("out", {N, C}), mean = zeros("mean", {N}), rstd = zeros("rstd", {N});
    layernorm_forward(OpContext{}, Tensor(out.f.data(), out.shape), Tensor(mean.f.data(), {N}),
                      Tensor(rstd.f.data(), {N}), Tensor(inp.f.data(), inp.shape),
                      Tensor(weight.f.data(), {C}), Tensor(bias.f.data(), {C}));
    cases.push_back(
        {"layernorm_forward " + dims,
         {zeros("out", {N, C}), zeros("mean", {N}), zeros("rstd", {N}), inp, weight, bias},
         [](const OpContext& ctx, const std::vector<Tensor>& t) {
           layernorm_forward(ctx, t[0], t[1], t[2], t[3], t[4], t[5]);
         },
         kTol});
    cases.push_back({"residual_layernorm_forward " + dims,
                     {zeros("res", {N, C}), zeros("out", {N, C}), zeros("mean", {N}),
                      zeros("rstd", {N}), inp, randn("b", {N, C}, 18), weight, bias},
                     [](const OpContext& ctx, const std::vector<Tensor>& t) {
                       residual_layernorm_forward(ctx, t[0], t[1], t[2], t[3], t[4], t[5], t[6],
                                                  t[7]);
                     },
                     kTol});
    cases.push_back(
        {"layernorm_backward_input " + dims,
         {randn("dinp", {N, C}, 13), randn("dout", {N, C}, 14), inp, weight, mean, rstd},
         [](const OpContext& ctx, const std::vector<Tensor>& t) {
           layernorm_backward_input(ctx, t[0], t[1], t[2], t[3], t[4], t[5]);
         },
         kTol});
    cases.push_back({"layernorm_backward_weight " + dims,
                     {randn("dweight", {C}, 15), randn("dbias", {C}, 16), randn("dout", {N, C}, 17),
                      inp, mean, rstd},
                     [](const OpContext& ctx, const std::vector<Tensor>& t) {
                       layernorm_backward_weight(ctx, t[0], t[1], t[2], t[3], t[4], t[5]);
                     },
                     kTol});
  }
  return cases;
}

std::vector<OpCase> rmsnorm_cases() {
  std::vector<OpCase> cases;
  // N above one 64-row chunk of the weight gradient; C odd, and C = Llama 3.2 1B's 2048.
  for (auto [N, C] : {std::array<int64_t, 2>{130, 67}, {3, 2048}, {1, 5}}) {
    const std::string dims = fmt::format("N={} C={}", N, C);
    const float eps = 1e-5f;
    // rstd from the CPU forward, so that both backward runs see the same statistics.
    HostTensor inp = randn("inp", {N, C}, 90, 2.0f);
    HostTensor weight = randn("weight", {C}, 91), out = zeros("out", {N, C}),
               rstd = zeros("rstd", {N});
    rmsnorm_forward(OpContext{}, Tensor(out.f.data(), out.shape), Tensor(rstd.f.data(), {N}),
                    Tensor(inp.f.data(), inp.shape), Tensor(weight.f.data(), {C}), eps);
    cases.push_back({"rmsnorm_forward " + dims,
                     {zeros("out", {N, C}), zeros("rstd", {N}), inp, weight},
                     [eps](const OpContext& ctx, const std::vector<Tensor>& t) {
                       rmsnorm_forward(ctx, t[0], t[1], t[2], t[3], eps);
                     },
                     kTol});
    cases.push_back({"rmsnorm_backward_input " + dims,
                     {randn("dinp", {N, C}, 92), randn("dout", {N, C}, 93), inp, weight, rstd},
                     [](const OpContext& ctx, const std::vector<Tensor>& t) {
                       rmsnorm_backward_input(ctx, t[0], t[1], t[2], t[3], t[4]);
                     },
                     kTol});
    cases.push_back({"rmsnorm_backward_weight " + dims,
                     {randn("dweight", {C}, 94), randn("dout", {N, C}, 95), inp, rstd},
                     [](const OpContext& ctx, const std::vector<Tensor>& t) {
                       rmsnorm_backward_weight(ctx, t[0], t[1], t[2], t[3]);
                     },
                     kTol});
  }
  return cases;
}

std::vector<OpCase> matmul_cases() {
  std::vector<OpCase> cases;
  // Odd sizes, N above one 64-row chunk of the bias gradient, and a (B,T,C) input.
  for (auto [N, C, OC] : {std::array<int64_t, 3>{70, 33, 65}, {128, 64, 192}, {1, 7, 3}}) {
    const std::string dims = fmt::format("N={} C={} OC={}", N, C, OC);
    for (bool with_bias : {true, false}) {
      const std::string b = with_bias ? " bias" : " no-bias";
      cases.push_back({"matmul_forward " + dims + b,
                       {zeros("out", {N, OC}), randn("inp", {N, C}, 20),
                        randn("weight", {OC, C}, 21), randn("bias", {OC}, 22)},
                       [with_bias](const OpContext& ctx, const std::vector<Tensor>& t) {
                         matmul_forward(ctx, t[0], t[1], t[2], with_bias ? t[3] : Tensor());
                       },
                       kGemmTol});
      cases.push_back({"matmul_backward_weight " + dims + b,
                       {randn("dweight", {OC, C}, 23), randn("dbias", {OC}, 24),
                        randn("dout", {N, OC}, 25), randn("inp", {N, C}, 26)},
                       [with_bias](const OpContext& ctx, const std::vector<Tensor>& t) {
                         matmul_backward_weight(ctx, t[0], with_bias ? t[1] : Tensor(), t[2], t[3]);
                       },
                       kGemmTol});
    }
    cases.push_back(
        {"matmul_backward_input " + dims,
         {randn("dinp", {N, C}, 27), randn("dout", {N, OC}, 28), randn("weight", {OC, C}, 29)},
         [](const OpContext& ctx, const std::vector<Tensor>& t) {
           matmul_backward_input(ctx, t[0], t[1], t[2]);
         },
         kGemmTol});
  }
  cases.push_back({"matmul_forward (B,T,C) input",
                   {zeros("out", {2, 5, 24}), randn("inp", {2, 5, 16}, 30),
                    randn("weight", {24, 16}, 31), randn("bias", {24}, 32)},
                   [](const OpContext& ctx, const std::vector<Tensor>& t) {
                     matmul_forward(ctx, t[0], t[1], t[2], t[3]);
                   },
                   kGemmTol});
  return cases;
}

std::vector<OpCase> attention_cases() {
  std::vector<OpCase> cases;
  // Multi-head (NKV = NH, qkv (B,T,3C), through the n_head-only overload) and grouped-query
  // shapes (2 query heads per kv head, and one kv head for 8 query heads).
  for (auto [B, T, C, NH, NKV] : {std::array<int64_t, 5>{2, 37, 48, 4, 4},
                                  {1, 64, 64, 2, 2},
                                  {1, 1, 8, 1, 1},
                                  {2, 37, 48, 4, 2},
                                  {1, 33, 64, 8, 1},
                                  {1, 1, 8, 2, 1}}) {
    for (auto [p, sharded] : {std::pair{0.0f, false}, {0.2f, false}, {0.2f, true}}) {
      // Sharded: sequences 2.., positions 3.. of T+5, heads 1.. of NH+3 (global coordinates).
      const DropoutSpec dropout =
          sharded ? DropoutSpec{p, 1234, 99, 2, 3, T + 5, NH + 3, 1} : DropoutSpec{p, 1234, 99};
      const bool grouped = NKV != NH;
      const std::string dims =
          fmt::format("B={} T={} C={} NH={}{} p={}{}", B, T, C, NH,
                      grouped ? fmt::format(" NKV={}", NKV) : "", p, sharded ? " sharded" : "");
      const int nh = static_cast<int>(NH), nkv = static_cast<int>(NKV);
      const int64_t W = C + 2 * NKV * (C / NH);  // 3C without grouping
      HostTensor qkv = randn("qkv", {B, T, W}, 40);
      // lse from the CPU forward, so that both backward runs start from the same one.
      HostTensor out = zeros("out", {B, T, C}), lse = zeros("lse", {B, NH, T});
      attention_forward(OpContext{}, Tensor(out.f.data(), out.shape),
                        Tensor(lse.f.data(), lse.shape), Tensor(qkv.f.data(), qkv.shape), nh, nkv,
                        dropout);
      cases.push_back(
          {"attention_forward " + dims,
           {zeros("out", {B, T, C}), zeros("lse", {B, NH, T}), qkv},
           [nh, nkv, grouped, dropout](const OpContext& ctx, const std::vector<Tensor>& t) {
             if (grouped)
               attention_forward(ctx, t[0], t[1], t[2], nh, nkv, dropout);
             else
               attention_forward(ctx, t[0], t[1], t[2], nh, dropout);
           },
           kGemmTol});
      cases.push_back(
          {"attention_backward " + dims,
           {randn("dqkv", {B, T, W}, 41), randn("dout", {B, T, C}, 42), qkv, lse},
           [nh, nkv, grouped, dropout](const OpContext& ctx, const std::vector<Tensor>& t) {
             if (grouped)
               attention_backward(ctx, t[0], t[1], t[2], t[3], nh, nkv, dropout);
             else
               attention_backward(ctx, t[0], t[1], t[2], t[3], nh, dropout);
           },
           kGemmTol});
    }
  }
  return cases;
}

std::vector<OpCase> rope_cases() {
  std::vector<OpCase> cases;
  // Grouped (n_kv_head < n_head) and multi-head layouts, llama3-scaled and plain frequencies,
  // and a long sequence (angles of hundreds of radians).
  struct Shape5 {
    int64_t B, T, NH, NKV, HS;
    bool llama3;
  };
  for (const Shape5& s : {Shape5{1, 1, 1, 1, 2, false}, Shape5{2, 37, 4, 2, 16, true},
                          Shape5{1, 8, 2, 2, 64, false}, Shape5{1, 300, 2, 1, 8, true}}) {
    const std::string dims = fmt::format("B={} T={} NH={} NKV={} HS={}{}", s.B, s.T, s.NH, s.NKV,
                                         s.HS, s.llama3 ? " llama3" : "");
    RopeSpec spec;
    spec.head_size = static_cast<int>(s.HS);
    if (s.llama3) spec = RopeSpec{static_cast<int>(s.HS), 500000.0, RopeScaling::llama3};
    HostTensor inv_freq = zeros("inv_freq", {s.HS / 2});
    inv_freq.f = rope_inv_freq(spec);
    const Shape qkv{s.B, s.T, (s.NH + 2 * s.NKV) * s.HS};
    const int nh = static_cast<int>(s.NH), nkv = static_cast<int>(s.NKV);
    cases.push_back({"rope_forward " + dims,
                     {zeros("out", qkv), randn("inp", qkv, 85), inv_freq},
                     [nh, nkv](const OpContext& ctx, const std::vector<Tensor>& t) {
                       rope_forward(ctx, t[0], t[1], t[2], nh, nkv);
                     },
                     kTol});
    cases.push_back({"rope_forward in place " + dims,
                     {randn("qkv", qkv, 86), inv_freq},
                     [nh, nkv](const OpContext& ctx, const std::vector<Tensor>& t) {
                       rope_forward(ctx, t[0], t[0], t[1], nh, nkv);
                     },
                     kTol});
    cases.push_back({"rope_backward " + dims,
                     {randn("dinp", qkv, 87), randn("dout", qkv, 88), inv_freq},
                     [nh, nkv](const OpContext& ctx, const std::vector<Tensor>& t) {
                       rope_backward(ctx, t[0], t[1], t[2], nh, nkv);
                     },
                     kTol});
  }
  return cases;
}

std::vector<OpCase> pointwise_cases() {
  std::vector<OpCase> cases;
  for (int64_t n : {1, 1001, 4096}) {
    const std::string dims = fmt::format("n={}", n);
    cases.push_back(
        {"gelu_forward " + dims,
         {zeros("out", {n}), randn("inp", {n}, 50, 3.0f)},
         [](const OpContext& ctx, const std::vector<Tensor>& t) { gelu_forward(ctx, t[0], t[1]); },
         kTol});
    cases.push_back({"gelu_backward " + dims,
                     {randn("dinp", {n}, 51), randn("dout", {n}, 52), randn("inp", {n}, 53, 3.0f)},
                     [](const OpContext& ctx, const std::vector<Tensor>& t) {
                       gelu_backward(ctx, t[0], t[1], t[2]);
                     },
                     kTol});
    cases.push_back({"residual_forward " + dims,
                     {zeros("out", {n}), randn("a", {n}, 54), randn("b", {n}, 55)},
                     [](const OpContext& ctx, const std::vector<Tensor>& t) {
                       residual_forward(ctx, t[0], t[1], t[2]);
                     },
                     0.0});
    cases.push_back({"residual_backward " + dims,
                     {randn("da", {n}, 56), randn("db", {n}, 57), randn("dout", {n}, 58)},
                     [](const OpContext& ctx, const std::vector<Tensor>& t) {
                       residual_backward(ctx, t[0], t[1], t[2]);
                     },
                     0.0});
    // 3 ranks: a quotient that is rarely exact, so a multiply by 1/3 would differ.
    cases.push_back(
        {"divide_by " + dims,
         {randn("x", {n}, 67)},
         [](const OpContext& ctx, const std::vector<Tensor>& t) { divide_by(ctx, t[0], 3.0f); },
         0.0});
  }
  // SwiGLU: I not a multiple of 8, a (B,T,2I) input, and gates far enough out (scale 20) that
  // exp(-gate) overflows to inf and underflows to 0.
  for (auto [B, T, I, scale] :
       {std::array<int64_t, 4>{1, 1, 1, 3}, {1, 70, 13, 3}, {2, 5, 344, 3}, {1, 9, 40, 20}}) {
    const std::string dims = fmt::format("B={} T={} I={} scale={}", B, T, I, scale);
    const float s = static_cast<float>(scale);
    cases.push_back({"swiglu_forward " + dims,
                     {zeros("out", {B, T, I}), randn("inp", {B, T, 2 * I}, 63, s)},
                     [](const OpContext& ctx, const std::vector<Tensor>& t) {
                       swiglu_forward(ctx, t[0], t[1]);
                     },
                     kTol});
    cases.push_back({"swiglu_backward " + dims,
                     {randn("dinp", {B, T, 2 * I}, 64), randn("dout", {B, T, I}, 65),
                      randn("inp", {B, T, 2 * I}, 66, s)},
                     [](const OpContext& ctx, const std::vector<Tensor>& t) {
                       swiglu_backward(ctx, t[0], t[1], t[2]);
                     },
                     kTol});
  }
  // Dropout masks must be the CPU's bit for bit: the outputs are compared exactly. Shapes
  // (B,T,W) with rows not a multiple of 4 long, and specs with and without global coordinates
  // (rows then start at counters that are not multiples of 4).
  for (auto [B, T, W] : {std::array<int64_t, 3>{1, 1, 1}, {3, 7, 143}, {2, 16, 128}}) {
    for (float p : {0.0f, 0.1f, 0.5f}) {
      for (bool sharded : {false, true}) {
        const DropoutSpec d =
            sharded ? DropoutSpec{p, 77, 5, 3, 5, T + 9, W + 30, 13} : DropoutSpec{p, 77, 5};
        const Shape shape{B, T, W};
        const std::string name =
            fmt::format("B={} T={} W={} p={}{}", B, T, W, p, sharded ? " sharded" : "");
        cases.push_back({"dropout_forward " + name,
                         {zeros("out", shape), randn("inp", shape, 59)},
                         [d](const OpContext& ctx, const std::vector<Tensor>& t) {
                           dropout_forward(ctx, t[0], t[1], d);
                         },
                         0.0});
        cases.push_back({"dropout_forward in place " + name,
                         {randn("x", shape, 60)},
                         [d](const OpContext& ctx, const std::vector<Tensor>& t) {
                           dropout_forward(ctx, t[0], t[0], d);
                         },
                         0.0});
        cases.push_back({"dropout_backward " + name,
                         {randn("dinp", shape, 61), randn("dout", shape, 62)},
                         [d](const OpContext& ctx, const std::vector<Tensor>& t) {
                           dropout_backward(ctx, t[0], t[1], d);
                         },
                         0.0});
      }
    }
  }
  return cases;
}

std::vector<OpCase> crossentropy_cases() {
  std::vector<OpCase> cases;
  // GPT-2's vocabulary on a few rows, and many short rows with ignored targets.
  for (auto [N, V] : {std::array<int64_t, 2>{3, 50257}, {40, 100}, {1, 1}}) {
    const std::string dims = fmt::format("N={} V={}", N, V);
    const int32_t v = static_cast<int32_t>(V);
    cases.push_back(
        {"crossentropy_forward " + dims,
         {zeros("losses", {N}), randn("logits", {N, V}, 70, 4.0f), ids("targets", {N}, v, 71, 7)},
         [](const OpContext& ctx, const std::vector<Tensor>& t) {
           crossentropy_forward(ctx, t[0], t[1], t[2]);
         },
         kTol});
    cases.push_back({"crossentropy_backward " + dims,
                     {randn("dlogits", {N, V}, 72), randn("logits", {N, V}, 73, 4.0f),
                      ids("targets", {N}, v, 74, 7)},
                     [](const OpContext& ctx, const std::vector<Tensor>& t) {
                       crossentropy_backward(ctx, t[0], t[1], t[2], 0.125f);
                     },
                     kTol});
    cases.push_back({"crossentropy_backward in place " + dims,
                     {randn("logits", {N, V}, 75, 4.0f), ids("targets", {N}, v, 76, 7)},
                     [](const OpContext& ctx, const std::vector<Tensor>& t) {
                       crossentropy_backward(ctx, t[0], t[0], t[1], 0.125f);
                     },
                     kTol});
    cases.push_back({"crossentropy_forward_backward " + dims,
                     {zeros("losses", {N}), randn("dlogits", {N, V}, 77),
                      randn("logits", {N, V}, 78, 4.0f), ids("targets", {N}, v, 79, 7)},
                     [](const OpContext& ctx, const std::vector<Tensor>& t) {
                       crossentropy_forward_backward(ctx, t[0], t[1], t[2], t[3], 0.125f);
                     },
                     kTol});
    cases.push_back(
        {"crossentropy_forward_backward in place " + dims,
         {zeros("losses", {N}), randn("logits", {N, V}, 80, 4.0f), ids("targets", {N}, v, 81, 7)},
         [](const OpContext& ctx, const std::vector<Tensor>& t) {
           crossentropy_forward_backward(ctx, t[0], t[1], t[1], t[2], 0.125f);
         },
         kTol});
  }
  return cases;
}

std::vector<OpCase> all_op_cases() {
  std::vector<OpCase> all;
  for (auto&& cases : {embedding_cases(), layernorm_cases(), rmsnorm_cases(), matmul_cases(),
                       attention_cases(), rope_cases(), pointwise_cases(), crossentropy_cases()})
    all.insert(all.end(), cases.begin(), cases.end());
  return all;
}

OpCase in_dtype(const OpCase& c, DType dtype) {
  OpCase n = c;
  n.name += " " + std::string(dtype_name(dtype));
  for (HostTensor& t : n.tensors) {
    const bool statistic = t.name == "mean" || t.name == "rstd" || t.name == "losses" ||
                           t.name == "inv_freq" || t.name == "lse";
    if (t.dtype == DType::F32 && !statistic) t = narrowed(t, dtype);
  }
  return n;
}

std::vector<OpCase> mixed_dtype_cases(DType dtype) {
  // Per op, the sets of tensors 16-bit training keeps in f32.
  using Names = std::vector<std::string>;
  const std::vector<std::pair<std::string, std::vector<Names>>> mixes = {
      {"matmul_forward", {{"out"}}},
      {"matmul_backward_input", {{"dout"}}},
      {"matmul_backward_weight", {{"dweight", "dbias"}, {"dout"}, {"dout", "dweight", "dbias"}}},
      {"layernorm_backward_weight", {{"dweight", "dbias"}}},
      {"rmsnorm_backward_weight", {{"dweight"}}},
      {"embedding_backward", {{"dwte", "dwpe"}}},
  };
  std::vector<OpCase> cases;
  for (const OpCase& c : all_op_cases()) {
    const std::string op = c.name.substr(0, c.name.find(' '));
    for (const auto& [mixed_op, sets] : mixes) {
      if (op != mixed_op) continue;
      for (const Names& f32 : sets) {
        OpCase m = in_dtype(c, dtype);
        m.name += ", f32:";
        for (size_t i = 0; i < m.tensors.size(); ++i) {
          if (std::find(f32.begin(), f32.end(), m.tensors[i].name) == f32.end()) continue;
          m.tensors[i] = c.tensors[i];
          m.name += " " + c.tensors[i].name;
        }
        cases.push_back(std::move(m));
      }
    }
  }
  return cases;
}

}  // namespace tide::testing

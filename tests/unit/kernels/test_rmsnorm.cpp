// rmsnorm_forward/backward against a float64 reference written here (LlamaRMSNorm's formula).
#include <cmath>

#include "kernel_test_util.h"

using namespace tide;
using namespace tide::test;

namespace {
// C = 12: one full group of 8 lanes and a partial one.
struct RmsNormCase {
  static constexpr int B = 2, T = 5, C = 12;
  static constexpr float kEps = 1e-5f;
  std::vector<float> inp = randn(B * T * C, 61, 2.0f), weight = randn(C, 62, 0.5f),
                     R = randn(B * T * C, 63);
  std::vector<float> out = std::vector<float>(B * T * C), rstd = std::vector<float>(B * T);
  void forward() {
    rmsnorm_forward(cpu_ctx(), view(out, {B, T, C}), view(rstd, {B, T}), view(inp, {B, T, C}),
                    view(weight, {C}), kEps);
  }
};

// out = x / sqrt(mean(x^2) + eps) * w in double, row by row; rstd per row.
void rmsnorm_reference(const std::vector<double>& x, const std::vector<double>& w, int N, int C,
                       double eps, std::vector<double>& out, std::vector<double>& rstd) {
  out.assign(x.size(), 0.0);
  rstd.assign(N, 0.0);
  for (int n = 0; n < N; ++n) {
    double ms = 0;
    for (int c = 0; c < C; ++c) ms += x[n * C + c] * x[n * C + c];
    rstd[n] = 1.0 / std::sqrt(ms / C + eps);
    for (int c = 0; c < C; ++c) out[n * C + c] = x[n * C + c] * rstd[n] * w[c];
  }
}
}  // namespace

TEST(RmsNorm, ForwardMatchesFloat64Reference) {
  RmsNormCase k;
  const int N = k.B * k.T, C = k.C;
  std::fill(k.inp.begin() + 3 * C, k.inp.begin() + 4 * C, 0.0f);  // a zero row: rstd = eps^-1/2
  k.forward();
  std::vector<double> ref, ref_rstd;
  rmsnorm_reference(to_f64(k.inp), to_f64(k.weight), N, C, k.kEps, ref, ref_rstd);
  EXPECT_NEAR(ref_rstd[3], 1.0 / std::sqrt(static_cast<double>(k.kEps)), 1e-3);
  for (int n = 0; n < N; ++n) {
    EXPECT_NEAR(k.rstd[n], ref_rstd[n], 1e-6 * ref_rstd[n]) << "row " << n;
    for (int c = 0; c < C; ++c)
      EXPECT_NEAR(k.out[n * C + c], ref[n * C + c], 1e-6 * (1 + std::fabs(ref[n * C + c])))
          << "row " << n << " channel " << c;
  }
}

TEST(RmsNorm, BackwardMatchesFloat64FiniteDifferences) {
  RmsNormCase k;
  const int B = k.B, T = k.T, C = k.C, N = B * T;
  k.forward();
  std::vector<float> dinp(N * C), dweight(C);
  expect_accumulates("rmsnorm_backward_input",
                     [&] {
                       rmsnorm_backward_input(cpu_ctx(), view(dinp, {B, T, C}),
                                              view(k.R, {B, T, C}), view(k.inp, {B, T, C}),
                                              view(k.weight, {C}), view(k.rstd, {B, T}));
                     },
                     {&dinp});
  expect_accumulates("rmsnorm_backward_weight",
                     [&] {
                       rmsnorm_backward_weight(cpu_ctx(), view(dweight, {C}), view(k.R, {B, T, C}),
                                               view(k.inp, {B, T, C}), view(k.rstd, {B, T}));
                     },
                     {&dweight});
  std::vector<double> x = to_f64(k.inp), w = to_f64(k.weight), out, rstd;
  auto loss = [&] {
    rmsnorm_reference(x, w, N, C, k.kEps, out, rstd);
    double l = 0;
    for (size_t i = 0; i < out.size(); ++i) l += out[i] * k.R[i];
    return l;
  };
  check_gradient_f64("dinp", x, dinp, loss);
  check_gradient_f64("dweight", w, dweight, loss);
}

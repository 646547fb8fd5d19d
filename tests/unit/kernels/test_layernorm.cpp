#include "kernel_test_util.h"

using namespace tide;
using namespace tide::test;

namespace {
struct LayerNormCase {
  static constexpr int B = 2, T = 5, C = 8;
  std::vector<float> inp = randn(B * T * C, 11, 2.0f), weight = randn(C, 12, 0.5f),
                     bias = randn(C, 13), R = randn(B * T * C, 14);
  std::vector<float> out = std::vector<float>(B * T * C), mean = std::vector<float>(B * T),
                     rstd = std::vector<float>(B * T);
  double forward() {
    layernorm_forward(cpu_ctx(), view(out, {B, T, C}), view(mean, {B, T}), view(rstd, {B, T}),
                      view(inp, {B, T, C}), view(weight, {C}), view(bias, {C}));
    return dot(out, R);
  }
};
}  // namespace

TEST(LayerNorm, ForwardNormalisesRows) {
  LayerNormCase k;
  k.forward();
  for (int n = 0; n < k.B * k.T; ++n) {
    double m = 0, v = 0;
    for (int c = 0; c < k.C; ++c) m += k.inp[n * k.C + c];
    m /= k.C;
    for (int c = 0; c < k.C; ++c) v += (k.inp[n * k.C + c] - m) * (k.inp[n * k.C + c] - m);
    v /= k.C;
    EXPECT_NEAR(k.mean[n], m, 1e-6);
    EXPECT_NEAR(k.rstd[n], 1.0 / std::sqrt(v + 1e-5), 1e-5);
    for (int c = 0; c < k.C; ++c) {
      const double ref = (k.inp[n * k.C + c] - m) / std::sqrt(v + 1e-5) * k.weight[c] + k.bias[c];
      EXPECT_NEAR(k.out[n * k.C + c], ref, 1e-5);
    }
  }
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  LayerNormCase k;
  const int B = k.B, T = k.T, C = k.C;
  k.forward();
  std::vector<float> dinp(B * T * C), dweight(C), dbias(C);
  expect_accumulates("layernorm_backward_input",
                     [&] {
                       layernorm_backward_input(cpu_ctx(), view(dinp, {B, T, C}),
                                                view(k.R, {B, T, C}), view(k.inp, {B, T, C}),
                                                view(k.weight, {C}), view(k.mean, {B, T}),
                                                view(k.rstd, {B, T}));
                     },
                     {&dinp});
  expect_accumulates("layernorm_backward_weight",
                     [&] {
                       layernorm_backward_weight(cpu_ctx(), view(dweight, {C}), view(dbias, {C}),
                                                 view(k.R, {B, T, C}), view(k.inp, {B, T, C}),
                                                 view(k.mean, {B, T}), view(k.rstd, {B, T}));
                     },
                     {&dweight, &dbias});
  auto loss = [&] { return k.forward(); };
  check_gradient("dinp", k.inp, dinp, loss);
  check_gradient("dweight", k.weight, dweight, loss);
  check_gradient("dbias", k.bias, dbias, loss);
}

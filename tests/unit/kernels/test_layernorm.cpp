#include "kernel_test_util.h"
#include "op_cases.h"

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

// The fused residual + layernorm (the block's second layernorm) has the bits of residual_forward
// then layernorm_forward, in f32 and bf16 storage: the layernorm reads the residual as stored.
TEST(LayerNorm, ResidualLayernormHasTheBitsOfTheTwoOps) {
  using tide::testing::HostTensor;
  const int64_t N = 7, C = 67;
  for (DType dtype : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    auto in = [&](HostTensor t) {
      return dtype == DType::F32 ? t : tide::testing::narrowed(t, dtype);
    };
    HostTensor a = in(tide::testing::randn("a", {N, C}, 31, 2.0f));
    HostTensor b = in(tide::testing::randn("b", {N, C}, 32));
    HostTensor w = in(tide::testing::randn("w", {C}, 33)),
               bias = in(tide::testing::randn("bias", {C}, 34));
    auto tensor = [](HostTensor& t) { return Tensor(t.data(), t.shape, t.dtype); };
    HostTensor res = in(tide::testing::zeros("res", {N, C})), out = res;
    HostTensor mean = tide::testing::zeros("mean", {N}), rstd = mean;
    residual_forward(cpu_ctx(), tensor(res), tensor(a), tensor(b));
    layernorm_forward(cpu_ctx(), tensor(out), tensor(mean), tensor(rstd), tensor(res), tensor(w),
                      tensor(bias));
    HostTensor fres = in(tide::testing::zeros("res", {N, C})), fout = fres;
    HostTensor fmean = tide::testing::zeros("mean", {N}), frstd = fmean;
    residual_layernorm_forward(cpu_ctx(), tensor(fres), tensor(fout), tensor(fmean), tensor(frstd),
                               tensor(a), tensor(b), tensor(w), tensor(bias));
    for (auto [got, want] :
         {std::pair{&fres, &res}, {&fout, &out}, {&fmean, &mean}, {&frstd, &rstd}}) {
      EXPECT_EQ(got->f, want->f) << got->name;
      EXPECT_EQ(got->h, want->h) << got->name;
    }
  }
}

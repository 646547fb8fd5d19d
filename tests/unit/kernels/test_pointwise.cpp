#include <cmath>

#include "kernel_test_util.h"

using namespace tide;
using namespace tide::test;

TEST(Gelu, ForwardIsTheTanhApproximation) {
  std::vector<float> x = {-3.0f, -1.0f, 0.0f, 0.5f, 2.0f}, out(5);
  gelu_forward(cpu_ctx(), view(out, {5}), view(x, {5}));
  for (int i = 0; i < 5; ++i) {
    const double v = x[i];
    const double ref = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(out[i], ref, 1e-6);
  }
}

TEST(Gelu, BackwardMatchesFiniteDifferences) {
  const int B = 2, T = 5, C = 8;
  auto inp = randn(B * T * C, 31, 2.0f), R = randn(B * T * C, 32);
  std::vector<float> out(B * T * C), dinp(B * T * C);
  auto loss = [&] {
    gelu_forward(cpu_ctx(), view(out, {B, T, C}), view(inp, {B, T, C}));
    return dot(out, R);
  };
  expect_accumulates(
      "gelu_backward",
      [&] {
        gelu_backward(cpu_ctx(), view(dinp, {B, T, C}), view(R, {B, T, C}), view(inp, {B, T, C}));
      },
      {&dinp});
  check_gradient("dinp", inp, dinp, loss);
}

// ZeRO's mean over 3 ranks: a true division, rounded once into the dtype (x * (1/3) differs
// from x / 3 in the last bit for many x).
TEST(DivideBy, IsTheCorrectlyRoundedQuotientInEachDtype) {
  const int n = 1000;
  const std::vector<float> x = randn(n, 36);
  std::vector<float> f = x;
  divide_by(cpu_ctx(), view(f, {n}), 3.0f);
  std::vector<uint16_t> h(n);
  for (int i = 0; i < n; ++i) h[i] = f32_to_bf16(x[i]);
  divide_by(cpu_ctx(), Tensor(h.data(), {n}, DType::BF16), 3.0f);
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(f[i], x[i] / 3.0f) << i;
    ASSERT_EQ(h[i], f32_to_bf16(bf16_to_f32(f32_to_bf16(x[i])) / 3.0f)) << i;
  }
}

TEST(Residual, BackwardMatchesFiniteDifferences) {
  const int B = 2, T = 5, C = 8;
  auto a = randn(B * T * C, 33), b = randn(B * T * C, 34), R = randn(B * T * C, 35);
  std::vector<float> out(B * T * C), da(B * T * C), db(B * T * C);
  auto loss = [&] {
    residual_forward(cpu_ctx(), view(out, {B, T, C}), view(a, {B, T, C}), view(b, {B, T, C}));
    return dot(out, R);
  };
  expect_accumulates(
      "residual_backward",
      [&] {
        residual_backward(cpu_ctx(), view(da, {B, T, C}), view(db, {B, T, C}), view(R, {B, T, C}));
      },
      {&da, &db});
  check_gradient("da", a, da, loss);
  check_gradient("db", b, db, loss);
}

TEST(Dropout, BackwardMatchesFiniteDifferences) {
  const int B = 2, T = 5, C = 8;
  const DropoutSpec spec{0.25f, 7, rng_stream_id(4, 5)};
  auto inp = randn(B * T * C, 36), R = randn(B * T * C, 37);
  std::vector<float> out(B * T * C), dinp(B * T * C);
  auto loss = [&] {
    dropout_forward(cpu_ctx(), view(out, {B, T, C}), view(inp, {B, T, C}), spec);
    return dot(out, R);
  };
  expect_accumulates("dropout_backward",
                     [&] {
                       dropout_backward(cpu_ctx(), view(dinp, {B, T, C}), view(R, {B, T, C}), spec);
                     },
                     {&dinp});
  check_gradient("dinp", inp, dinp, loss);
}

TEST(Dropout, KeepRateScaleAndReproducibleMask) {
  const int n = 200003;  // one row of n columns: not a multiple of the block size or of 4
  const DropoutSpec spec{0.3f, 42, rng_stream_id(10, 0, 2)};
  std::vector<float> inp(n, 1.0f), out(n), again(n), in_place(n, 1.0f);
  dropout_forward(cpu_ctx(), view(out, {1, n}), view(inp, {1, n}), spec);
  dropout_forward(cpu_ctx(), view(again, {1, n}), view(inp, {1, n}), spec);
  dropout_forward(cpu_ctx(), view(in_place, {1, n}), view(in_place, {1, n}),
                  spec);  // out aliases inp
  EXPECT_EQ(out, again);
  EXPECT_EQ(out, in_place);

  const PhiloxStream rng{spec.seed, spec.stream};
  const float scale = 1.0f / (1.0f - spec.p);
  int kept = 0;
  for (int i = 0; i < n; ++i) {
    const bool keep = rng.uniform(i) >= spec.p;  // default coordinates: counter = flat index
    ASSERT_EQ(out[i], keep ? scale : 0.0f) << "element " << i;
    kept += keep;
  }
  EXPECT_NEAR(double(kept) / n, 1.0 - spec.p, 0.005);

  // The backward regenerates the same mask from the spec.
  std::vector<float> ones(n, 1.0f), dinp(n, 0.0f);
  dropout_backward(cpu_ctx(), view(dinp, {1, n}), view(ones, {1, n}), spec);
  EXPECT_EQ(dinp, out);

  // Another stream gives another mask; p = 0 is the identity.
  DropoutSpec other = spec;
  other.stream = rng_stream_id(10, 0, 3);
  dropout_forward(cpu_ctx(), view(again, {1, n}), view(inp, {1, n}), other);
  EXPECT_NE(out, again);
  dropout_forward(cpu_ctx(), view(again, {1, n}), view(inp, {1, n}), DropoutSpec{});
  EXPECT_EQ(again, inp);
}

// swiglu_forward/backward against a float64 reference written here (silu(gate) * up).
#include <cmath>

#include "kernel_test_util.h"

using namespace tide;
using namespace tide::test;

namespace {
// I = 11: one full group of 8 lanes and a partial one.
constexpr int kSwB = 2, kSwT = 3, kSwI = 11;

// out(N,I) = g / (1 + exp(-g)) * u in double, gate and up the two halves of each row.
std::vector<double> swiglu_reference(const std::vector<double>& x, int N, int I) {
  std::vector<double> out(static_cast<size_t>(N) * I);
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < I; ++i) {
      const double g = x[n * 2 * I + i], u = x[n * 2 * I + I + i];
      out[n * I + i] = g / (1.0 + std::exp(-g)) * u;
    }
  return out;
}
}  // namespace

TEST(SwiGlu, ForwardMatchesFloat64Reference) {
  const int N = kSwB * kSwT, I = kSwI;
  std::vector<float> inp = randn(N * 2 * I, 71, 3.0f), out(N * I);
  inp[0] = -120.0f;  // exp(-g) overflows: silu = -0
  inp[1] = 95.0f;    // exp(-g) underflows: silu = g
  swiglu_forward(cpu_ctx(), view(out, {kSwB, kSwT, I}), view(inp, {kSwB, kSwT, 2 * I}));
  const std::vector<double> ref = swiglu_reference(to_f64(inp), N, I);
  for (int i = 0; i < N * I; ++i)
    EXPECT_NEAR(out[i], ref[i], 1e-6 * (1 + std::fabs(ref[i]))) << "element " << i;
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_FLOAT_EQ(out[1], 95.0f * inp[I + 1]);
}

TEST(SwiGlu, BackwardMatchesFloat64FiniteDifferences) {
  const int N = kSwB * kSwT, I = kSwI;
  std::vector<float> inp = randn(N * 2 * I, 72, 3.0f), R = randn(N * I, 73), dinp(N * 2 * I);
  expect_accumulates("swiglu_backward",
                     [&] {
                       swiglu_backward(cpu_ctx(), view(dinp, {kSwB, kSwT, 2 * I}),
                                       view(R, {kSwB, kSwT, I}), view(inp, {kSwB, kSwT, 2 * I}));
                     },
                     {&dinp});
  std::vector<double> x = to_f64(inp);
  auto loss = [&] {
    const std::vector<double> out = swiglu_reference(x, N, I);
    double l = 0;
    for (size_t i = 0; i < out.size(); ++i) l += out[i] * R[i];
    return l;
  };
  check_gradient_f64("dinp", x, dinp, loss);
}

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "optim_test_util.h"
#include "tide/core/error.h"
#include "tide/optim/grad_norm.h"

using namespace tide;

TEST(GradNorm, MatchesNaiveDoubleSumOverManyBuffersAndDtypes) {
  const int64_t n1 = 100003, n2 = 7, n3 = 3 * kNormBlock + 1;
  test::State a(n1, 1), b(n2, 2), c(n3, 3);
  std::vector<uint16_t> b16(n2), c16(n3);
  double naive = 0;
  for (int64_t i = 0; i < n1; ++i) naive += double(a.grad[i]) * a.grad[i];
  for (int64_t i = 0; i < n2; ++i) {
    b16[i] = f32_to_bf16(b.grad[i]);
    naive += double(bf16_to_f32(b16[i])) * bf16_to_f32(b16[i]);
  }
  for (int64_t i = 0; i < n3; ++i) {
    c16[i] = f32_to_f16(c.grad[i]);
    naive += double(f16_to_f32(c16[i])) * f16_to_f32(c16[i]);
  }
  const GradBuffer bufs[] = {{a.grad.data(), DType::F32, n1},
                             {b16.data(), DType::BF16, n2},
                             {nullptr, DType::F32, 0},
                             {c16.data(), DType::F16, n3}};
  const double got = grad_norm_squared(bufs);
  EXPECT_NEAR(got, naive, 1e-12 * naive);
  EXPECT_NEAR(got, double(n1 + n2 + n3), 0.02 * double(n1 + n2 + n3));  // N(0,1): E[g^2] = 1
}

TEST(GradNorm, SameBitsForAnyThreadCount) {
  const int64_t n = 10 * kNormBlock + 123;
  test::State s(n, 4);
  const double one = grad_norm_squared(s.grad.data(), DType::F32, n, 1);
  for (int threads : {2, 3, 8})
    EXPECT_EQ(grad_norm_squared(s.grad.data(), DType::F32, n, threads), one);
}

TEST(GradNorm, ExactOnSmallHandValuesAndEmpty) {
  const float g[3] = {3.0f, -4.0f, 0.0f};
  EXPECT_EQ(grad_norm_squared(g, DType::F32, 3), 25.0);
  EXPECT_EQ(grad_norm_squared(g, DType::F32, 0), 0.0);
  EXPECT_EQ(grad_norm_squared(std::span<const GradBuffer>()), 0.0);
  // Finite f32 extremes square without overflow in double.
  const float big[2] = {std::numeric_limits<float>::max(), std::numeric_limits<float>::max()};
  EXPECT_TRUE(std::isfinite(grad_norm_squared(big, DType::F32, 2)));
}

TEST(GradNorm, NonFiniteGradientGivesNonFiniteNorm) {
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> g(50000, 1.0f);
    g[31337] = bad;
    EXPECT_FALSE(std::isfinite(grad_norm_squared(g.data(), DType::F32, 50000)));
    std::vector<uint16_t> h(100, 0x3c00);
    h[99] = f32_to_f16(bad);
    EXPECT_FALSE(std::isfinite(grad_norm_squared(h.data(), DType::F16, 100)));
  }
}

TEST(GradNorm, ClipCoefficientIsPyTorchs) {
  EXPECT_FLOAT_EQ(clip_coefficient(10.0, 1.0), float(1.0 / (10.0 + 1e-6)));
  EXPECT_EQ(clip_coefficient(0.5, 1.0), 1.0f);  // never scales up
  EXPECT_EQ(clip_coefficient(0.0, 1.0), 1.0f);
  EXPECT_THROW(clip_coefficient(1.0, 0.0), Error);
  EXPECT_THROW(clip_coefficient(std::numeric_limits<double>::infinity(), 1.0), Error);
}

TEST(GradNorm, RejectsUnsupportedDtype) {
  int32_t x[1] = {0};
  try {
    grad_norm_squared(x, DType::I32, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("i32"), std::string::npos) << e.what();
  }
}

// The vector exp of cpu/simd.h (used by softmax, cross-entropy and GELU) against double
// precision exp: its accuracy claim, its special values, that a lane's result does not depend
// on its neighbours (the kernels pad partial blocks and rely on it), and that the lane-by-lane
// fallback (this file is built without -march=native) gives the library's bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

// Without -march=native GCC notes that 32-byte vectors change the calling convention: fine
// here, the functions are inline and live in their own inline namespace (see simd.h).
#pragma GCC diagnostic ignored "-Wpsabi"
#include "tide/kernels/cpu/simd.h"

using namespace tide::cpu;

namespace {
float lib_exp(float x) {
  float y;
  exp_f32(&y, &x, 1);
  return y;
}

// A dense sweep of [-87.3, 88.7] (every 2^-9, plus small offsets).
std::vector<float> sweep() {
  std::vector<float> x;
  for (double x0 = -87.3; x0 < 88.7; x0 += 1.0 / 512)
    for (int i = 0; i < 3; ++i) x.push_back(static_cast<float>(x0 + i * 1e-4));
  return x;
}
}  // namespace

TEST(SimdExp, WithinTwoUlpOfDoubleExpOverTheNormalRange) {
  const std::vector<float> x = sweep();
  std::vector<float> y(x.size());
  exp_f32(y.data(), x.data(), static_cast<int64_t>(x.size()));
  double worst_ulps = 0, worst_x = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(want)) - 23);
    const double ulps = std::fabs(y[i] - want) / ulp;
    if (ulps > worst_ulps) worst_ulps = ulps, worst_x = x[i];
  }
  EXPECT_LT(worst_ulps, 2.0) << "at x = " << worst_x;
  EXPECT_EQ(lib_exp(0.0f), 1.0f);
}

TEST(SimdExp, OverflowUnderflowAndNaN) {
  EXPECT_EQ(lib_exp(89.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(lib_exp(INFINITY), std::numeric_limits<float>::infinity());
  EXPECT_EQ(lib_exp(-88.0f), 0.0f);  // below FLT_MIN: flushed
  EXPECT_EQ(lib_exp(-INFINITY), 0.0f);
  EXPECT_TRUE(std::isnan(lib_exp(NAN)));
  EXPECT_TRUE(std::isfinite(lib_exp(88.72f)));  // the largest finite input stays finite
  EXPECT_GT(lib_exp(88.72f), 3.0e38f);
}

TEST(SimdExp, LanesAreIndependentOfTheirNeighbours) {
  const float probe = 1.2345f;
  const float alone = lib_exp(probe);
  for (int lane = 0; lane < 8; ++lane) {
    float x[11];
    for (int i = 0; i < 11; ++i) x[i] = static_cast<float>(i * 7 - 20);
    x[lane] = probe;
    float y[11];
    exp_f32(y, x, 11);  // one full block of 8 and a padded tail of 3
    EXPECT_EQ(y[lane], alone) << "lane " << lane;
    EXPECT_EQ(y[8 + lane % 3], lib_exp(x[8 + lane % 3]));
  }
}

TEST(SimdExp, LaneByLaneFallbackGivesTheSameBits) {
  const std::vector<float> x = sweep();
  std::vector<float> lib(x.size());
  exp_f32(lib.data(), x.data(), static_cast<int64_t>(x.size()));
  size_t differ = 0;
  for (size_t i = 0; i + 8 <= x.size(); i += 8) {
    const v8f here = exp8(load8(x.data() + i));  // this file's build of exp8
    differ += std::memcmp(&here, lib.data() + i, sizeof here) != 0;
  }
  EXPECT_EQ(differ, 0u);
}

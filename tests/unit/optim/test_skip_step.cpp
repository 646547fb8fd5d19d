// The whole fp16 overflow path as the trainer runs it: gradient norm (also the overflow
// check) -> loss scaler -> AdamW with grad_scale = 1/S * clip, or a skipped step.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "optim_test_util.h"
#include "tide/optim/adamw_cpu.h"
#include "tide/optim/grad_norm.h"
#include "tide/optim/loss_scaler.h"

using namespace tide;

TEST(SkipStep, OverflowSkipsTheUpdateAndBacksOffThenTheNextStepApplies) {
  const int64_t n = 4096;
  test::State st(n, 21), before(n, 21);
  Fp16LossScale one_overflow;  // hysteresis 1: the first overflow halves the scale
  one_overflow.hysteresis = 1;
  DynamicLossScaler scaler(one_overflow);
  const AdamWHyper h{1e-3, 0.9, 0.95, 1e-8, 0.1};
  // fp16 gradients of a loss scaled by S = 65536; one of them overflowed to +inf.
  std::vector<uint16_t> g16(n);
  for (int64_t i = 0; i < n; ++i)
    g16[i] = f32_to_f16(st.grad[i] * 1e-3f * static_cast<float>(scaler.scale()));
  g16[100] = f32_to_f16(std::numeric_limits<float>::infinity());
  const AdamWChunk c{st.master.data(), g16.data(), DType::F16,  st.m.data(),
                     st.v.data(),      nullptr,    DType::BF16, n};
  AdamWCpuOptions caller;
  caller.check = FiniteCheck::kCheckedByCaller;

  int64_t t = 0;  // applied steps
  auto step = [&]() {
    const double sq = grad_norm_squared(g16.data(), DType::F16, n);
    if (!scaler.update(!std::isfinite(sq))) return false;
    const float clip = clip_coefficient(std::sqrt(sq) / static_cast<float>(scaler.scale()), 1.0);
    return adamw_cpu(c, h, AdamWStep{++t, static_cast<float>(1.0 / scaler.scale()) * clip}, caller);
  };

  EXPECT_FALSE(step());
  EXPECT_EQ(scaler.scale(), 32768.0);
  EXPECT_EQ(t, 0);
  EXPECT_TRUE(test::same_bits(st.master.data(), before.master.data(), n));
  EXPECT_TRUE(test::same_bits(st.m.data(), before.m.data(), n));
  EXPECT_TRUE(test::same_bits(st.v.data(), before.v.data(), n));

  // The retry at the smaller scale has finite gradients: the step is applied as step t = 1.
  for (int64_t i = 0; i < n; ++i)
    g16[i] = f32_to_f16(st.grad[i] * 1e-3f * static_cast<float>(scaler.scale()));
  EXPECT_TRUE(step());
  EXPECT_EQ(t, 1);
  EXPECT_FALSE(test::same_bits(st.master.data(), before.master.data(), n));
  // Unscaled, the gradient norm is ~ 1e-3 * sqrt(n) = 0.064 < max_norm, so clip = 1 and
  // grad_scale = 2^-15 exactly: the result is bitwise the reference on the unscaled gradients.
  std::vector<float> g(n);
  for (int64_t i = 0; i < n; ++i) g[i] = f16_to_f32(g16[i]) / static_cast<float>(scaler.scale());
  adamw_reference(before.master.data(), g.data(), before.m.data(), before.v.data(), n, h, {1});
  EXPECT_TRUE(test::same_bits(st.master.data(), before.master.data(), n));
  EXPECT_TRUE(test::same_bits(st.v.data(), before.v.data(), n));
}

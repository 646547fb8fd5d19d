#include "kernel_test_util.h"

using namespace tide;
using namespace tide::test;

namespace {
struct AttentionCase {
  static constexpr int B = 2, T = 5, C = 8, NH = 2;
  DropoutSpec dropout;
  std::vector<float> qkv = randn(B * T * 3 * C, 21), R = randn(B * T * C, 22);
  std::vector<float> out = std::vector<float>(B * T * C),
                     preatt = std::vector<float>(B * NH * T * T),
                     att = std::vector<float>(B * NH * T * T);
  double forward() {
    attention_forward(cpu_ctx(), view(out, {B, T, C}), view(preatt, {B, NH, T, T}),
                      view(att, {B, NH, T, T}), view(qkv, {B, T, 3 * C}), NH, dropout);
    return dot(out, R);
  }
  void check_backward() {
    forward();
    std::vector<float> dqkv(B * T * 3 * C);
    expect_accumulates("attention_backward",
                       [&] {
                         attention_backward(cpu_ctx(), view(dqkv, {B, T, 3 * C}),
                                            view(R, {B, T, C}), view(qkv, {B, T, 3 * C}),
                                            view(preatt, {B, NH, T, T}), view(att, {B, NH, T, T}),
                                            NH, dropout);
                       },
                       {&dqkv});
    check_gradient("dqkv", qkv, dqkv, [&] { return forward(); });
  }
};
}  // namespace

TEST(Attention, ProbabilitiesAreCausalSoftmax) {
  AttentionCase k;
  k.forward();
  EXPECT_EQ(k.att, k.preatt);  // no dropout: att is the probabilities
  const int T = k.T;
  for (int row = 0; row < k.B * k.NH * T; ++row) {
    const int t = row % T;
    double sum = 0;
    for (int t2 = 0; t2 < T; ++t2) {
      const float p = k.preatt[row * T + t2];
      if (t2 > t) EXPECT_EQ(p, 0.0f) << "future position " << t2 << " seen from " << t;
      sum += p;
    }
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
  // The first position attends only to itself: out = v_0 of its head.
  for (int i = 0; i < k.C; ++i) EXPECT_NEAR(k.out[i], k.qkv[2 * k.C + i], 1e-6);
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  AttentionCase k;
  k.check_backward();
}

TEST(Attention, BackwardWithDropoutMatchesFiniteDifferences) {
  AttentionCase k;
  k.dropout = DropoutSpec{0.3f, 1234, rng_stream_id(1, 2, 3)};
  k.check_backward();
}

TEST(Attention, DropoutMaskFollowsTheSpecRule) {
  AttentionCase k;
  k.dropout = DropoutSpec{0.4f, 99, 5};
  k.forward();
  const PhiloxStream rng{k.dropout.seed, k.dropout.stream};
  const float scale = 1.0f / (1.0f - k.dropout.p);
  int kept = 0, total = 0;
  for (size_t i = 0; i < k.att.size(); ++i) {
    const int t = (i / k.T) % k.T, t2 = i % k.T;
    if (t2 > t) {
      EXPECT_EQ(k.att[i], 0.0f);
      continue;
    }
    const bool keep = rng.uniform(i) >= k.dropout.p;  // i: flat index into (B,NH,T,T)
    EXPECT_EQ(k.att[i], keep ? k.preatt[i] * scale : 0.0f) << "element " << i;
    kept += keep;
    ++total;
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, total);
}

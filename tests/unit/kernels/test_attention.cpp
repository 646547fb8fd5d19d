#include "kernel_test_util.h"

using namespace tide;
using namespace tide::test;

namespace {
struct AttentionCase {
  static constexpr int B = 2, T = 5, C = 8, NH = 2;
  DropoutSpec dropout;
  std::vector<float> qkv = randn(B * T * 3 * C, 21), R = randn(B * T * C, 22);
  std::vector<float> out = std::vector<float>(B * T * C), lse = std::vector<float>(B * NH * T);
  double forward() {
    attention_forward(cpu_ctx(), view(out, {B, T, C}), view(lse, {B, NH, T}),
                      view(qkv, {B, T, 3 * C}), NH, dropout);
    return dot(out, R);
  }
  void check_backward() {
    forward();
    std::vector<float> dqkv(B * T * 3 * C);
    expect_accumulates("attention_backward",
                       [&] {
                         attention_backward(cpu_ctx(), view(dqkv, {B, T, 3 * C}),
                                            view(R, {B, T, C}), view(qkv, {B, T, 3 * C}),
                                            view(lse, {B, NH, T}), NH, dropout);
                       },
                       {&dqkv});
    check_gradient("dqkv", qkv, dqkv, [&] { return forward(); });
  }
};
}  // namespace

// The first position attends only to itself: out_0 = v_0 of its head, and its log-sum-exp is
// its own scaled score q_0 . k_0 / sqrt(HS).
TEST(Attention, FirstPositionAttendsToItself) {
  AttentionCase k;
  k.forward();
  const int HS = k.C / k.NH, C3 = 3 * k.C;
  for (int b = 0; b < k.B; ++b)
    for (int h = 0; h < k.NH; ++h) {
      double score = 0;
      for (int i = 0; i < HS; ++i)
        score += double(k.qkv[b * k.T * C3 + h * HS + i]) * k.qkv[b * k.T * C3 + k.C + h * HS + i];
      EXPECT_NEAR(k.lse[(b * k.NH + h) * k.T], score / std::sqrt(double(HS)), 1e-6);
      for (int i = 0; i < HS; ++i)
        EXPECT_NEAR(k.out[b * k.T * k.C + h * HS + i], k.qkv[b * k.T * C3 + 2 * k.C + h * HS + i],
                    1e-6);
    }
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

// Position 0 sees only itself, so out_0 = mask * v_0 / (1-p): the mask of (b, h, 0, 0) is
// drawn at flat index ((b*NH + h)*T + 0)*T of (B,NH,T,T), as DropoutSpec's attention rule says.
TEST(Attention, DropoutMaskFollowsTheSpecRule) {
  AttentionCase k;
  k.dropout = DropoutSpec{0.4f, 99, 5};
  k.forward();
  const PhiloxStream rng{k.dropout.seed, k.dropout.stream};
  const float scale = 1.0f / (1.0f - k.dropout.p);
  const int HS = k.C / k.NH, C3 = 3 * k.C;
  int kept = 0;
  for (int b = 0; b < k.B; ++b)
    for (int h = 0; h < k.NH; ++h) {
      const bool keep = rng.uniform((int64_t{b} * k.NH + h) * k.T * k.T) >= k.dropout.p;
      kept += keep;
      for (int i = 0; i < HS; ++i) {
        const float v = k.qkv[b * k.T * C3 + 2 * k.C + h * HS + i];
        EXPECT_NEAR(k.out[b * k.T * k.C + h * HS + i], keep ? v * scale : 0.0f, 1e-6)
            << "b " << b << " h " << h;
      }
    }
  // (The other rows' masks: BlockedKernelMatchesDoubleReferenceWithDropout.)
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, k.B * k.NH);
}

// The blocked-GEMM kernel against a plain double-precision loop over (b, h, t, t2) (the
// definition in attention.cpp's header), on a T that spans several causal row blocks with a
// partial last one, with and without dropout.
namespace {
struct Reference {
  std::vector<double> out, lse, probs, att, dqkv;
};

// qkv (B,T,W) rows [q: NH*HS | k: NKV*HS | v: NKV*HS], query head h reading kv head h/(NH/NKV);
// NKV = NH: (B,T,3C). X is float (the op's inputs) or double (finite differences).
template <class X>
Reference reference_attention(const std::vector<X>& qkv, const std::vector<float>& dout, int B,
                              int T, int C, int NH, const DropoutSpec& drop, int NKV = 0) {
  if (NKV == 0) NKV = NH;
  const int HS = C / NH, G = NH / NKV, C3 = C + 2 * NKV * HS;
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  const PhiloxStream rng{drop.seed, drop.stream};
  const double keep_scale = 1.0 / (1.0 - static_cast<double>(static_cast<float>(drop.p)));
  Reference r;
  r.out.assign(B * T * C, 0.0);
  r.lse.assign(B * NH * T, 0.0);
  r.probs.assign(B * NH * T * T, 0.0);
  r.att.assign(B * NH * T * T, 0.0);
  r.dqkv.assign(B * T * C3, 0.0);
  // part 0: q head h; 1: k and 2: v of its kv head.
  auto at = [&](int b, int t, int part, int h, int i) {
    const int64_t row = static_cast<int64_t>(b * T + t) * C3;
    return part == 0 ? row + h * HS + i : row + C + (part - 1) * NKV * HS + (h / G) * HS + i;
  };
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        const int64_t row = ((static_cast<int64_t>(b) * NH + h) * T + t) * T;
        std::vector<double> s(t + 1), mask(t + 1, 1.0);
        double mx = -INFINITY, sum = 0;
        for (int u = 0; u <= t; ++u) {
          double d = 0;
          for (int i = 0; i < HS; ++i) d += double(qkv[at(b, t, 0, h, i)]) * qkv[at(b, u, 1, h, i)];
          s[u] = d * scale;
          mx = std::max(mx, s[u]);
        }
        for (int u = 0; u <= t; ++u) sum += s[u] = std::exp(s[u] - mx);
        r.lse[(static_cast<int64_t>(b) * NH + h) * T + t] = mx + std::log(sum);
        for (int u = 0; u <= t; ++u) {
          if (drop.enabled()) mask[u] = rng.uniform(row + u) >= drop.p ? keep_scale : 0.0;
          r.probs[row + u] = s[u] / sum;
          r.att[row + u] = r.probs[row + u] * mask[u];
          for (int i = 0; i < HS; ++i)
            r.out[(b * T + t) * C + h * HS + i] += r.att[row + u] * qkv[at(b, u, 2, h, i)];
        }
        // Backward of out_t = sum_u att[u] v_u with dL/dout = dout.
        std::vector<double> dp(t + 1);
        double rowdot = 0;
        for (int u = 0; u <= t; ++u) {
          double d = 0;
          for (int i = 0; i < HS; ++i) {
            const double g = dout[(b * T + t) * C + h * HS + i];
            d += g * qkv[at(b, u, 2, h, i)];
            r.dqkv[at(b, u, 2, h, i)] += r.att[row + u] * g;
          }
          dp[u] = d * mask[u];
          rowdot += r.probs[row + u] * dp[u];
        }
        for (int u = 0; u <= t; ++u) {
          const double ds = r.probs[row + u] * (dp[u] - rowdot) * scale;
          for (int i = 0; i < HS; ++i) {
            r.dqkv[at(b, t, 0, h, i)] += ds * qkv[at(b, u, 1, h, i)];
            r.dqkv[at(b, u, 1, h, i)] += ds * qkv[at(b, t, 0, h, i)];
          }
        }
      }
  return r;
}

// Every element within tol * (|ref| + rms(ref)).
void expect_close_to(const char* what, const std::vector<float>& got,
                     const std::vector<double>& ref, double tol) {
  ASSERT_EQ(got.size(), ref.size());
  double sq = 0;
  for (double x : ref) sq += x * x;
  const double rms = std::sqrt(sq / ref.size());
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!(std::fabs(got[i] - ref[i]) <= tol * (std::fabs(ref[i]) + rms)) && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs reference " << ref[i];
  }
}

// NH = 3 multi-head, or NH = 6 query heads in NKV = 2 groups (grouped-query attention).
void check_against_reference(const DropoutSpec& drop, int NH = 3, int NKV = 3) {
  const int B = 2, T = 70, HS = 8, C = NH * HS;  // row blocks 0-31, 32-63, 64-69
  const int C3 = C + 2 * NKV * HS;
  auto qkv = randn(B * T * C3, 31), dout = randn(B * T * C, 32);
  std::vector<float> out(B * T * C), lse(B * NH * T), dqkv = randn(B * T * C3, 33);
  const std::vector<float> dqkv0 = dqkv;
  attention_forward(cpu_ctx(), view(out, {B, T, C}), view(lse, {B, NH, T}), view(qkv, {B, T, C3}),
                    NH, NKV, drop);
  attention_backward(cpu_ctx(), view(dqkv, {B, T, C3}), view(dout, {B, T, C}),
                     view(qkv, {B, T, C3}), view(lse, {B, NH, T}), NH, NKV, drop);
  Reference r = reference_attention(qkv, dout, B, T, C, NH, drop, NKV);
  for (size_t i = 0; i < dqkv.size(); ++i) dqkv[i] -= dqkv0[i];  // the op accumulates
  expect_close_to("out", out, r.out, 1e-5);
  expect_close_to("lse", lse, r.lse, 1e-5);
  expect_close_to("dqkv", dqkv, r.dqkv, 1e-4);
}
}  // namespace

TEST(Attention, BlockedKernelMatchesDoubleReferenceOverSeveralRowBlocks) {
  check_against_reference(DropoutSpec{});
}

TEST(Attention, BlockedKernelMatchesDoubleReferenceWithDropout) {
  check_against_reference(DropoutSpec{0.25f, 77, rng_stream_id(4, 5)});
}

TEST(Attention, GroupedQueryMatchesDoubleReference) {
  check_against_reference(DropoutSpec{}, 6, 2);
  check_against_reference(DropoutSpec{0.25f, 77, rng_stream_id(4, 5)}, 6, 2);
  check_against_reference(DropoutSpec{}, 4, 1);  // multi-query: one kv head
}

// Grouped-query attention is multi-head attention on kv heads repeated per query head
// (transformers' repeat_kv): the same outputs, and each kv head's gradient is the sum of its
// repeated copies' gradients.
TEST(Attention, GroupedQueryEqualsMultiHeadOnRepeatedKvHeads) {
  const int B = 2, T = 9, NH = 6, NKV = 2, G = NH / NKV, HS = 4, C = NH * HS;
  const int W = C + 2 * NKV * HS, C3 = 3 * C;
  const DropoutSpec drop{0.2f, 5, 6};
  auto qkv = randn(B * T * W, 51), dout = randn(B * T * C, 52);
  std::vector<float> rep(B * T * C3);  // (B,T,3C): q, then k and v with each kv head repeated
  for (int r = 0; r < B * T; ++r)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < HS; ++i) {
        rep[r * C3 + h * HS + i] = qkv[r * W + h * HS + i];
        rep[r * C3 + C + h * HS + i] = qkv[r * W + C + (h / G) * HS + i];
        rep[r * C3 + 2 * C + h * HS + i] = qkv[r * W + C + NKV * HS + (h / G) * HS + i];
      }
  std::vector<float> out_g(B * T * C), lse_g(B * NH * T), dqkv_g(qkv.size());
  std::vector<float> out_m(out_g.size()), lse_m(lse_g.size()), dqkv_m(rep.size());
  attention_forward(cpu_ctx(), view(out_g, {B, T, C}), view(lse_g, {B, NH, T}),
                    view(qkv, {B, T, W}), NH, NKV, drop);
  attention_forward(cpu_ctx(), view(out_m, {B, T, C}), view(lse_m, {B, NH, T}),
                    view(rep, {B, T, C3}), NH, drop);
  EXPECT_EQ(out_g, out_m);
  EXPECT_EQ(lse_g, lse_m);
  attention_backward(cpu_ctx(), view(dqkv_g, {B, T, W}), view(dout, {B, T, C}),
                     view(qkv, {B, T, W}), view(lse_g, {B, NH, T}), NH, NKV, drop);
  attention_backward(cpu_ctx(), view(dqkv_m, {B, T, C3}), view(dout, {B, T, C}),
                     view(rep, {B, T, C3}), view(lse_m, {B, NH, T}), NH, drop);
  for (int r = 0; r < B * T; ++r) {
    for (int j = 0; j < C; ++j) ASSERT_EQ(dqkv_g[r * W + j], dqkv_m[r * C3 + j]) << "dq " << r;
    for (int part = 1; part <= 2; ++part)
      for (int kh = 0; kh < NKV; ++kh)
        for (int i = 0; i < HS; ++i) {
          double sum = 0;
          for (int h = kh * G; h < (kh + 1) * G; ++h) sum += dqkv_m[r * C3 + part * C + h * HS + i];
          const float got = dqkv_g[r * W + C + (part - 1) * NKV * HS + kh * HS + i];
          EXPECT_NEAR(got, sum, 1e-5 * (1 + std::fabs(sum))) << "part " << part << " row " << r;
        }
  }
}

TEST(Attention, GroupedQueryBackwardMatchesFloat64FiniteDifferences) {
  const int B = 2, T = 5, NH = 4, NKV = 2, HS = 3, C = NH * HS, W = C + 2 * NKV * HS;
  for (const DropoutSpec& drop : {DropoutSpec{}, DropoutSpec{0.3f, 8, 9}}) {
    auto qkv = randn(B * T * W, 61), R = randn(B * T * C, 62);
    std::vector<float> out(B * T * C), lse(B * NH * T), dqkv(qkv.size());
    attention_forward(cpu_ctx(), view(out, {B, T, C}), view(lse, {B, NH, T}), view(qkv, {B, T, W}),
                      NH, NKV, drop);
    expect_accumulates("attention_backward (grouped)",
                       [&] {
                         attention_backward(cpu_ctx(), view(dqkv, {B, T, W}), view(R, {B, T, C}),
                                            view(qkv, {B, T, W}), view(lse, {B, NH, T}), NH, NKV,
                                            drop);
                       },
                       {&dqkv});
    std::vector<double> x = to_f64(qkv);
    auto loss = [&] {
      const Reference r = reference_attention(x, R, B, T, C, NH, drop, NKV);
      double l = 0;
      for (size_t i = 0; i < r.out.size(); ++i) l += r.out[i] * R[i];
      return l;
    };
    check_gradient_f64("dqkv", x, dqkv, loss);
  }
}

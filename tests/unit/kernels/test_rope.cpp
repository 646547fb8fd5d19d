// RoPE: rope_inv_freq and rope_forward against transformers (tests/fixtures/rope_llama3.json,
// written by tools/gen_rope_fixture.py), and rope_forward/backward against a float64
// reference written here.
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "kernel_test_util.h"
#include "tide/kernels/rope_freq.h"

using namespace tide;
using namespace tide::test;

namespace {

nlohmann::json rope_fixture() {
  std::ifstream f(std::string(TIDE_SOURCE_DIR) + "/tests/fixtures/rope_llama3.json");
  EXPECT_TRUE(f.good()) << "tests/fixtures/rope_llama3.json is missing";
  return nlohmann::json::parse(f);
}

RopeSpec spec_of(const nlohmann::json& j) {
  RopeSpec s;
  s.head_size = j.at("head_size").get<int>();
  s.theta = j.at("theta").get<double>();
  if (j.at("type") == "llama3") {
    s.type = RopeScaling::llama3;
    s.factor = j.at("factor").get<double>();
    s.low_freq_factor = j.at("low_freq_factor").get<double>();
    s.high_freq_factor = j.at("high_freq_factor").get<double>();
    s.original_max_position_embeddings = j.at("original_max_position_embeddings").get<int64_t>();
  }
  return s;
}

// Distance in representable f32 values (both finite and positive here).
int64_t ulps_apart(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::llabs(static_cast<int64_t>(ia) - ib);
}

// qkv (B,T,(NH+2*NKV)*HS) turned as ops.h says, in double from the f32 angle t * inv_freq[i].
std::vector<double> rope_reference(const std::vector<double>& x, const std::vector<float>& inv_freq,
                                   int B, int T, int NH, int NKV, int HS) {
  const int H = HS / 2, W = (NH + 2 * NKV) * HS;
  std::vector<double> y = x;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < NH + NKV; ++h)
        for (int i = 0; i < H; ++i) {
          const double angle = static_cast<float>(t) * inv_freq[i];  // f32 product
          const size_t a = (static_cast<size_t>(b) * T + t) * W + h * HS + i;
          y[a] = x[a] * std::cos(angle) - x[a + H] * std::sin(angle);
          y[a + H] = x[a + H] * std::cos(angle) + x[a] * std::sin(angle);
        }
  return y;
}

// A grouped layout (2 q heads per kv head), HS = 12 (6 frequencies).
struct RopeCase {
  static constexpr int B = 2, T = 7, NH = 4, NKV = 2, HS = 12, W = (NH + 2 * NKV) * HS;
  std::vector<float> inv_freq = rope_inv_freq(RopeSpec{HS, 10000.0});
  std::vector<float> inp = randn(B * T * W, 81), R = randn(B * T * W, 82);
};

}  // namespace

TEST(RopeInvFreq, MatchesTransformers) {
  const nlohmann::json fx = rope_fixture();
  int64_t exact = 0, total = 0;
  for (const auto& j : fx.at("inv_freq")) {
    SCOPED_TRACE(j.at("name").get<std::string>());
    const std::vector<float> want = j.at("values").get<std::vector<float>>();
    const std::vector<float> got = rope_inv_freq(spec_of(j));
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      // torch's pow (SLEEF, within 1 ulp) against a correctly rounded one: at most 1 ulp apart.
      EXPECT_LE(ulps_apart(got[i], want[i]), 1) << "i=" << i << ": " << got[i] << " vs " << want[i];
      exact += got[i] == want[i];
      ++total;
    }
  }
  EXPECT_GE(exact, total * 9 / 10) << exact << " of " << total << " bitwise equal";
}

TEST(RopeInvFreq, Llama3ScalingKeepsHighAndDividesLowFrequencies) {
  RopeSpec plain{64, 500000.0};
  RopeSpec scaled = plain;
  scaled.type = RopeScaling::llama3;
  const std::vector<float> a = rope_inv_freq(plain), b = rope_inv_freq(scaled);
  EXPECT_EQ(a[0], b[0]);                               // wavelength 2 pi: unchanged
  EXPECT_EQ(b[31], a[31] / 8.0f);                      // wavelength > 8192: divided by factor
  EXPECT_TRUE(b[15] < a[15] && b[15] > a[15] / 8.0f);  // in between: smoothed
}

TEST(RopeInvFreq, BadSpecsAreRefused) {
  expect_error([] { rope_inv_freq(RopeSpec{7, 10000.0}); }, {"rope_inv_freq", "head_size=7"});
  RopeSpec s{64, 500000.0, RopeScaling::llama3};
  s.high_freq_factor = 1.0;
  expect_error([&] { rope_inv_freq(s); }, {"rope_inv_freq", "high_freq_factor=1"});
}

// rope_forward on transformers' apply_rotary_pos_emb example, with its inv_freq.
TEST(Rope, ForwardMatchesTransformersApplyRotaryPosEmb) {
  const nlohmann::json fx = rope_fixture().at("apply");
  const int B = fx.at("B"), T = fx.at("T"), NH = fx.at("n_head"), NKV = fx.at("n_kv_head"),
            HS = fx.at("head_size");
  const int W = (NH + 2 * NKV) * HS;
  std::vector<float> inv_freq = fx.at("inv_freq").get<std::vector<float>>();
  const std::vector<float> q = fx.at("q_embed").get<std::vector<float>>(),
                           k = fx.at("k_embed").get<std::vector<float>>();
  std::vector<float> qkv(static_cast<size_t>(B) * T * W), out(qkv.size());
  for (size_t i = 0; i < qkv.size(); ++i)
    qkv[i] = static_cast<float>(static_cast<int64_t>(i * 7919 % 201) - 100) / 64.0f;
  rope_forward(cpu_ctx(), view(out, {B, T, W}), view(qkv, {B, T, W}), view(inv_freq, {HS / 2}), NH,
               NKV);
  double max_err = 0;
  for (int r = 0; r < B * T; ++r) {
    for (int j = 0; j < W; ++j) {
      const float got = out[static_cast<size_t>(r) * W + j];
      if (j >= (NH + NKV) * HS) {  // v: copied
        ASSERT_EQ(got, qkv[static_cast<size_t>(r) * W + j]);
        continue;
      }
      const float want = j < NH * HS ? q[static_cast<size_t>(r) * NH * HS + j]
                                     : k[static_cast<size_t>(r) * NKV * HS + j - NH * HS];
      max_err = std::max(max_err, std::fabs(static_cast<double>(got) - want));
      EXPECT_NEAR(got, want, 1e-6) << "row " << r << " column " << j;
    }
  }
  EXPECT_LT(max_err, 1e-6);
}

TEST(Rope, ForwardMatchesFloat64Reference) {
  RopeCase k;
  const int B = k.B, T = k.T, W = k.W;
  std::vector<float> out(k.inp.size());
  rope_forward(cpu_ctx(), view(out, {B, T, W}), view(k.inp, {B, T, W}),
               view(k.inv_freq, {k.HS / 2}), k.NH, k.NKV);
  const std::vector<double> ref =
      rope_reference(to_f64(k.inp), k.inv_freq, B, T, k.NH, k.NKV, k.HS);
  for (size_t i = 0; i < out.size(); ++i)
    EXPECT_NEAR(out[i], ref[i], 1e-6 * (1 + std::fabs(ref[i]))) << "element " << i;
  // In place: the same bits.
  std::vector<float> x = k.inp;
  rope_forward(cpu_ctx(), view(x, {B, T, W}), view(x, {B, T, W}), view(k.inv_freq, {k.HS / 2}),
               k.NH, k.NKV);
  EXPECT_EQ(0, std::memcmp(x.data(), out.data(), out.size() * sizeof(float)));
}

TEST(Rope, BackwardMatchesFloat64FiniteDifferences) {
  RopeCase k;
  const int B = k.B, T = k.T, W = k.W;
  std::vector<float> dinp(k.inp.size());
  expect_accumulates("rope_backward",
                     [&] {
                       rope_backward(cpu_ctx(), view(dinp, {B, T, W}), view(k.R, {B, T, W}),
                                     view(k.inv_freq, {k.HS / 2}), k.NH, k.NKV);
                     },
                     {&dinp});
  std::vector<double> x = to_f64(k.inp);
  auto loss = [&] {
    const std::vector<double> y = rope_reference(x, k.inv_freq, B, T, k.NH, k.NKV, k.HS);
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += y[i] * k.R[i];
    return l;
  };
  check_gradient_f64("dinp", x, dinp, loss);
}

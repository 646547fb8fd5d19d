// AdamW: the reference against the textbook formulas, every SIMD path against the reference
// (bitwise), the parameter copy, odd sizes, threads, streaming stores, non-finite gradients.

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <string>

#include "optim_test_util.h"
#include "tide/core/error.h"
#include "tide/optim/adamw.h"
#include "tide/optim/adamw_cpu.h"

using namespace tide;
using tide::test::Aligned;
using tide::test::State;

namespace {

// The brief's formulas, literally, in double: the oracle for the oracle.
void adamw_textbook(double& p, double g, double& m, double& v, const AdamWHyper& h,
                    const AdamWStep& s) {
  g *= s.grad_scale;
  p = p - double(h.lr) * h.weight_decay * p;
  m = double(h.beta1) * m + (1 - double(h.beta1)) * g;
  v = double(h.beta2) * v + (1 - double(h.beta2)) * g * g;
  const double mhat = m / (1 - std::pow(double(h.beta1), double(s.t)));
  const double vhat = v / (1 - std::pow(double(h.beta2), double(s.t)));
  p = p - double(h.lr) * mhat / (std::sqrt(vhat) + h.eps);
}

// Classic Adam with L2 regularisation (AdamWHyper::decoupled = false; DeepSpeed's Adam with
// adam_w_mode false, torch.optim.Adam's weight_decay), written from the textbook in double:
// the decay joins the gradient before the moments, and p is not decayed.
void adam_l2_textbook(double& p, double g, double& m, double& v, const AdamWHyper& h,
                      const AdamWStep& s) {
  g = g * s.grad_scale + h.weight_decay * p;
  m = h.beta1 * m + (1 - h.beta1) * g;
  v = h.beta2 * v + (1 - h.beta2) * g * g;
  const double mhat = m / (1 - std::pow(h.beta1, double(s.t)));
  const double vhat = v / (1 - std::pow(h.beta2, double(s.t)));
  p = p - h.lr * mhat / (std::sqrt(vhat) + h.eps);
}

const AdamWHyper kHyper{1e-3, 0.9, 0.95, 1e-8, 0.1};
const AdamWHyper kAdamL2{1e-3, 0.9, 0.95, 1e-8, 0.1, /*decoupled=*/false};

}  // namespace

TEST(AdamWReference, FirstStepMovesEachParameterByLrTimesSignOfGrad) {
  // At t = 1 with m = v = 0: mhat = g, vhat = g^2, so the update is lr * g / (|g| + eps).
  float p[3] = {1.0f, -2.0f, 0.5f}, g[3] = {0.5f, -3.0f, 0.0f}, m[3] = {}, v[3] = {};
  adamw_reference(p, g, m, v, 3, AdamWHyper{0.1, 0.9, 0.999, 1e-8, 0.0}, AdamWStep{1});
  EXPECT_FLOAT_EQ(p[0], 0.9f);
  EXPECT_FLOAT_EQ(p[1], -1.9f);
  EXPECT_EQ(p[2], 0.5f);  // zero gradient: no move
  EXPECT_FLOAT_EQ(m[0], 0.05f);
  EXPECT_FLOAT_EQ(v[1], 0.001f * 9.0f);
}

TEST(AdamWReference, DecoupledWeightDecayShrinksBeforeTheUpdate) {
  // Zero gradient: only the decay acts, p *= 1 - lr*wd.
  float p = 2.0, g = 0.0, m = 0.0, v = 0.0f;
  adamw_reference(&p, &g, &m, &v, 1, AdamWHyper{0.5, 0.9, 0.95, 1e-8, 0.1}, AdamWStep{3});
  EXPECT_FLOAT_EQ(p, 2.0f * (1.0f - 0.05f));
}

TEST(AdamWReference, ClassicAdamFoldsTheDecayIntoTheGradient) {
  // Zero gradient, by hand: g = wd*p = 0.2; at t = 1 mhat = g and vhat = g^2, so p moves by
  // lr * g / (|g| + eps) = 0.5 (minus 2.5e-8): 2 -> 1.5. AdamW would give 2 * (1 - 0.05) = 1.9.
  float p = 2.0f, g = 0.0f, m = 0.0f, v = 0.0f;
  const AdamWHyper h{0.5, 0.9, 0.95, 1e-8, 0.1, /*decoupled=*/false};
  adamw_reference(&p, &g, &m, &v, 1, h, AdamWStep{1});
  EXPECT_FLOAT_EQ(p, 1.5f);
  EXPECT_FLOAT_EQ(m, 0.1f * 0.2f);          // (1 - b1) * g
  EXPECT_FLOAT_EQ(v, 0.05f * 0.2f * 0.2f);  // (1 - b2) * g^2
  // Over many steps, against the fp64 textbook (weight decay large enough to matter).
  const int64_t n = 1000;
  State st(n, 5, 0.01f);
  std::vector<double> pd(n), md(n), vd(n);
  for (int64_t i = 0; i < n; ++i) pd[i] = st.master[i], md[i] = st.m[i], vd[i] = st.v[i];
  for (int64_t t = 1; t <= 20; ++t) {
    const AdamWStep s{t, t % 2 ? 1.0f : 0.25f};
    adamw_reference(st.master.data(), st.grad.data(), st.m.data(), st.v.data(), n, kAdamL2, s);
    for (int64_t i = 0; i < n; ++i) adam_l2_textbook(pd[i], st.grad[i], md[i], vd[i], kAdamL2, s);
  }
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_NEAR(st.master[i], pd[i], 1e-6 * (1 + std::abs(pd[i]))) << i;
    ASSERT_NEAR(st.m[i], md[i], 1e-6 * (1 + std::abs(md[i]))) << i;
    ASSERT_NEAR(st.v[i], vd[i], 1e-5 * vd[i] + 1e-12) << i;
  }
}

TEST(AdamWReference, MatchesTextbookFormulasInDoubleOverManySteps) {
  const int64_t n = 1000;
  State st(n, 3);
  std::vector<double> p(n), m(n), v(n);
  for (int64_t i = 0; i < n; ++i) p[i] = st.master[i], m[i] = st.m[i], v[i] = st.v[i];
  for (int64_t t = 1; t <= 20; ++t) {
    const AdamWStep s{t, t % 2 ? 1.0f : 0.25f};
    adamw_reference(st.master.data(), st.grad.data(), st.m.data(), st.v.data(), n, kHyper, s);
    for (int64_t i = 0; i < n; ++i) adamw_textbook(p[i], st.grad[i], m[i], v[i], kHyper, s);
  }
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_NEAR(st.master[i], p[i], 1e-6 * (1 + std::abs(p[i]))) << i;
    ASSERT_NEAR(st.m[i], m[i], 1e-6 * (1 + std::abs(m[i]))) << i;
    ASSERT_NEAR(st.v[i], v[i], 1e-5 * v[i] + 1e-12) << i;
  }
}

TEST(AdamWReference, RejectsBadHyperParametersWithTheFix) {
  float p = 0, g = 0, m = 0, v = 0;
  auto run = [&](AdamWHyper h, AdamWStep s) { adamw_reference(&p, &g, &m, &v, 1, h, s); };
  auto expect_error = [&](AdamWHyper h, AdamWStep s, const std::string& part) {
    try {
      run(h, s);
      FAIL() << "no error for " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_error(AdamWHyper{1e-3, 1.0}, AdamWStep{1}, "beta1");
  expect_error(AdamWHyper{1e-3, 0.9, -0.1}, AdamWStep{1}, "beta2");
  expect_error(AdamWHyper{1e-3, 0.9, 0.95, 0.0}, AdamWStep{1}, "eps");
  expect_error(AdamWHyper{-1.0}, AdamWStep{1}, "learning rate");
  expect_error(kHyper, AdamWStep{0}, "start at 1");
  expect_error(kHyper, AdamWStep{1, std::numeric_limits<float>::infinity()}, "grad_scale");
}

// ---- the fast CPU paths -------------------------------------------------------------------

struct PathCase {
  SimdPath path;
  DType grad;
  DType out;  // U16 here means "no parameter copy"
};

class AdamWPaths : public ::testing::TestWithParam<PathCase> {};

// Runs 3 steps of adamw_cpu on the given path against the reference for several sizes,
// including ones that are not a multiple of any vector width, and checks bitwise equality of
// master, m, v and that the parameter copy is exactly the rounded master.
TEST_P(AdamWPaths, BitwiseEqualToReference) {
  const PathCase pc = GetParam();
  if (!simd_path_supported(pc.path))
    GTEST_SKIP() << "this CPU lacks "
                 << (pc.path == SimdPath::kAvx512 ? "avx512f" : "avx2/fma/f16c") << " for path "
                 << simd_path_name(pc.path);
  // AdamW and classic Adam (L2 folded into the gradient): the same paths, the same bits.
  for (const AdamWHyper& hyper : {kHyper, kAdamL2})
    for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 1000, 40000 + 13}) {
      State ref(n, 11 + n, 0.01f), fast(n, 11 + n, 0.01f);
      // Gradients in the tested dtype; the reference sees the same values widened to f32.
      Aligned<uint16_t> g16(n);
      for (int64_t i = 0; i < n; ++i) {
        if (pc.grad == DType::BF16)
          g16[i] = f32_to_bf16(ref.grad[i]), ref.grad[i] = bf16_to_f32(g16[i]);
        if (pc.grad == DType::F16)
          g16[i] = f32_to_f16(ref.grad[i]), ref.grad[i] = f16_to_f32(g16[i]);
      }
      Aligned<float> out32(n);
      Aligned<uint16_t> out16(n);
      AdamWChunk c{fast.master.data(),
                   pc.grad == DType::F32 ? (void*)fast.grad.data() : g16.data(),
                   pc.grad,
                   fast.m.data(),
                   fast.v.data(),
                   nullptr,
                   pc.out,
                   n};
      if (pc.out == DType::F32) c.param_out = out32.data();
      if (pc.out == DType::BF16 || pc.out == DType::F16) c.param_out = out16.data();
      AdamWCpuOptions opt;
      opt.path = pc.path;
      opt.tile = 4096;  // several tiles at n = 40013, so OpenMP splits it
      for (int64_t t = 1; t <= 3; ++t) {
        const AdamWStep s{t, t == 2 ? 0.5f : 1.0f};
        adamw_reference(ref.master.data(), ref.grad.data(), ref.m.data(), ref.v.data(), n, hyper,
                        s);
        ASSERT_TRUE(adamw_cpu(c, hyper, s, opt));
      }
      int64_t bad = -1;
      EXPECT_TRUE(test::same_bits(fast.master.data(), ref.master.data(), n, &bad))
          << "master differs at " << bad << " of n=" << n << (hyper.decoupled ? "" : " (Adam+L2)");
      EXPECT_TRUE(test::same_bits(fast.m.data(), ref.m.data(), n, &bad)) << "m at " << bad;
      EXPECT_TRUE(test::same_bits(fast.v.data(), ref.v.data(), n, &bad)) << "v at " << bad;
      for (int64_t i = 0; i < n; ++i) {
        if (pc.out == DType::F32) ASSERT_EQ(f32_bits(out32[i]), f32_bits(fast.master[i])) << i;
        if (pc.out == DType::BF16) ASSERT_EQ(out16[i], f32_to_bf16(fast.master[i])) << i;
        if (pc.out == DType::F16) ASSERT_EQ(out16[i], f32_to_f16(fast.master[i])) << i;
      }
    }
}

std::vector<PathCase> all_cases() {
  std::vector<PathCase> v;
  for (SimdPath p : {SimdPath::kScalar, SimdPath::kAvx2, SimdPath::kAvx512})
    for (DType g : {DType::F32, DType::BF16, DType::F16})
      for (DType o : {DType::U16, DType::F32, DType::BF16, DType::F16}) v.push_back({p, g, o});
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllPathsAndDtypes, AdamWPaths, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) {
                           const PathCase& c = info.param;
                           return std::string(simd_path_name(c.path)) + "_grad_" +
                                  std::string(dtype_name(c.grad)) + "_out_" +
                                  (c.out == DType::U16 ? "none" : std::string(dtype_name(c.out)));
                         });

TEST(AdamWCpu, StreamingStoresAndThreadCountsGiveTheSameBits) {
  const int64_t n = 3 * 4096 + 5;
  State ref(n, 5);
  adamw_reference(ref.master.data(), ref.grad.data(), ref.m.data(), ref.v.data(), n, kHyper, {4});
  for (Streaming nt : {Streaming::kNone, Streaming::kParamCopy, Streaming::kAll})
    for (int threads : {1, 2, 3}) {
      State st(n, 5);
      Aligned<uint16_t> out(n);
      AdamWCpuOptions opt;
      opt.tile = 4096;
      opt.nontemporal = nt;
      opt.nontemporal_min = 0;  // force streaming stores on this small chunk
      opt.threads = threads;
      ASSERT_TRUE(adamw_cpu({st.master.data(), st.grad.data(), DType::F32, st.m.data(), st.v.data(),
                             out.data(), DType::BF16, n},
                            kHyper, {4}, opt));
      EXPECT_TRUE(test::same_bits(st.master.data(), ref.master.data(), n)) << int(nt) << threads;
      EXPECT_TRUE(test::same_bits(st.v.data(), ref.v.data(), n)) << int(nt) << threads;
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], f32_to_bf16(ref.master[i])) << i;
    }
}

TEST(AdamWCpu, UnalignedChunksWork) {
  // A chunk that starts 1 element into a buffer: no streaming stores, same result.
  const int64_t n = 5000;
  State ref(n + 1, 9), st(n + 1, 9);
  adamw_reference(ref.master.data() + 1, ref.grad.data() + 1, ref.m.data() + 1, ref.v.data() + 1, n,
                  kHyper, {2});
  AdamWCpuOptions opt;
  opt.nontemporal = Streaming::kAll;
  opt.nontemporal_min = 0;
  ASSERT_TRUE(adamw_cpu({st.master.data() + 1, st.grad.data() + 1, DType::F32, st.m.data() + 1,
                         st.v.data() + 1, nullptr, DType::BF16, n},
                        kHyper, {2}, opt));
  EXPECT_TRUE(test::same_bits(st.master.data(), ref.master.data(), n + 1));
}

TEST(AdamWCpu, NonFiniteGradientLeavesStateUntouched) {
  const int64_t n = 20000;
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
          -std::numeric_limits<float>::infinity()})
      for (int64_t where : {int64_t{0}, n / 2 + 3, n - 1}) {
        State st(n, 2), before(n, 2);
        Aligned<uint16_t> g16(n), out(n), out_before(n);
        for (int64_t i = 0; i < n; ++i)
          g16[i] = dt == DType::F16 ? f32_to_f16(st.grad[i]) : f32_to_bf16(st.grad[i]);
        std::memset(out.data(), 0xab, n * 2);
        std::memset(out_before.data(), 0xab, n * 2);
        st.grad[where] = bad;
        g16[where] = dt == DType::F16 ? f32_to_f16(bad) : f32_to_bf16(bad);
        const AdamWChunk c{st.master.data(),
                           dt == DType::F32 ? (void*)st.grad.data() : g16.data(),
                           dt,
                           st.m.data(),
                           st.v.data(),
                           out.data(),
                           DType::BF16,
                           n};
        EXPECT_FALSE(adamw_cpu(c, kHyper, {1}));
        EXPECT_TRUE(has_nonfinite(c.grad, dt, n));
        EXPECT_TRUE(test::same_bits(st.master.data(), before.master.data(), n));
        EXPECT_TRUE(test::same_bits(st.m.data(), before.m.data(), n));
        EXPECT_TRUE(test::same_bits(st.v.data(), before.v.data(), n));
        EXPECT_EQ(std::memcmp(out.data(), out_before.data(), n * 2), 0);
      }
}

TEST(AdamWCpu, FiniteExtremesAreNotFlagged) {
  // The largest finite values and subnormals are finite: the prescan must let them through.
  float g[4] = {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                std::numeric_limits<float>::denorm_min(), 0.0f};
  EXPECT_FALSE(has_nonfinite(g, DType::F32, 4));
  uint16_t h[3] = {0x7bff, 0xfbff, 0x0001};  // f16 +-65504 and the smallest subnormal
  EXPECT_FALSE(has_nonfinite(h, DType::F16, 3));
  uint16_t b[2] = {0x7f7f, 0xff7f};  // bf16 +-max
  EXPECT_FALSE(has_nonfinite(b, DType::BF16, 2));
}

TEST(AdamWCpu, RejectsBadChunksAndUnsupportedPaths) {
  float x = 0;
  AdamWChunk c{&x, &x, DType::F32, &x, nullptr, nullptr, DType::BF16, 1};
  EXPECT_THROW((void)adamw_cpu(c, kHyper, {1}), Error);  // v missing
  c.v = &x;
  c.grad_dtype = DType::I32;
  EXPECT_THROW((void)adamw_cpu(c, kHyper, {1}), Error);
  c.grad_dtype = DType::F32;
  AdamWCpuOptions opt;
  opt.tile = 100;  // not a multiple of 16
  EXPECT_THROW((void)adamw_cpu(c, kHyper, {1}, opt), Error);
  EXPECT_THROW(parse_simd_path("sse9"), Error);
  EXPECT_EQ(parse_simd_path("avx2"), SimdPath::kAvx2);
  if (!simd_path_supported(SimdPath::kAvx512)) {
    opt = {};
    opt.path = SimdPath::kAvx512;
    try {
      (void)adamw_cpu(c, kHyper, {1}, opt);
      FAIL() << "forcing avx512 on a CPU without it must fail";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("avx512f"), std::string::npos) << e.what();
    }
  }
}

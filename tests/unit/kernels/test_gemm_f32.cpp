// tide's own f32 GEMM (cpu/gemm_f32.h), on AVX-512 and on AVX2 + FMA, each where this CPU has
// it (else skipped, saying why): every element equal, bit for bit, to one scalar FMA chain over k
// in order (the kernels' stated sum, so the two paths' bits are the same), on shapes that are not
// multiples of its tiles and with K over several blocks, in the four transposes and the three
// epilogues; within the f32 error bound of the exact sum and of OpenBLAS's; its bits independent of
// the thread count; and the matmul ops taking it.
#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "tide/kernels/cpu/gemm.h"
#include "tide/kernels/cpu/gemm_f32.h"

using namespace tide;
using namespace tide::cpu;

namespace {

struct Problem {
  int64_t M, N, K;
  bool ta, tb;
  std::vector<float> A, B;
  int64_t lda() const { return ta ? M : K; }
  int64_t ldb() const { return tb ? K : N; }
  float a(int64_t i, int64_t k) const { return ta ? A[k * M + i] : A[i * K + k]; }
  float b(int64_t k, int64_t j) const { return tb ? B[j * K + k] : B[k * N + j]; }
  GemmOperand opa() const { return {A.data(), lda(), ta, DType::F32}; }
  GemmOperand opb() const { return {B.data(), ldb(), tb, DType::F32}; }
};

Problem make_problem(int64_t M, int64_t N, int64_t K, bool ta, bool tb, uint64_t seed) {
  return Problem{
      M, N, K, ta, tb, tide::test::randn(M * K, seed), tide::test::randn(K * N, seed + 1)};
}

std::string what(const Problem& p, GemmEpilogue e) {
  return "M=" + std::to_string(p.M) + " N=" + std::to_string(p.N) + " K=" + std::to_string(p.K) +
         " ta=" + std::to_string(p.ta) + " tb=" + std::to_string(p.tb) + " epilogue " +
         std::to_string(static_cast<int>(e));
}

}  // namespace

// Parameter: the path under test, set for the test's products (gemm_f32 follows the path).
class F32Gemm : public ::testing::TestWithParam<F32GemmPath> {
 protected:
  void SetUp() override {
    if (!f32_gemm_path_supported(GetParam()))
      GTEST_SKIP() << "this CPU has no "
                   << (GetParam() == F32GemmPath::kAvx512 ? "AVX-512 (F, BW, VL, DQ)"
                                                          : "AVX2 and FMA");
    saved_ = f32_gemm_path();
    set_f32_gemm_path(GetParam());
  }
  void TearDown() override {
    if (f32_gemm_path_supported(GetParam())) set_f32_gemm_path(saved_);
  }
  F32GemmPath saved_ = F32GemmPath::kOpenBlas;
};

INSTANTIATE_TEST_SUITE_P(Paths, F32Gemm,
                         ::testing::Values(F32GemmPath::kAvx512, F32GemmPath::kAvx2),
                         [](const auto& info) {
                           return std::string(f32_gemm_path_name(info.param));
                         });

// Each element is s = fma(a_k, b_k, s) for k = 0..K-1 from s = 0, then bias + s or C + s: the
// bits of that scalar chain. Every element is also within (K + 2) 2^-24 sum |a b| of the exact
// sum (f32 accumulation), and so within twice that of OpenBLAS's result. K = 385 and 1000 cross
// the kernel's blocks of 384 (f32 partial sums stored and reloaded).
TEST_P(F32Gemm, EqualsTheScalarFmaChainAndTheExactSumsOnOddShapes) {
  const std::vector<std::array<int64_t, 3>> shapes = {
      {1, 1, 1},     {1, 7, 3},      {17, 33, 31},  {70, 65, 33},  {33, 129, 64},
      {130, 47, 97}, {45, 300, 161}, {40, 50, 385}, {65, 17, 1000}};
  uint64_t seed = 300;
  for (auto [M, N, K] : shapes) {
    for (int t = 0; t < 4; ++t) {
      const Problem p = make_problem(M, N, K, t & 1, t & 2, seed += 2);
      const std::vector<float> bias = tide::test::randn(N, seed + 7);
      const std::vector<float> C0 = tide::test::randn(M * N, seed + 9);
      for (GemmEpilogue e :
           {GemmEpilogue::kOverwrite, GemmEpilogue::kAddBias, GemmEpilogue::kAccumulate}) {
        std::vector<float> got = C0;
        gemm_f32(M, N, K, p.opa(), p.opb(), got.data(), N, e, bias.data());
        std::vector<float> blas(M * N, 0.0f);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j)
            blas[i * N + j] = e == GemmEpilogue::kAddBias      ? bias[j]
                              : e == GemmEpilogue::kAccumulate ? C0[i * N + j]
                                                               : 0.0f;
        gemm(p.ta, p.tb, M, N, K, 1.0f, p.A.data(), p.lda(), p.B.data(), p.ldb(),
             e == GemmEpilogue::kOverwrite ? 0.0f : 1.0f, blas.data(), N);
        int64_t not_chain = 0, bad = 0;
        for (int64_t i = 0; i < M; ++i) {
          for (int64_t j = 0; j < N; ++j) {
            float s = 0.0f;
            double exact = 0.0, mag = 0.0;
            for (int64_t k = 0; k < K; ++k) {
              s = std::fma(p.a(i, k), p.b(k, j), s);
              exact += static_cast<double>(p.a(i, k)) * p.b(k, j);
              mag += std::fabs(static_cast<double>(p.a(i, k)) * p.b(k, j));
            }
            const float start = e == GemmEpilogue::kAddBias      ? bias[j]
                                : e == GemmEpilogue::kAccumulate ? C0[i * N + j]
                                                                 : 0.0f;
            const float chain = e == GemmEpilogue::kOverwrite ? s : start + s;
            exact += start;
            mag += std::fabs(start);
            const float g = got[i * N + j];
            if (g != chain && not_chain++ == 0)
              ADD_FAILURE() << what(p, e) << ": element (" << i << "," << j << ") = " << g
                            << ", the FMA chain gives " << chain;
            const double bound = (K + 2) * std::ldexp(mag, -24);
            if (!(std::fabs(g - exact) <= bound && std::fabs(g - blas[i * N + j]) <= 2 * bound) &&
                bad++ == 0)
              ADD_FAILURE() << what(p, e) << ": element (" << i << "," << j << ") = " << g
                            << ", exact " << exact << ", OpenBLAS " << blas[i * N + j] << ", bound "
                            << bound;
          }
        }
        EXPECT_EQ(not_chain, 0) << what(p, e);
        EXPECT_EQ(bad, 0) << what(p, e);
      }
    }
  }
}

// The same bits on one thread as on all of them (and with K over two blocks).
TEST_P(F32Gemm, BitsIndependentOfTheThreadCount) {
  for (int t = 0; t < 4; ++t) {
    const Problem p = make_problem(150, 260, 500, t & 1, t & 2, 700 + t);
    std::vector<float> all(p.M * p.N), one(p.M * p.N);
    gemm_f32(p.M, p.N, p.K, p.opa(), p.opb(), all.data(), p.N, GemmEpilogue::kOverwrite);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    gemm_f32(p.M, p.N, p.K, p.opa(), p.opb(), one.data(), p.N, GemmEpilogue::kOverwrite);
    omp_set_num_threads(threads);
    EXPECT_EQ(one, all) << "t=" << t << ": 1 thread against " << threads;
  }
}

// The f32 matmul ops take this path when it is chosen (the bias gradient stays the ops' own
// column sums), and OpenBLAS's when that is.
TEST_P(F32Gemm, MatmulOpsTakeThePathChosen) {
  const int64_t N = 37, C = 40, OC = 50;
  std::vector<float> inp = tide::test::randn(N * C, 1), w = tide::test::randn(OC * C, 2),
                     bias = tide::test::randn(OC, 3), out(N * OC),
                     dout = tide::test::randn(N * OC, 4), dinp(N * C), dw(OC * C), dbias(OC);
  auto v = [](std::vector<float>& x, Shape s) { return tide::test::view(x, s); };
  const OpContext ctx;
  auto calls_of = [&](const std::function<void()>& f) {
    const int64_t before = f32_gemm_calls();
    f();
    return f32_gemm_calls() - before;
  };
  auto all_three = [&] {
    matmul_forward(ctx, v(out, {N, OC}), v(inp, {N, C}), v(w, {OC, C}), v(bias, {OC}));
    matmul_backward_input(ctx, v(dinp, {N, C}), v(dout, {N, OC}), v(w, {OC, C}));
    matmul_backward_weight(ctx, v(dw, {OC, C}), v(dbias, {OC}), v(dout, {N, OC}), v(inp, {N, C}));
  };
  set_f32_gemm_path(GetParam());
  EXPECT_EQ(calls_of(all_three), 3);
  set_f32_gemm_path(F32GemmPath::kOpenBlas);
  EXPECT_EQ(calls_of(all_three), 0);
}

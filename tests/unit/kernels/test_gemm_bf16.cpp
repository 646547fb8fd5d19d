// The native bf16 GEMM (cpu/gemm_bf16.h): the AMX path against exact sums and the widening
// reference on shapes that are not multiples of its tiles, in the four transposes; each
// element's bits independent of the shape around it and of the thread count; and the matmul
// ops taking it on a CPU that has AMX (skipped elsewhere, where the reference runs).
#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "tide/kernels/cpu/gemm.h"
#include "tide/kernels/cpu/gemm_bf16.h"

using namespace tide;
using namespace tide::cpu;

namespace {

std::vector<uint16_t> randn_bf16(int64_t n, uint64_t seed) {
  const std::vector<float> v = tide::test::randn(n, seed);
  std::vector<uint16_t> h(n);
  for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(v[i]);
  return h;
}

std::vector<float> widen(const std::vector<uint16_t>& h) {
  std::vector<float> f(h.size());
  for (size_t i = 0; i < h.size(); ++i) f[i] = bf16_to_f32(h[i]);
  return f;
}

struct Problem {
  int64_t M, N, K;
  bool ta, tb;
  std::vector<uint16_t> A, B;
  int64_t lda() const { return ta ? M : K; }
  int64_t ldb() const { return tb ? K : N; }
  float a(int64_t i, int64_t k) const { return bf16_to_f32(ta ? A[k * M + i] : A[i * K + k]); }
  float b(int64_t k, int64_t j) const { return bf16_to_f32(tb ? B[j * K + k] : B[k * N + j]); }
};

Problem make_problem(int64_t M, int64_t N, int64_t K, bool ta, bool tb, uint64_t seed) {
  return Problem{M, N, K, ta, tb, randn_bf16(M * K, seed), randn_bf16(K * N, seed + 1)};
}

std::vector<uint16_t> run_native(const Problem& p, Bf16Epilogue e, const std::vector<float>& bias,
                                 std::vector<uint16_t> C) {
  gemm_bf16(Bf16GemmPath::kAmx, p.ta, p.tb, p.M, p.N, p.K, p.A.data(), p.lda(), p.B.data(), p.ldb(),
            C.data(), p.N, e, bias.data());
  return C;
}

}  // namespace

// Restores the process's path after each test.
class Bf16Gemm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!bf16_gemm_path_supported(Bf16GemmPath::kAmx)) GTEST_SKIP() << "no AMX-BF16 here";
    saved_ = bf16_gemm_path();
  }
  void TearDown() override {
    if (bf16_gemm_path_supported(Bf16GemmPath::kAmx)) set_bf16_gemm_path(saved_);
  }
  Bf16GemmPath saved_ = Bf16GemmPath::kReference;
};

// Every element within its error bound of the exact sum (f32 accumulation of exact bf16
// products: K * 2^-24 * sum |a b|, then one rounding to bf16: 2^-8 relative), and the widening
// reference's bits (f32 sgemm, rounded once) in all but 1% of the elements (or 2).
TEST_F(Bf16Gemm, MatchesExactSumsAndTheWideningReferenceOnOddShapes) {
  const std::vector<std::array<int64_t, 3>> shapes = {{1, 1, 1},     {1, 7, 3},     {17, 33, 31},
                                                      {70, 65, 33},  {33, 129, 64}, {130, 47, 97},
                                                      {45, 300, 161}};
  uint64_t seed = 100;
  for (auto [M, N, K] : shapes) {
    for (int t = 0; t < 4; ++t) {
      const Problem p = make_problem(M, N, K, t & 1, t & 2, seed += 2);
      const std::vector<float> bias = widen(randn_bf16(N, seed + 7));
      const std::vector<uint16_t> C0 = randn_bf16(M * N, seed + 9);
      for (Bf16Epilogue e :
           {Bf16Epilogue::kOverwrite, Bf16Epilogue::kAddBias, Bf16Epilogue::kAccumulate}) {
        const std::string what = "M=" + std::to_string(M) + " N=" + std::to_string(N) +
                                 " K=" + std::to_string(K) + " ta=" + std::to_string(p.ta) +
                                 " tb=" + std::to_string(p.tb) +
                                 " epilogue=" + std::to_string(static_cast<int>(e));
        const std::vector<uint16_t> got = run_native(p, e, bias, C0);
        // The widening reference: f32 sgemm on the widened operands, beta = 1 onto the start.
        std::vector<float> Af = widen(p.A), Bf = widen(p.B), ref(M * N, 0.0f);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j)
            ref[i * N + j] = e == Bf16Epilogue::kAddBias      ? bias[j]
                             : e == Bf16Epilogue::kAccumulate ? bf16_to_f32(C0[i * N + j])
                                                              : 0.0f;
        gemm(p.ta, p.tb, M, N, K, 1.0f, Af.data(), p.lda(), Bf.data(), p.ldb(),
             e == Bf16Epilogue::kOverwrite ? 0.0f : 1.0f, ref.data(), N);
        int64_t bad = 0, differ = 0;
        for (int64_t i = 0; i < M; ++i) {
          for (int64_t j = 0; j < N; ++j) {
            double exact = 0.0, mag = 0.0;
            if (e == Bf16Epilogue::kAddBias) exact = bias[j], mag = std::fabs(bias[j]);
            if (e == Bf16Epilogue::kAccumulate)
              exact = bf16_to_f32(C0[i * N + j]), mag = std::fabs(exact);
            for (int64_t k = 0; k < K; ++k) {
              const double ab = static_cast<double>(p.a(i, k)) * p.b(k, j);
              exact += ab;
              mag += std::fabs(ab);
            }
            const double g = bf16_to_f32(got[i * N + j]);
            const double bound = std::ldexp(std::fabs(exact), -8) + (K + 2) * std::ldexp(mag, -23);
            if (!(std::fabs(g - exact) <= bound) && bad++ == 0)
              ADD_FAILURE() << what << ": element (" << i << "," << j << ") = " << g << ", exact "
                            << exact << ", bound " << bound;
            differ += got[i * N + j] != f32_to_bf16(ref[i * N + j]);
          }
        }
        EXPECT_EQ(bad, 0) << what;
        EXPECT_LE(differ, std::max<int64_t>(2, M * N / 100)) << what << ": of " << M * N;
      }
    }
  }
}

// An element's bits depend only on its row of op(A), its column of op(B) and K: a sub-block
// computed alone (other M and N, other offsets in the tiles) and a run on one thread give the
// whole product's bits, in every transpose.
TEST_F(Bf16Gemm, ElementBitsIndependentOfShapeAndThreads) {
  const int64_t M = 75, N = 90, K = 70;
  for (int t = 0; t < 4; ++t) {
    const Problem p = make_problem(M, N, K, t & 1, t & 2, 500 + t);
    const std::vector<float> none;
    const std::vector<uint16_t> whole =
        run_native(p, Bf16Epilogue::kOverwrite, none, std::vector<uint16_t>(M * N));
    // Rows [i0, i0+m) x columns [j0, j0+n) alone: the operands are views at an offset.
    for (auto [i0, m, j0, n] :
         {std::array<int64_t, 4>{5, 3, 17, 40}, {40, 35, 0, 1}, {0, 75, 61, 29}}) {
      const uint16_t* a = p.ta ? p.A.data() + i0 : p.A.data() + i0 * K;
      const uint16_t* b = p.tb ? p.B.data() + j0 * K : p.B.data() + j0;
      std::vector<uint16_t> part(m * n);
      gemm_bf16(Bf16GemmPath::kAmx, p.ta, p.tb, m, n, K, a, p.lda(), b, p.ldb(), part.data(), n,
                Bf16Epilogue::kOverwrite);
      int64_t differ = 0;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) differ += part[i * n + j] != whole[(i0 + i) * N + j0 + j];
      EXPECT_EQ(differ, 0) << "t=" << t << " block at (" << i0 << "," << j0 << ")";
    }
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const std::vector<uint16_t> one =
        run_native(p, Bf16Epilogue::kOverwrite, none, std::vector<uint16_t>(M * N));
    omp_set_num_threads(threads);
    EXPECT_EQ(one, whole) << "t=" << t << ": 1 thread against " << threads;
  }
}

// The matmul ops take the native path with bf16 matrices (the bias may be f32), and the
// widening reference with f16 or mixed storage, or when the reference is chosen.
TEST_F(Bf16Gemm, MatmulOpsTakeTheNativePathWhenAllMatricesAreBf16) {
  const int64_t N = 37, C = 40, OC = 50;
  std::vector<uint16_t> inp = randn_bf16(N * C, 1), w = randn_bf16(OC * C, 2), out(N * OC),
                        dout = randn_bf16(N * OC, 3), dinp(N * C), dw(OC * C);
  std::vector<float> bias = tide::test::randn(OC, 4), dbias(OC), out32(N * OC);
  auto bf = [](std::vector<uint16_t>& v, Shape s) { return Tensor(v.data(), s, DType::BF16); };
  const OpContext ctx;
  auto calls_of = [&](const std::function<void()>& f) {
    const int64_t before = bf16_gemm_native_calls();
    f();
    return bf16_gemm_native_calls() - before;
  };
  set_bf16_gemm_path(Bf16GemmPath::kAmx);
  EXPECT_EQ(calls_of([&] {
              matmul_forward(ctx, bf(out, {N, OC}), bf(inp, {N, C}), bf(w, {OC, C}),
                             Tensor(bias.data(), {OC}, DType::F32));
              matmul_backward_input(ctx, bf(dinp, {N, C}), bf(dout, {N, OC}), bf(w, {OC, C}));
              matmul_backward_weight(ctx, bf(dw, {OC, C}), Tensor(dbias.data(), {OC}, DType::F32),
                                     bf(dout, {N, OC}), bf(inp, {N, C}));
            }),
            3);
  // An f32 output with bf16 factors: the reference.
  EXPECT_EQ(calls_of([&] {
              matmul_forward(ctx, Tensor(out32.data(), {N, OC}, DType::F32), bf(inp, {N, C}),
                             bf(w, {OC, C}), Tensor());
            }),
            0);
  set_bf16_gemm_path(Bf16GemmPath::kReference);
  EXPECT_EQ(calls_of([&] {
              matmul_forward(ctx, bf(out, {N, OC}), bf(inp, {N, C}), bf(w, {OC, C}), Tensor());
            }),
            0);
}

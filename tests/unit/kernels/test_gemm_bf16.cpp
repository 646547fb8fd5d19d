// The native bf16 GEMM (cpu/gemm_bf16.h), each path this CPU has (AMX, AVX512-BF16; the others
// skipped, saying why): against exact sums and the widening reference on shapes that are not
// multiples of its tiles, in the four transposes, with bf16 or f32 factors and outputs; each
// element's bits independent of the shape around it and of the thread count; and the matmul
// ops taking it.
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

// A matrix of random values stored in bf16 or f32 (the f32 ones are not bf16 values).
struct Mat {
  DType dtype;
  std::vector<uint16_t> h;
  std::vector<float> f;  // the values (bf16: widened); for an output, f32 storage
  Mat(int64_t n, uint64_t seed, DType dt) : dtype(dt), f(tide::test::randn(n, seed)) {
    if (dtype == DType::F32) return;
    h.resize(n);
    for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(f[i]), f[i] = bf16_to_f32(h[i]);
  }
  void* data() { return dtype == DType::F32 ? static_cast<void*>(f.data()) : h.data(); }
  const void* data() const { return const_cast<Mat*>(this)->data(); }
  // Element i as stored now (after a kernel wrote it).
  double read(int64_t i) const { return dtype == DType::F32 ? f[i] : bf16_to_f32(h[i]); }
};

struct Problem {
  int64_t M, N, K;
  bool ta, tb;
  Mat A, B;
  int64_t lda() const { return ta ? M : K; }
  int64_t ldb() const { return tb ? K : N; }
  double a(int64_t i, int64_t k) const { return ta ? A.f[k * M + i] : A.f[i * K + k]; }
  double b(int64_t k, int64_t j) const { return tb ? B.f[j * K + k] : B.f[k * N + j]; }
  GemmOperand opa() const { return {A.data(), lda(), ta, A.dtype}; }
  GemmOperand opb() const { return {B.data(), ldb(), tb, B.dtype}; }
};

Problem make_problem(int64_t M, int64_t N, int64_t K, bool ta, bool tb, uint64_t seed,
                     DType da = DType::BF16, DType db = DType::BF16) {
  return Problem{M, N, K, ta, tb, Mat(M * K, seed, da), Mat(K * N, seed + 1, db)};
}

Mat run_native(Bf16GemmPath path, const Problem& p, GemmEpilogue e, const std::vector<float>& bias,
               Mat C) {
  gemm_bf16(path, p.M, p.N, p.K, p.opa(), p.opb(), C.data(), C.dtype, p.N, e, bias.data());
  return C;
}

std::string name(DType t) {
  return std::string(dtype_name(t));
}

}  // namespace

// One native path per instance; restores the process's path after each test.
class Bf16Gemm : public ::testing::TestWithParam<Bf16GemmPath> {
 protected:
  void SetUp() override {
    if (!bf16_gemm_path_supported(path()))
      GTEST_SKIP() << "this CPU (or kernel) has no " << bf16_gemm_path_name(path());
    saved_ = bf16_gemm_path();
  }
  void TearDown() override {
    if (bf16_gemm_path_supported(path())) set_bf16_gemm_path(saved_);
  }
  Bf16GemmPath path() const { return GetParam(); }
  Bf16GemmPath saved_ = Bf16GemmPath::kReference;
};

// Every element within its error bound of the exact sum (f32 accumulation of exact products:
// (terms K + 2) 2^-23 sum |a b|, then one rounding: 2^-8 relative into bf16, 2^-24 into f32),
// and, into bf16, the widening reference's bits (f32 sgemm, rounded once) in all but 1% of the
// elements (or 2). Factors bf16, or one of them f32 (three bf16 terms each); outputs bf16 or
// f32. K = 1 and 3 catch a lost term of an f32 factor (2^-9 relative).
TEST_P(Bf16Gemm, MatchesExactSumsAndTheWideningReferenceOnOddShapes) {
  const std::vector<std::array<int64_t, 3>> shapes = {{1, 1, 1},     {1, 7, 3},     {17, 33, 31},
                                                      {70, 65, 33},  {33, 129, 64}, {130, 47, 97},
                                                      {45, 300, 161}};
  const std::vector<std::array<DType, 3>> dtypes = {{DType::BF16, DType::BF16, DType::BF16},
                                                    {DType::BF16, DType::BF16, DType::F32},
                                                    {DType::F32, DType::BF16, DType::BF16},
                                                    {DType::BF16, DType::F32, DType::F32}};
  uint64_t seed = 100;
  for (auto [M, N, K] : shapes) {
    for (auto [da, db, dc] : dtypes) {
      for (int t = 0; t < 4; ++t) {
        const Problem p = make_problem(M, N, K, t & 1, t & 2, seed += 2, da, db);
        const std::vector<float> bias = Mat(N, seed + 7, DType::BF16).f;
        const Mat C0(M * N, seed + 9, dc);
        const int terms = da == DType::F32 || db == DType::F32 ? 3 : 1;
        for (GemmEpilogue e :
             {GemmEpilogue::kOverwrite, GemmEpilogue::kAddBias, GemmEpilogue::kAccumulate}) {
          const std::string what =
              "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
              " ta=" + std::to_string(p.ta) + " tb=" + std::to_string(p.tb) + " " + name(da) + "," +
              name(db) + "->" + name(dc) + " epilogue " + std::to_string(static_cast<int>(e));
          const Mat got = run_native(path(), p, e, bias, C0);
          // The widening reference: f32 sgemm on the stored values, beta = 1 onto the start.
          std::vector<float> ref(M * N, 0.0f);
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j)
              ref[i * N + j] = e == GemmEpilogue::kAddBias      ? bias[j]
                               : e == GemmEpilogue::kAccumulate ? C0.f[i * N + j]
                                                                : 0.0f;
          gemm(p.ta, p.tb, M, N, K, 1.0f, p.A.f.data(), p.lda(), p.B.f.data(), p.ldb(),
               e == GemmEpilogue::kOverwrite ? 0.0f : 1.0f, ref.data(), N);
          int64_t bad = 0, differ = 0;
          for (int64_t i = 0; i < M; ++i) {
            for (int64_t j = 0; j < N; ++j) {
              double exact = 0.0, mag = 0.0;
              if (e == GemmEpilogue::kAddBias) exact = bias[j], mag = std::fabs(exact);
              if (e == GemmEpilogue::kAccumulate) exact = C0.f[i * N + j], mag = std::fabs(exact);
              for (int64_t k = 0; k < K; ++k) {
                const double ab = p.a(i, k) * p.b(k, j);
                exact += ab;
                mag += std::fabs(ab);
              }
              const double g = got.read(i * N + j);
              const double bound = std::ldexp(std::fabs(exact), dc == DType::BF16 ? -8 : -24) +
                                   (terms * K + 2) * std::ldexp(mag, -23);
              if (!(std::fabs(g - exact) <= bound) && bad++ == 0)
                ADD_FAILURE() << what << ": element (" << i << "," << j << ") = " << g << ", exact "
                              << exact << ", bound " << bound;
              if (dc == DType::BF16) differ += got.h[i * N + j] != f32_to_bf16(ref[i * N + j]);
            }
          }
          EXPECT_EQ(bad, 0) << what;
          EXPECT_LE(differ, std::max<int64_t>(2, M * N / 100)) << what << ": of " << M * N;
        }
      }
    }
  }
}

// An element's bits depend only on its row of op(A), its column of op(B) and K: a sub-block
// computed alone (other M and N, other offsets in the tiles) and a run on one thread give the
// whole product's bits, in every transpose, with a bf16 or an f32 A.
TEST_P(Bf16Gemm, ElementBitsIndependentOfShapeAndThreads) {
  const int64_t M = 75, N = 90, K = 70;
  const std::vector<float> none;
  for (int t = 0; t < 8; ++t) {
    const Problem p =
        make_problem(M, N, K, t & 1, t & 2, 500 + t, t & 4 ? DType::F32 : DType::BF16);
    const std::vector<uint16_t> whole =
        run_native(path(), p, GemmEpilogue::kOverwrite, none, Mat(M * N, 1, DType::BF16)).h;
    // Rows [i0, i0+m) x columns [j0, j0+n) alone: the operands are views at an offset.
    for (auto [i0, m, j0, n] :
         {std::array<int64_t, 4>{5, 3, 17, 40}, {40, 35, 0, 1}, {0, 75, 61, 29}}) {
      GemmOperand a = p.opa(), b = p.opb();
      a.p = static_cast<const char*>(a.p) +
            (p.ta ? i0 : i0 * K) * static_cast<int64_t>(dtype_size(a.dtype));
      b.p = static_cast<const char*>(b.p) + (p.tb ? j0 * K : j0) * 2;
      std::vector<uint16_t> part(m * n);
      gemm_bf16(path(), m, n, K, a, b, part.data(), DType::BF16, n, GemmEpilogue::kOverwrite);
      int64_t differ = 0;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) differ += part[i * n + j] != whole[(i0 + i) * N + j0 + j];
      EXPECT_EQ(differ, 0) << "t=" << t << " block at (" << i0 << "," << j0 << ")";
    }
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const std::vector<uint16_t> one =
        run_native(path(), p, GemmEpilogue::kOverwrite, none, Mat(M * N, 1, DType::BF16)).h;
    omp_set_num_threads(threads);
    EXPECT_EQ(one, whole) << "t=" << t << ": 1 thread against " << threads;
  }
}

// The matmul ops take the native path with bf16 matrices (the bias may be f32), an f32 output
// (the LM head's logits) or, on AMX, one f32 factor (their gradient), and the widening
// reference with f16 or all-f32 storage, or when it is chosen.
TEST_P(Bf16Gemm, MatmulOpsTakeTheNativePathForBf16Matrices) {
  const int64_t N = 37, C = 40, OC = 50;
  Mat inp(N * C, 1, DType::BF16), w(OC * C, 2, DType::BF16), out(N * OC, 0, DType::BF16),
      dout(N * OC, 3, DType::BF16), dinp(N * C, 4, DType::BF16), dw(OC * C, 5, DType::BF16);
  Mat inp32(N * C, 6, DType::F32), w32(OC * C, 7, DType::F32), out32(N * OC, 8, DType::F32);
  std::vector<float> bias = tide::test::randn(OC, 4), dbias(OC);
  std::vector<uint16_t> w16(OC * C);
  auto v = [](Mat& m, Shape s) { return Tensor(m.data(), s, m.dtype); };
  const OpContext ctx;
  auto calls_of = [&](const std::function<void()>& f) {
    const int64_t before = bf16_gemm_native_calls();
    f();
    return bf16_gemm_native_calls() - before;
  };
  set_bf16_gemm_path(path());
  EXPECT_EQ(calls_of([&] {
              matmul_forward(ctx, v(out, {N, OC}), v(inp, {N, C}), v(w, {OC, C}),
                             Tensor(bias.data(), {OC}, DType::F32));
              matmul_backward_input(ctx, v(dinp, {N, C}), v(dout, {N, OC}), v(w, {OC, C}));
              matmul_backward_weight(ctx, v(dw, {OC, C}), Tensor(dbias.data(), {OC}, DType::F32),
                                     v(dout, {N, OC}), v(inp, {N, C}));
              // The head: f32 logits from bf16 factors, and their f32 gradient as a factor (on
              // AVX512-BF16 the reference's: three terms would triple the work).
              matmul_forward(ctx, v(out32, {N, OC}), v(inp, {N, C}), v(w, {OC, C}), Tensor());
              matmul_backward_input(ctx, v(dinp, {N, C}), v(out32, {N, OC}), v(w, {OC, C}));
            }),
            path() == Bf16GemmPath::kAvx512Bf16 ? 4 : 5);
  EXPECT_EQ(calls_of([&] {
              matmul_forward(ctx, v(out32, {N, OC}), v(inp32, {N, C}), v(w32, {OC, C}), Tensor());
              matmul_forward(ctx, v(out, {N, OC}), v(inp, {N, C}),
                             Tensor(w16.data(), {OC, C}, DType::F16), Tensor());
            }),
            0);
  set_bf16_gemm_path(Bf16GemmPath::kReference);
  EXPECT_EQ(calls_of([&] {
              matmul_forward(ctx, v(out, {N, OC}), v(inp, {N, C}), v(w, {OC, C}), Tensor());
            }),
            0);
}

INSTANTIATE_TEST_SUITE_P(NativePaths, Bf16Gemm,
                         ::testing::Values(Bf16GemmPath::kAmx, Bf16GemmPath::kAvx512Bf16),
                         [](const ::testing::TestParamInfo<Bf16GemmPath>& info) {
                           return std::string(bf16_gemm_path_name(info.param));
                         });

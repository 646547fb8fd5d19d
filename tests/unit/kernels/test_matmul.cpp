#include <omp.h>

#include "kernel_test_util.h"

using namespace tide;
using namespace tide::test;

TEST(Matmul, ForwardMatchesNaiveProduct) {
  const int N = 7, C = 5, OC = 3;
  auto inp = randn(N * C, 1), w = randn(OC * C, 2), b = randn(OC, 3);
  std::vector<float> out(N * OC), out_nobias(N * OC);
  matmul_forward(cpu_ctx(), view(out, {N, OC}), view(inp, {N, C}), view(w, {OC, C}), view(b, {OC}));
  matmul_forward(cpu_ctx(), view(out_nobias, {N, OC}), view(inp, {N, C}), view(w, {OC, C}),
                 Tensor{});
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double s = 0;
      for (int c = 0; c < C; ++c) s += double(inp[n * C + c]) * w[o * C + c];
      EXPECT_NEAR(out_nobias[n * OC + o], s, 1e-5);
      EXPECT_NEAR(out[n * OC + o], s + b[o], 1e-5);
    }
}

TEST(Matmul, BackwardMatchesFiniteDifferences) {
  const int B = 2, T = 5, C = 8, OC = 6;
  auto inp = randn(B * T * C, 1), w = randn(OC * C, 2, 0.5f), b = randn(OC, 3),
       R = randn(B * T * OC, 4);
  std::vector<float> out(B * T * OC), dinp(B * T * C), dw(OC * C), db(OC);
  auto loss = [&] {
    matmul_forward(cpu_ctx(), view(out, {B, T, OC}), view(inp, {B, T, C}), view(w, {OC, C}),
                   view(b, {OC}));
    return dot(out, R);
  };
  loss();
  expect_accumulates("matmul_backward_input",
                     [&] {
                       matmul_backward_input(cpu_ctx(), view(dinp, {B, T, C}), view(R, {B, T, OC}),
                                             view(w, {OC, C}));
                     },
                     {&dinp});
  expect_accumulates("matmul_backward_weight",
                     [&] {
                       matmul_backward_weight(cpu_ctx(), view(dw, {OC, C}), view(db, {OC}),
                                              view(R, {B, T, OC}), view(inp, {B, T, C}));
                     },
                     {&dw, &db});
  check_gradient("dinp", inp, dinp, loss);
  check_gradient("dweight", w, dw, loss);
  check_gradient("dbias", b, db, loss);

  // Without a bias the weight gradient is the same and nothing else is written.
  std::vector<float> dw2(OC * C);
  matmul_backward_weight(cpu_ctx(), view(dw2, {OC, C}), Tensor{}, view(R, {B, T, OC}),
                         view(inp, {B, T, C}));
  EXPECT_EQ(dw2, dw);
}

// Shapes that span several gemm tiles (cpu/gemm.cpp: 256 x 512 here) with ragged edges, so the
// tiles' offsets for every transpose case are checked against a naive product, on 1 and 3 threads.
TEST(Matmul, MultiTileProductsMatchNaiveAndAreThreadIndependent) {
  const int N = 600, C = 40, OC = 1100;
  auto inp = randn(N * C, 1), w = randn(OC * C, 2), b = randn(OC, 3), dout = randn(N * OC, 4);
  struct Result {
    std::vector<float> out, dinp, dw, db;
  };
  auto run = [&](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    Result r{std::vector<float>(N * OC), std::vector<float>(N * C, 1.0f),
             std::vector<float>(OC * C, 2.0f), std::vector<float>(OC, 3.0f)};
    matmul_forward(cpu_ctx(), view(r.out, {N, OC}), view(inp, {N, C}), view(w, {OC, C}),
                   view(b, {OC}));
    matmul_backward_input(cpu_ctx(), view(r.dinp, {N, C}), view(dout, {N, OC}), view(w, {OC, C}));
    matmul_backward_weight(cpu_ctx(), view(r.dw, {OC, C}), view(r.db, {OC}), view(dout, {N, OC}),
                           view(inp, {N, C}));
    omp_set_num_threads(saved);
    return r;
  };
  const Result r1 = run(1), r3 = run(3);
  EXPECT_EQ(r1.out, r3.out);
  EXPECT_EQ(r1.dinp, r3.dinp);
  EXPECT_EQ(r1.dw, r3.dw);
  EXPECT_EQ(r1.db, r3.db);
  // Naive references (in double) on a sample of rows/columns, incl. the last of each tile.
  for (int n : {0, 255, 256, 599}) {
    for (int o : {0, 511, 512, 1023, 1024, 1099}) {
      double s = b[o];
      for (int c = 0; c < C; ++c) s += double(inp[n * C + c]) * w[o * C + c];
      EXPECT_NEAR(r1.out[n * OC + o], s, 1e-4) << n << "," << o;
    }
    for (int c : {0, 39}) {
      double s = 1.0;  // the initial value: backward accumulates
      for (int o = 0; o < OC; ++o) s += double(dout[n * OC + o]) * w[o * C + c];
      EXPECT_NEAR(r1.dinp[n * C + c], s, 1e-3) << n << "," << c;
    }
  }
  for (int o : {0, 255, 256, 511, 512, 1099}) {
    for (int c : {0, 39}) {
      double s = 2.0;
      for (int n = 0; n < N; ++n) s += double(dout[n * OC + o]) * inp[n * C + c];
      EXPECT_NEAR(r1.dw[o * C + c], s, 1e-3) << o << "," << c;
    }
    double s = 3.0;
    for (int n = 0; n < N; ++n) s += dout[n * OC + o];
    EXPECT_NEAR(r1.db[o], s, 1e-3) << o;
  }
}

// A product too small for 256 x 512 tiles to keep the threads busy (the weight gradient of a
// C = 192 layer: (192,192) over N = 1024 rows) is split into 64 x 64 tiles (cpu/gemm.cpp):
// every element against the naive sum, the bits the same on 1 and 3 threads.
TEST(Matmul, SmallWeightGradientSplitMatchesNaiveAndIsThreadIndependent) {
  const int N = 1024, C = 192, OC = 192;
  auto inp = randn(N * C, 5), dout = randn(N * OC, 6);
  auto run = [&](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<float> dw(OC * C, 0.5f);
    matmul_backward_weight(cpu_ctx(), view(dw, {OC, C}), Tensor{}, view(dout, {N, OC}),
                           view(inp, {N, C}));
    omp_set_num_threads(saved);
    return dw;
  };
  const std::vector<float> dw1 = run(1), dw3 = run(3);
  EXPECT_EQ(dw1, dw3);
  for (int o = 0; o < OC; ++o)
    for (int c = 0; c < C; ++c) {
      double s = 0.5;
      for (int n = 0; n < N; ++n) s += double(dout[n * OC + o]) * inp[n * C + c];
      ASSERT_NEAR(dw1[o * C + c], s, 1e-3) << o << "," << c;
    }
}

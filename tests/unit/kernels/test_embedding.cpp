#include "kernel_test_util.h"

using namespace tide;
using namespace tide::test;

TEST(Embedding, ForwardAddsTokenAndPositionRows) {
  const int B = 2, T = 3, C = 4, V = 5, maxT = 4;
  std::vector<int32_t> tokens = {1, 4, 1, 0, 2, 3};
  auto wte = randn(V * C, 1), wpe = randn(maxT * C, 2);
  std::vector<float> out(B * T * C);
  embedding_forward(cpu_ctx(), view(out, {B, T, C}), view(tokens, {B, T}), view(wte, {V, C}),
                    view(wpe, {maxT, C}));
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c)
        EXPECT_EQ(out[(b * T + t) * C + c], wte[tokens[b * T + t] * C + c] + wpe[t * C + c]);
}

TEST(Embedding, BackwardMatchesFiniteDifferences) {
  const int B = 2, T = 5, C = 8, V = 11, maxT = 7;
  // Token 3 appears three times: its gradient row is a sum (scatter-add).
  std::vector<int32_t> tokens = {3, 0, 3, 10, 5, 7, 3, 1, 9, 2};
  auto wte = randn(V * C, 1), wpe = randn(maxT * C, 2), R = randn(B * T * C, 3);
  std::vector<float> out(B * T * C), dwte(V * C), dwpe(maxT * C);
  auto loss = [&] {
    embedding_forward(cpu_ctx(), view(out, {B, T, C}), view(tokens, {B, T}), view(wte, {V, C}),
                      view(wpe, {maxT, C}));
    return dot(out, R);
  };
  loss();
  expect_accumulates("embedding_backward",
                     [&] {
                       embedding_backward(cpu_ctx(), view(dwte, {V, C}), view(dwpe, {maxT, C}),
                                          view(R, {B, T, C}), view(tokens, {B, T}));
                     },
                     {&dwte, &dwpe});
  check_gradient("dwte", wte, dwte, loss);
  check_gradient("dwpe", wpe, dwpe, loss);
  // Rows of unused tokens and positions >= T get no gradient.
  for (int c = 0; c < C; ++c) {
    EXPECT_EQ(dwte[4 * C + c], 0.0f);
    EXPECT_EQ(dwpe[6 * C + c], 0.0f);
  }
}

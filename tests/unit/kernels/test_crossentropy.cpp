#include <cmath>

#include "kernel_test_util.h"
#include "op_cases.h"

using namespace tide;
using namespace tide::test;

namespace {
// -log softmax(x)[target] in double.
double reference_loss(const float* x, int V, int target) {
  double m = x[0];
  for (int v = 1; v < V; ++v) m = std::max(m, double(x[v]));
  double s = 0;
  for (int v = 0; v < V; ++v) s += std::exp(x[v] - m);
  return m + std::log(s) - x[target];
}
}  // namespace

TEST(CrossEntropy, ForwardMatchesReferenceAndIgnoresNegativeTargets) {
  const int B = 2, T = 3, V = 11;
  auto logits = randn(B * T * V, 41, 3.0f);
  logits[V + 2] = 1000.0f;  // a huge logit must not overflow
  std::vector<int32_t> targets = {0, 2, -1, 10, 5, -100};
  std::vector<float> losses(B * T, -1.0f);
  crossentropy_forward(cpu_ctx(), view(losses, {B, T}), view(logits, {B, T, V}),
                       view(targets, {B, T}));
  for (int n = 0; n < B * T; ++n) {
    if (targets[n] < 0) {
      EXPECT_EQ(losses[n], 0.0f);
    } else {
      EXPECT_NEAR(losses[n], reference_loss(&logits[n * V], V, targets[n]), 1e-5);
    }
  }
  EXPECT_NEAR(losses[1], 0.0, 1e-6);  // the huge logit is the target: probability 1
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferences) {
  const int B = 2, T = 5, V = 11;
  const float dloss = 0.37f;
  auto logits = randn(B * T * V, 42, 2.0f);
  std::vector<int32_t> targets = {3, 0, 10, -1, 7, 7, 1, 2, 9, 4};  // row 3 ignored
  std::vector<float> losses(B * T), dlogits(B * T * V, 123.0f);     // overwritten, not accumulated
  auto loss = [&] {
    crossentropy_forward(cpu_ctx(), view(losses, {B, T}), view(logits, {B, T, V}),
                         view(targets, {B, T}));
    double s = 0;
    for (float l : losses) s += l;
    return dloss * s;
  };
  crossentropy_backward(cpu_ctx(), view(dlogits, {B, T, V}), view(logits, {B, T, V}),
                        view(targets, {B, T}), dloss);
  for (int v = 0; v < V; ++v) EXPECT_EQ(dlogits[3 * V + v], 0.0f);  // ignored row
  check_gradient("dlogits", logits, dlogits, loss);

  // In place (dlogits aliasing logits) gives the same bits.
  std::vector<float> buf = logits;
  crossentropy_backward(cpu_ctx(), view(buf, {B, T, V}), view(buf, {B, T, V}),
                        view(targets, {B, T}), dloss);
  EXPECT_EQ(buf, dlogits);
}

// The fused classifier (crossentropy_forward_backward, which a training step's head runs) has
// the bits of crossentropy_forward then crossentropy_backward: into separate buffers and in
// place, with ignored targets, in f32 and in bf16 storage, on rows that end in a partial block
// of 8 logits.
TEST(CrossEntropy, ForwardBackwardHasTheBitsOfTheTwoOps) {
  using tide::testing::HostTensor;
  const int64_t N = 6, V = 1001;
  const float dloss = 0.0625f;
  std::vector<int32_t> targets = {3, -1, 1000, 0, -7, 512};
  const Tensor tgt = view(targets, {N});
  for (DType dtype : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    HostTensor logits = tide::testing::randn("logits", {N, V}, 77, 4.0f);
    if (dtype != DType::F32) logits = tide::testing::narrowed(logits, dtype);
    auto tensor = [](HostTensor& t) { return Tensor(t.data(), t.shape, t.dtype); };
    // The two ops, the backward in place as the model ran them.
    HostTensor losses = tide::testing::zeros("losses", {N}), grad = logits;
    crossentropy_forward(cpu_ctx(), tensor(losses), tensor(logits), tgt);
    crossentropy_backward(cpu_ctx(), tensor(grad), tensor(grad), tgt, dloss);
    // Fused, into another buffer and in place.
    HostTensor fused_losses = tide::testing::zeros("losses", {N}), fused_grad = logits;
    fused_grad.f.assign(fused_grad.f.size(), 7.0f);    // overwritten (f32)
    fused_grad.h.assign(fused_grad.h.size(), 0x4040);  // overwritten (bf16: 3.0)
    crossentropy_forward_backward(cpu_ctx(), tensor(fused_losses), tensor(fused_grad),
                                  tensor(logits), tgt, dloss);
    HostTensor in_place_losses = tide::testing::zeros("losses", {N}), in_place = logits;
    crossentropy_forward_backward(cpu_ctx(), tensor(in_place_losses), tensor(in_place),
                                  tensor(in_place), tgt, dloss);
    for (const HostTensor* l : {&fused_losses, &in_place_losses}) EXPECT_EQ(l->f, losses.f);
    for (const HostTensor* g : {&fused_grad, &in_place}) {
      EXPECT_EQ(g->f, grad.f);
      EXPECT_EQ(g->h, grad.h);
    }
    EXPECT_EQ(losses.f[1], 0.0f);  // an ignored target
    EXPECT_GT(losses.f[2], 0.0f);
  }
}
